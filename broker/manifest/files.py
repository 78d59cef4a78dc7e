"""Which files a manifest load reads: files as named, and the *.yaml and *.yml files of a
directory, searched recursively (hidden directories skipped), sorted by their path's
parts; each with its absolute path, the key that tells a file named twice."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

SUFFIXES = (".yaml", ".yml")


def find_manifest_files(paths: Sequence[Path]) -> list[Path]:
    """Files as given; directories searched recursively for *.yaml and *.yml, sorted.

    Hidden directories (.git, .github, ...) are not searched. A file reached
    twice (named and inside a named directory) is listed once, first place kept.
    """
    files: list[Path] = []
    seen: set[str] = set()
    for path in map(Path, paths):
        for file in _files_of(path):
            key = os.path.abspath(file)
            if key not in seen:
                seen.add(key)
                files.append(file)
    return files


def _files_of(path: Path) -> list[Path]:
    """`path` itself, or the YAML files under a directory, sorted by their path's parts."""
    return [file for file, _ in keyed_files(path)]


def keyed_files(path: Path) -> list[tuple[Path, str]]:
    """`_files_of(path)`, each with its absolute path (`os.path.abspath`: the key that
    tells a file named twice), made without normalising every path again."""
    if not path.is_dir():
        return [(path, os.path.abspath(path))]
    found: list[tuple[str, ...]] = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        relative = os.path.relpath(root, path)
        parts = () if relative == os.curdir else tuple(relative.split(os.sep))
        found.extend((*parts, name) for name in names if name.endswith(SUFFIXES))
    # os.path.join of each, and a Path made from one string (a third of joinpath's cost):
    # the walk's names are never empty, absolute, `.` or `..`, so no joined part is lost
    base, absolute = (_joinable(name) for name in (str(path), os.path.abspath(path)))
    keyed = []
    for parts in sorted(found):
        relative = os.sep.join(parts)
        keyed.append((Path(base + relative), absolute + relative))
    return keyed


def _joinable(folder: str) -> str:
    """`folder` as os.path.join puts a name after it (a separator unless it ends in one)."""
    return folder if folder.endswith(os.sep) else folder + os.sep
