"""`run.workdir`, `run.setup` and `run.image` through the real entry point: `broker
submit` packs the workdir, `broker run` delivers it to the sandbox, runs setup once and
the command in it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.fakes.gitrepo import isolate_git

JOB = """\
apiVersion: broker/v1
name: relative
team: ml
run:
  workdir: .
  setup: echo installed >> setup.log
  command: python3 train.py
"""
TRAIN = """\
from pathlib import Path
print("read:", Path("data/in.txt").read_text().strip())
print("setup ran", len(Path("setup.log").read_text().splitlines()), "time(s)")
Path("out.txt").write_text("written in the workdir")
"""


def project(root: Path, job: str = JOB, train: str = TRAIN) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "in.txt").write_text("relative paths work\n")
    (root / "train.py").write_text(train)
    (root / "job.yaml").write_text(job)
    return root / "job.yaml"


def attempt_dirs(state: Path) -> list[Path]:
    return sorted((state.parent / f"{state.stem}-sandbox").glob("a-*"))


def test_a_job_runs_in_its_workdir_after_its_setup(capsys, tmp_path):
    state = tmp_path / "state.db"
    manifest = project(tmp_path / "proj")
    submitted = run_cli(capsys, "submit", str(manifest), "--state", str(state), "-o", "json")
    assert submitted.code == 0, submitted.stderr
    (tmp_path / "proj" / "train.py").write_text("raise SystemExit('edited after submit')\n")
    ran = run_cli(capsys, "run", "--poll", "0.05", "--state", str(state))
    assert ran.code == 0, ran.stderr
    assert "relative succeeded" in ran.stderr
    logs = run_cli(capsys, "logs", "relative", "--state", str(state))
    # The files as submitted ran, in the delivered copy: relative paths, setup once.
    assert "read: relative paths work" in logs.stdout
    assert "setup ran 1 time(s)" in logs.stdout
    (attempt,) = attempt_dirs(state)
    assert (attempt / "workdir" / "out.txt").read_text() == "written in the workdir"
    assert not (tmp_path / "proj" / "out.txt").exists()  # the user's folder is untouched


def test_changed_files_are_a_new_version_and_unchanged_ones_are_not(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    manifest = str(project(tmp_path / "proj"))
    first = run_cli(capsys, "submit", manifest, "--state", state, "-o", "json")
    again = run_cli(capsys, "submit", manifest, "--state", state, "-o", "json")
    assert json.loads(again.stdout)["jobs"][0]["result"] == "unchanged", first.stderr
    (tmp_path / "proj" / "train.py").write_text(TRAIN + "print('v2')\n")
    changed = run_cli(capsys, "submit", manifest, "--state", state, "-o", "json")
    assert json.loads(changed.stdout)["jobs"][0]["result"] == "new version"


def test_files_git_ignores_are_not_delivered(capsys, tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    isolate_git(monkeypatch)
    root = tmp_path / "repo"
    job = JOB.replace("python3 train.py", "python3 train.py && test ! -e secret.env")
    manifest = project(root, job)
    (root / "secret.env").write_text("TOKEN=do-not-ship\n")
    (root / ".gitignore").write_text("secret.env\n")
    subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
    state = str(tmp_path / "state.db")
    assert run_cli(capsys, "submit", str(manifest), "--state", state).code == 0
    ran = run_cli(capsys, "run", "--poll", "0.05", "--state", state)
    assert ran.code == 0 and "relative succeeded" in ran.stderr, ran.stderr
    (attempt,) = attempt_dirs(Path(state))
    assert (attempt / "workdir" / "train.py").exists()
    assert not (attempt / "workdir" / "secret.env").exists()


def test_a_workdir_over_the_limit_is_bad_input_and_nothing_is_submitted(
    capsys, tmp_path, monkeypatch
):
    manifest = project(tmp_path / "proj")
    (tmp_path / "proj" / "data" / "big.bin").write_bytes(b"x" * 1_500_000)
    monkeypatch.setenv("BROKER_WORKDIR_LIMIT_MB", "1")
    state = tmp_path / "state.db"
    result = run_cli(capsys, "submit", str(manifest), "--state", str(state))
    assert result.code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{manifest}:1: run.workdir: {tmp_path / 'proj'} holds 1.5 MB")
    assert "over the 1.0 MB limit" in first and "BROKER_WORKDIR_LIMIT_MB" in first
    assert not state.exists()


IMAGE_JOB = """\
apiVersion: broker/v1
name: boxed
team: ml
placement:
  clouds: [{clouds}]
run:
  image: ghcr.io/acme/train:1.4
"""


def test_an_image_job_without_a_container_runtime_is_refused_at_submit(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # neither podman nor docker
    manifest = tmp_path / "boxed.yaml"
    manifest.write_text(IMAGE_JOB.format(clouds="aws, gcp"))
    state = tmp_path / "state.db"
    result = run_cli(capsys, "submit", str(manifest), "--state", str(state))
    assert result.code == 2
    reason = result.stderr.splitlines()[0]
    assert reason.startswith(f"{manifest}:1: run.image 'ghcr.io/acme/train:1.4' needs a container")
    assert "neither podman nor docker" in reason and not state.exists()
    # Placed only on clouds launched for real, the sandbox never runs it: accepted.
    monkeypatch.setenv("BROKER_CLOUDS", "aws")
    manifest.write_text(IMAGE_JOB.format(clouds="aws"))
    assert run_cli(capsys, "submit", str(manifest), "--state", str(state)).code == 0
