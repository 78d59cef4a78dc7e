"""Validated manifests, remembered by content: a document validated once is not again.

Validating one manifest costs ~0.25 s of pydantic imports and model building,
half of the budget of `broker plan job.yaml`. A document is known by the sha256
of its canonical JSON (`Manifest.digest`); once it has validated, its JobSpec is
saved as JSON under the user cache directory, in a folder named after the code
that validated it (the size and modification time of the manifest model, the spec
types and the GPU and region tables), so a change to any of them starts afresh.
Only documents that validated are cached: an invalid one always gets pydantic's
full, located errors.

A manifest file whose every document validated is remembered too, by the sha256 of
its text: which documents it holds and where (`FileEntry`). Loading it again then
needs neither the YAML parser nor its import (another ~0.05 s of `broker plan`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from broker.spec import JobSpec
from broker.spec_codec import decode, encode
from pricing.userio.atomic import atomic_write_text
from pricing.userio.dirs import user_cache_dir

_SOURCES = (
    "broker/spec_codec.py",
    "broker/manifest/load.py",  # how a file's documents are found and located
    "broker/manifest/model.py",
    "broker/manifest/sections.py",
    "broker/manifest/values.py",
    "broker/manifest/workdir.py",
    "broker/manifest/spec_cache.py",
    "broker/spec.py",
    "pricing/gpus.py",
    "pricing/regions.py",
    "pricing/schema.py",
    "pricing/userio/atomic.py",  # how the cache is written
    "pricing/userio/bounds.py",  # the bounds of every number
    "pricing/userio/reading.py",  # how a file is read
    "pricing/userio/redact.py",  # URIs kept without their user part
    "pricing/userio/settings.py",  # the size caps
    "pricing/userio/dirs.py",  # where it is
    "pricing/userio/errors.py",
    "pricing/userio/locate.py",
    "pricing/userio/suggest.py",
    "pricing/userio/validation.py",
    "pricing/userio/yaml_reader.py",
)


def cache_dir() -> Path:
    """The folder for the code in force (see the module docstring)."""
    import zlib

    root = Path(__file__).resolve().parents[2]
    parts = []
    for name in _SOURCES:
        stat = (root / name).stat()
        parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    key = f"{zlib.crc32('|'.join(parts).encode()):08x}"
    return user_cache_dir() / "specs" / key


WRITES_PER_LOAD = 50  # enough for the manifests a person edits; bulk loads skip the writes


class FileEntry(NamedTuple):
    """One valid document of a manifest file, as `broker.manifest.load` found it."""

    digest: str  # of the document's canonical JSON: the key of its JobSpec
    index: int  # 0-based document number in the file
    line: int  # where its content starts
    name_at: tuple[int, int]  # line and column of its `name`
    span: tuple[int, int]  # where its text starts and ends in the file (characters)


class SpecCache:
    """The cache as one load sees it: reads always; writes for the first
    WRITES_PER_LOAD documents or files only, since a write costs about as much as a
    validation once pydantic is loaded: the cache pays where pydantic's import
    dominates (a few manifests), and a bulk `broker validate` stays as fast."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.writes_left = WRITES_PER_LOAD

    def get(self, digest: str) -> JobSpec | None:
        return get(digest, self.folder)

    def put(self, digest: str, spec: JobSpec) -> None:
        if self._may_write():
            put(digest, spec, self.folder)

    def get_file(self, text: str) -> list[FileEntry] | None:
        """The documents of a manifest file with this text, when it was loaded before."""
        try:
            data = json.loads((self.folder / "files" / f"{_text_digest(text)}.json").read_bytes())
            return [
                FileEntry(d, i, line, (at[0], at[1]), (span[0], span[1]))
                for d, i, line, at, span in data
            ]
        except (OSError, ValueError, TypeError, IndexError):
            return None  # absent or unreadable: parse the file

    def put_file(self, text: str, entries: list[FileEntry]) -> None:
        if self._may_write():
            _write(self.folder / "files", _text_digest(text), [list(e) for e in entries])

    def _may_write(self) -> bool:
        self.writes_left -= 1
        return self.writes_left >= 0


def _text_digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def get(digest: str, folder: Path) -> JobSpec | None:
    try:
        data = json.loads((folder / f"{digest}.json").read_text(encoding="utf-8"))
        return decode(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: validate again


def put(digest: str, spec: JobSpec, folder: Path) -> None:
    _write(folder, digest, encode(spec))


def _write(folder: Path, name: str, data: Any) -> None:
    """`folder/name.json`, atomically."""
    try:
        atomic_write_text(folder / f"{name}.json", json.dumps(data), durable=False)
    except OSError:
        pass  # a read-only cache costs speed, never correctness
