"""`run.workdir`: the folder a job runs in, written relative to its manifest file.

The spec holds it as an absolute path, so that whatever reads the spec (the
providers, which deliver it) knows where it is. The spec cache keeps it as written
instead: the same document in two folders names two working directories, and a
folder deleted since the spec was cached must be an error again. No pydantic here:
the cache path uses it without loading the model.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from broker.spec import JobSpec

MANIFEST_DIR = "manifest_dir"  # the validation context's key for the manifest's folder


def manifest_dir(path: Path) -> Path:
    """The absolute folder of a manifest file (`<stdin>`: the current folder)."""
    return Path(os.path.abspath(Path(path).parent))


def resolve_workdir(written: str, base: Path) -> str:
    """The absolute folder `written` names (`~` expanded; relative to `base`, the
    manifest's folder). ValueError, in a user's words, when it is not a folder."""
    folder = Path(os.path.abspath(base / os.path.expanduser(written)))
    try:
        exists, is_dir = folder.exists(), folder.is_dir()
    except OSError as exc:  # a name too long, links in a loop: said at the field
        raise ValueError(f"{written!r}: {exc.strerror}") from None
    if not exists:
        raise ValueError(f"{written!r}: no such folder ({folder})")
    if not is_dir:
        raise ValueError(f"{written!r} is not a folder ({folder}): workdir names a directory")
    return str(folder)


def as_written(spec: JobSpec, written: str | None) -> JobSpec:
    """`spec` with its workdir as the manifest writes it (what the spec cache keeps)."""
    if spec.run.workdir is None:
        return spec
    return replace(spec, run=replace(spec.run, workdir=written))


def resolved(spec: JobSpec, base: Path) -> JobSpec | None:
    """A cached spec with its workdir resolved against `base`; None when that is no
    longer a folder (validate the document again, for its located error)."""
    if spec.run.workdir is None:
        return spec
    try:
        folder = resolve_workdir(spec.run.workdir, base)
    except ValueError:
        return None
    return replace(spec, run=replace(spec.run, workdir=folder))
