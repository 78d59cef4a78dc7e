"""`broker plan FILE [-o FORMAT]` without typer (broker.cli.direct): which argument lists
take the straight path, that every one of them prints the same bytes on stdout and
stderr with the same exit code as typer's path, over drawn argument lists (good,
broken, infeasible and missing manifests, folders, every format, flags it leaves to
typer), and that the straight path loads no typer, click or rich."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.cli.direct import FORMATS, DirectPlan, recognise
from tests.cli.runner import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "jobs" / "llama-finetune.yaml"
BROKEN = "apiVersion: broker/v1\nname: x\nteam: t\nresources:\n  accelerators: A100:eight\n"
NOWHERE = """\
apiVersion: broker/v1
name: nowhere
team: t
resources:
  accelerators: A100:8
placement:
  regions: [mars-north-1]
run:
  command: python train.py
runtime:
  estimate_hours: 2
"""


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """Named paths the drawn argument lists use."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "a.yaml").write_text(EXAMPLE.read_text())
    (folder / "b.yaml").write_text(EXAMPLE.read_text().replace("name: llama-ft", "name: b"))
    (tmp_path / "broken.yaml").write_text(BROKEN)
    (tmp_path / "nowhere.yaml").write_text(NOWHERE)
    (tmp_path / "notes.yaml").write_text("just: notes\n")
    return {
        "GOOD": str(EXAMPLE),
        "DIR": str(folder),
        "BROKEN": str(tmp_path / "broken.yaml"),
        "NOWHERE": str(tmp_path / "nowhere.yaml"),
        "NOTES": str(tmp_path / "notes.yaml"),
        "MISSING": str(tmp_path / "missing.yaml"),
    }


WORDS = st.sampled_from(
    ["GOOD", "GOOD", "DIR", "BROKEN", "NOWHERE", "NOTES", "MISSING", *FORMATS, "-o",
     "-o", "--output", "JSON", "--top", "2", "--explain", "--wide", "-x", "-", "--", "",
     "--help", "--output=json"]
)  # fmt: skip


@settings(
    max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(words=st.lists(WORDS, max_size=5))
@example(words=["GOOD"])
@example(words=["GOOD", "-o", "json"])
@example(words=["-o", "csv", "DIR"])
@example(words=["DIR", "--output", "markdown"])
@example(words=["BROKEN"])
@example(words=["NOWHERE", "-o", "json"])
@example(words=["MISSING"])
@example(words=["NOTES", "GOOD"])
@example(words=["GOOD", "-o", "JSON"])
@example(words=["GOOD", "-o", "json", "-o", "csv"])
def test_the_straight_path_prints_what_typer_prints(capsys, files, words):
    from broker.cli.entry import main as console
    from broker.cli.main import main as through_typer

    args = ["plan", *(files.get(word, word) for word in words)]
    straight = run_cli(capsys, *args, entry=console)
    typer = run_cli(capsys, *args, entry=through_typer)
    assert straight == typer
    if words in (["GOOD"], ["GOOD", "-o", "json"]):
        assert straight.code == 0 and "llama-ft" in straight.stdout  # not two empty runs


def test_which_argument_lists_go_straight():
    assert recognise(["plan", "a.yaml"]) == DirectPlan(("a.yaml",))
    assert recognise(["plan", "-o", "json", "a", "b"]) == DirectPlan(("a", "b"), "json")
    assert recognise(["plan", "a", "--output", "csv"]) == DirectPlan(("a",), "csv")
    for typer_parses in (
        [], ["plan"], ["validate", "a"], ["plan", "-o", "json"], ["plan", "a", "-o"],
        ["plan", "a", "-o", "JSON"], ["plan", "a", "-o", "json", "-o", "csv"],
        ["plan", "a", "--top", "2"], ["plan", "a", "--help"], ["plan", "-"], ["plan", ""],
        ["plan", "a", "--output=json"], ["-v", "plan", "a"], ["plan", "--", "a"],
    ):  # fmt: skip
        assert recognise(typer_parses) is None, typer_parses


@given(
    st.lists(
        st.sampled_from(["a", "b c", "-o", "--output", "json", "csv", "-x", "x-"])
        | st.text(max_size=4),
        max_size=6,
    )
)
def test_a_recognised_list_is_paths_and_at_most_one_known_format(words):
    plan = recognise(["plan", *words])
    flags = [i for i, w in enumerate(words) if w in ("-o", "--output")]
    if plan is None:
        return
    assert len(flags) <= 1 and plan.paths
    if flags:
        (at,) = flags
        assert words[at + 1] == plan.output in FORMATS
        words = words[:at] + words[at + 2 :]
    else:
        assert plan.output == "table"
    assert list(plan.paths) == words and all(p and not p.startswith("-") for p in words)


def test_the_straight_path_loads_no_typer_click_or_rich(tmp_path):
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted(m for m in ('typer', 'click', 'rich', 'pandas')"
        " if m in sys.modules), file=sys.stderr))\n"
        f"sys.argv = ['broker', 'plan', {str(EXAMPLE)!r}, '-o', 'json']\n"
        "from broker.cli.entry import main\n"
        "main()\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert '"job": "llama-ft"' in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"
