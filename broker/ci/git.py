"""Read-only git plumbing for `broker ci`: revisions, changed files and file contents.

Everything goes through `git` subprocesses that read the object database; nothing
is checked out, and `GIT_OPTIONAL_LOCKS=0` keeps even `git diff` from refreshing
the index, so that a CI step leaves the checkout exactly as it found it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

WORKING_TREE = None  # `head` value meaning "the files on disk", for changed_files
FETCH_HINT = (
    "fetch it first (e.g. `git fetch origin main`; in GitHub Actions check out with fetch-depth: 0)"
)


class GitError(Exception):
    """git cannot answer: not a repository, an unknown revision, git missing."""


@dataclass(frozen=True)
class FileChange:
    """One file that differs between two trees: status A (added), M (modified), D (deleted)."""

    status: str
    path: str  # relative to the repository root, '/'-separated


def run_git(repo: Path, *args: str) -> bytes:
    """stdout of `git -C repo args...`; GitError with git's own message on failure."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, env=env, check=False
        )
    except FileNotFoundError:
        raise GitError("git is not installed (or not on PATH)") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git {args[0]}: " + (message[-1] if message else f"exit {done.returncode}"))
    return done.stdout


def toplevel(path: Path) -> Path:
    """The root of the work tree holding `path` (a file or a directory)."""
    where = path if path.is_dir() else path.parent
    if not where.is_dir():
        raise GitError(f"{path}: no such file or directory")
    try:
        out = run_git(where, "rev-parse", "--show-toplevel")
    except GitError:
        raise GitError(f"{path} is not inside a git work tree") from None
    return Path(out.decode().strip()).resolve()


def commit_of(repo: Path, ref: str) -> str:
    """The full commit id `ref` names; GitError naming the ref when it names none."""
    try:
        out = run_git(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    except GitError:
        raise GitError(f"unknown git revision {ref!r}: {FETCH_HINT}") from None
    return out.decode().strip()


def merge_base(repo: Path, base: str, head: str) -> str:
    """The best common ancestor of two commits: what the change started from."""
    try:
        return run_git(repo, "merge-base", base, head).decode().strip()
    except GitError:
        raise GitError(
            f"{base[:12]} and {head[:12]} have no common ancestor in this clone (a shallow "
            f"clone?): {FETCH_HINT}"
        ) from None


def changed_files(repo: Path, base: str, head: str | None, scope: str) -> list[FileChange]:
    """Files under `scope` that differ from `base` to `head`, renames as delete + add.

    `head` WORKING_TREE compares with the files on disk: tracked files as they are
    now, and untracked ones that are not ignored as added.
    """
    args = ["diff", "--name-status", "--no-renames", "-z", base]
    if head is not WORKING_TREE:
        args.append(head)
    fields = run_git(repo, *args, "--", scope).decode().split("\0")
    changes = [
        FileChange("M" if status[:1] == "T" else status[:1], path)
        for status, path in zip(fields[0::2], fields[1::2], strict=False)
        if status
    ]
    if head is WORKING_TREE:
        untracked = run_git(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", scope)
        changes += [FileChange("A", path) for path in untracked.decode().split("\0") if path]
    return sorted(changes, key=lambda c: c.path)


def list_files(repo: Path, rev: str, scope: str) -> list[str]:
    """Every file under `scope` in the tree of commit `rev`."""
    out = run_git(repo, "ls-tree", "-r", "-z", "--name-only", rev, "--", scope)
    return [path for path in out.decode().split("\0") if path]


def show(repo: Path, rev: str, path: str) -> bytes:
    """The content of `path` as it is in commit `rev` (`git show rev:path`)."""
    return run_git(repo, "show", f"{rev}:{path}")
