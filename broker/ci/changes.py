"""The manifests of a change: every manifest at head, and the base versions of the changed ones.

Head is the working tree (`--head HEAD`, what CI has checked out) or, for any other
ref, its committed files. Base versions are read with `git show <merge-base>:<path>`
into a scratch directory that mirrors the repository, and go through the same
loader as head (`broker.manifest.load`), so that which files are manifests, and
what counts as an error, is decided in one place. Paths in the result are
relative to the repository root, as git and a pull request show them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from broker.ci import git
from broker.manifest.load import SUFFIXES, LoadResult, Manifest, load_manifests
from pricing.userio.errors import UserInputError


@dataclass(frozen=True)
class Revisions:
    """The commits compared: head, the base ref, and where the change forked from it."""

    repo: Path
    base_ref: str
    base: str  # commit id of the base ref
    merge_base: str
    head_ref: str
    head: str  # commit id of the head ref
    working_tree: bool  # head's files are read from disk


@dataclass(frozen=True)
class Changeset:
    """What `broker ci` compares; every path relative to the repository root."""

    revisions: Revisions
    scope: str  # the PATH given, relative to the repository root ("." for all of it)
    changes: tuple[git.FileChange, ...]  # files under scope that differ
    head: LoadResult  # every manifest (and every error) under scope at head
    base: LoadResult  # the base versions of the changed files that existed at base

    @property
    def changed_paths(self) -> frozenset[Path]:
        return frozenset(Path(c.path) for c in self.changes)

    def head_changed(self) -> list[Manifest]:
        """Head manifests in files that the change added or modified."""
        changed = self.changed_paths
        return [m for m in self.head.manifests if m.path in changed]


def revisions(path: Path, base_ref: str, head_ref: str = "HEAD") -> Revisions:
    """Resolve the refs in the repository holding `path`; git.GitError when they do not."""
    repo = git.toplevel(path)
    base = git.commit_of(repo, base_ref)
    head = git.commit_of(repo, head_ref)
    return Revisions(
        repo=repo,
        base_ref=base_ref,
        base=base,
        merge_base=git.merge_base(repo, base, head),
        head_ref=head_ref,
        head=head,
        working_tree=head_ref == "HEAD",
    )


def collect(path: Path, revs: Revisions) -> Changeset:
    """Load head and the base versions of the changed files under `path`."""
    scope = Path(os.path.relpath(path.resolve(), revs.repo)).as_posix()
    head_rev = git.WORKING_TREE if revs.working_tree else revs.head
    changes = tuple(git.changed_files(revs.repo, revs.merge_base, head_rev, scope))
    with tempfile.TemporaryDirectory(prefix="broker-ci-") as scratch:
        if revs.working_tree:
            head = _relative(load_manifests([path]), revs.repo)
        else:
            files = [f for f in git.list_files(revs.repo, revs.head, scope) if f.endswith(SUFFIXES)]
            head = _load_rev(revs.repo, revs.head, files, Path(scratch, "head"), scope, True)
        existed = [c.path for c in changes if c.status != "A"]
        base = _load_rev(revs.repo, revs.merge_base, existed, Path(scratch, "base"), scope, False)
    return Changeset(revs, scope, changes, head, base)


def _load_rev(
    repo: Path, rev: str, files: Iterable[str], root: Path, scope: str, strict: bool
) -> LoadResult:
    """Write `files` as they are in `rev` under `root` and load the manifests under `scope`.

    With `strict` False (the base side: only some files), a scope with no manifest
    at all is not an error.
    """
    for name in files:
        target = root.joinpath(*name.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(git.show(repo, rev, name))
    top = root / scope
    if not top.exists():
        if strict:
            message = f"no job manifests (YAML with apiVersion: broker/v1) in {scope} at {rev[:12]}"
            return LoadResult(errors=[UserInputError(scope, 0, 0, "", message)])
        return LoadResult()
    loaded = load_manifests([top])
    if not strict:
        errors = [e for e in loaded.errors if not (e.line == 0 and e.path == top)]
        loaded = replace(loaded, errors=errors)
    return _relative(loaded, root)


def _relative(loaded: LoadResult, root: Path) -> LoadResult:
    """The same result with every path relative to `root` (the repository or its mirror)."""

    def rel(path: Path) -> Path:
        absolute = path if path.is_absolute() else Path(os.path.abspath(path))
        try:
            return Path(os.path.relpath(absolute.resolve(), root))
        except ValueError:  # another drive (Windows): keep it whole
            return path

    errors = [
        UserInputError(rel(e.path), e.line, e.column, e.field, e.message) for e in loaded.errors
    ]
    return LoadResult(
        manifests=[replace(m, path=rel(m.path)) for m in loaded.manifests],
        errors=errors,
        skipped=[rel(p) for p in loaded.skipped],
        files=[rel(p) for p in loaded.files],
    )
