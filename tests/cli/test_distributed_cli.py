"""examples/distributed through the real entry point: `broker submit` then `broker run`
put the 2-node gang on the sandbox, and both ranks agree on the total."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.runner import run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "distributed"
STEPS = 40


def expected_total(nodes: int, steps: int) -> int:
    """What examples/distributed/allreduce.py adds up: (rank + 1) x (step + 1)."""
    return sum((rank + 1) * (step + 1) for rank in range(nodes) for step in range(steps))


def copy_example(root: Path, steps: int = STEPS) -> Path:
    """The example with fewer steps (a test's run), in a folder of its own."""
    shutil.copytree(EXAMPLE, root)
    manifest = root / "allreduce.yaml"
    text = manifest.read_text().replace("--steps 200", f"--steps {steps}")
    manifest.write_text(text)
    return manifest


def agreed(state: Path) -> list[dict]:
    sandbox = state.parent / f"{state.stem}-sandbox"
    return [json.loads(p.read_text()) for p in sorted(sandbox.rglob("agreed-*.json"))]


def test_the_example_gang_runs_and_its_ranks_agree(capsys, tmp_path):
    state = tmp_path / "state.db"
    manifest = copy_example(tmp_path / "distributed")
    submitted = run_cli(capsys, "submit", str(manifest), "--state", str(state))
    assert submitted.code == 0, submitted.stderr
    ran = run_cli(capsys, "run", "--poll", "0.05", "--state", str(state))
    assert ran.code == 0, ran.stderr
    assert "allreduce succeeded" in ran.stderr
    results = agreed(state)
    assert [r["rank"] for r in results] == [0, 1]
    assert {r["total"] for r in results} == {expected_total(2, STEPS)}
    status = run_cli(capsys, "status", "allreduce", "--state", str(state), "-o", "json")
    assert status.code == 0, status.stderr
    (attempt,) = json.loads(status.stdout)["attempts"]
    nodes = attempt["nodes"]
    assert [(n["rank"], n["state"]) for n in nodes] == [(0, "succeeded"), (1, "succeeded")]
    assert all(n["where"].startswith(attempt["where"]) for n in nodes)
    assert all(n["address"] == "127.0.0.1" for n in nodes)
    table = run_cli(capsys, "status", "allreduce", "--state", str(state))
    assert "rank" in table.stdout and table.stdout.count("succeeded") >= 3
