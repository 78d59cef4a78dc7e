"""A throw-away git repository of job manifests for `broker ci` tests.

Identity and configuration come from the environment of the test alone (author
and committer variables, no global or system config read), so that a developer's
git settings (signing, hooks, default branch) never change a result.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

JOB = """\
apiVersion: broker/v1
name: {name}
team: {team}
resources:
  accelerators: {gpu}
placement:
  spot: {spot}
run:
  command: python train.py
runtime:
  estimate_hours: {hours}
"""
CHECKPOINT = """\
checkpoint:
  uri: s3://ckpt/{name}/
  interval_minutes: 30
"""


def job(
    name: str,
    hours: float = 10,
    gpu: str = "A100:8",
    team: str = "nlp",
    spot: str = "never",
    checkpoint: bool = False,
) -> str:
    """One manifest document; with `checkpoint`, one that may resume after an interruption."""
    text = JOB.format(name=name, team=team, gpu=gpu, spot=spot, hours=f"{hours:g}")
    return text + (CHECKPOINT.format(name=name) if checkpoint else "")


def isolate_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point git at no global or system configuration and give commits an identity."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Broker Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.invalid")


class GitRepo:
    """A repository under `root` with a `main` branch; files are written relative to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.root), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def write(self, path: str, text: str) -> Path:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def remove(self, path: str) -> None:
        (self.root / path).unlink()

    def commit(self, message: str) -> str:
        """Commit every change of the work tree; the new commit's id."""
        self.git("add", "-A")
        self.git("commit", "-q", "--no-verify", "-m", message)
        return self.git("rev-parse", "HEAD")

    def status(self) -> str:
        """`git status` in full: what a read-only command must leave as it was."""
        return self.git("status", "--porcelain=v2", "--branch", "--untracked-files=all")
