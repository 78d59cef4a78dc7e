"""Validated manifests, remembered by content: a document validated once is not again.

Validating one manifest costs ~0.25 s of pydantic imports and model building,
half of the budget of `broker plan job.yaml`, and ~0.8 ms a document after that. A
document is known by the sha256 of its canonical JSON (`Manifest.digest`); once it
has validated, its JobSpec is saved as JSON in one SQLite file under the user cache
directory, in a folder named after the code that validated it (the size and
modification time of the manifest model, the spec types and the GPU and region
tables), so a change to any of them starts afresh. Only documents that validated are
cached: an invalid one always gets pydantic's full, located errors.

A manifest file whose every document validated is remembered too, by the sha256 of
its text: which documents it holds and where (`FileEntry`), and their specs. Loading
it again then needs neither the YAML parser nor its import (another ~0.05 s of
`broker plan`). In a file's row each spec's parts (`spec_codec.PARTS`: requirements,
run, ...) are kept as their own JSON texts, and one load decodes each distinct text
once: manifests made from one template share their parts, and a folder of them
loads in half the time (the parts are frozen, so sharing them is safe).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, NamedTuple

from broker.spec import JobSpec
from broker.spec_codec import PARTS, assemble, decode, decode_part, encode
from pricing.userio.dirs import user_cache_dir

_SOURCES = (
    "broker/spec_codec.py",
    "broker/manifest/load.py",  # how a file's documents are found and located
    "broker/manifest/documents.py",
    "broker/manifest/files.py",
    "broker/manifest/checks.py",
    "broker/manifest/digest.py",  # the key of a document's spec
    "broker/collector.py",
    "broker/manifest/direct.py",
    "broker/manifest/model.py",
    "broker/manifest/sections.py",
    "broker/manifest/values.py",
    "broker/manifest/workdir.py",
    "broker/manifest/spec_cache.py",
    "broker/manifest/templates.py",  # which files are read as copies of another
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


class FileEntry(NamedTuple):
    """One valid document of a manifest file, as `broker.manifest.load` found it."""

    digest: str  # of the document's canonical JSON: the key of its JobSpec
    index: int  # 0-based document number in the file
    line: int  # where its content starts
    name_at: tuple[int, int]  # line and column of its `name`
    span: tuple[int, int]  # where its text starts and ends in the file (characters)
    template: Any = None  # what broker.manifest.templates keeps of a template file


_CHUNK = 500  # files looked up in one query
_TABLES = (
    "CREATE TABLE IF NOT EXISTS specs (digest TEXT PRIMARY KEY, spec TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS files (digest TEXT PRIMARY KEY, entries TEXT NOT NULL)",
)


class SpecCache:
    """The cache as one load sees it: one SQLite file per code version (`specs.db`),
    read as the load goes and written once, in one transaction, when it ends (`flush`):
    so a bulk load of 10,000 manifests is remembered as cheaply as one, and the next
    load of the folder needs neither YAML nor pydantic. A file's row holds its
    documents' specs too, so a file loaded before costs one lookup. The cache costs
    speed, never correctness: a cache that cannot be read or written is empty."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._conn: sqlite3.Connection | None = None
        self._opened = False
        self._known: dict[str, dict[str, Any]] = {}  # digest -> encoded spec, seen this load
        self._shared: dict[str, list[Any]] = {}  # digest -> [own fields, part texts]
        self._decoded: dict[str, JobSpec] = {}  # digest -> spec, from a file's row
        self._parts: dict[tuple[str, str], Any] = {}  # (part, its JSON text) -> decoded
        self._fetched: dict[str, str | None] = {}  # file digest -> its row (prefetched)
        self._expected: list[str] = []  # file texts to be asked for (`expect`)
        self._positions: dict[int, int] = {}  # id of such a text -> its place in the list
        self._digests: dict[str, str] = {}  # file text -> its digest
        self._specs: dict[str, str] = {}  # written at flush
        self._files: dict[str, str] = {}

    def get(self, digest: str) -> JobSpec | None:
        spec = self._decoded.get(digest)
        if spec is not None:
            return spec
        data = self._known.get(digest)
        if data is None:
            text = self._read("specs", digest)
            if text is None:
                return None
            try:
                data = json.loads(text)
            except ValueError:
                return None
            self._known[digest] = data
        try:
            return decode(data)
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: validate again

    def put(self, digest: str, spec: JobSpec) -> None:
        data = encode(spec)
        self._known[digest] = data
        self._specs[digest] = json.dumps(data)

    def prefetch_files(self, texts: list[str]) -> None:
        """Look up many files at once (a folder): `get_file` then needs no query."""
        conn = self._connection()
        if conn is None or len(texts) < 2:
            return
        digests = [self._digest(text) for text in texts]
        try:
            for begin in range(0, len(digests), _CHUNK):
                chunk = digests[begin : begin + _CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT digest, entries FROM files WHERE digest IN ({marks})"
                self._fetched.update(conn.execute(sql, chunk).fetchall())
        except sqlite3.Error:
            pass
        self._fetched.update((d, None) for d in digests if d not in self._fetched)

    def expect(self, texts: list[str]) -> None:
        """Say which files `get_file` may be asked for, in order: the first asked for
        is looked up with the next ones, a chunk at a time (one query each), when they
        are asked for; files a load never asks the cache for (copies of a template,
        broker.manifest.templates) are then not even hashed."""
        self._expected = texts
        self._positions = {id(text): i for i, text in enumerate(texts)}

    def get_file(self, text: str) -> list[FileEntry] | None:
        """The documents of a manifest file with this text, when it was loaded before
        (their specs are then known to `get` without another lookup)."""
        digest = self._digest(text)
        at = self._positions.get(id(text))
        if at is not None and digest not in self._fetched:
            self.prefetch_files(self._expected[at : at + _CHUNK])
        stored = (
            self._fetched.pop(digest) if digest in self._fetched else self._read("files", digest)
        )
        if stored is None:
            return None
        try:
            entries = []
            for d, i, line, at, span, spec, template in json.loads(stored):
                entry = FileEntry(d, i, line, (at[0], at[1]), (span[0], span[1]), template)
                entries.append(entry)
                if spec is not None:
                    self._decoded[d] = self._assembled(spec)
                    self._shared[d] = spec
            return entries
        except (ValueError, TypeError, IndexError, KeyError, AttributeError):
            return None  # unreadable: parse the file

    def put_file(self, text: str, entries: list[FileEntry]) -> None:
        rows = [[*entry[:5], self._shared_form(entry.digest), entry.template] for entry in entries]
        self._files[self._digest(text)] = json.dumps(rows)

    def _shared_form(self, digest: str) -> list[Any] | None:
        """A spec as a file's row keeps it: [its own fields, {part: the part's JSON}]."""
        shared = self._shared.get(digest)
        if shared is None:
            data = self._known.get(digest)
            if data is None:
                return None
            own = {key: value for key, value in data.items() if key not in PARTS}
            shared = [own, {name: json.dumps(data[name]) for name in PARTS}]
        return shared

    def _assembled(self, shared: list[Any]) -> JobSpec:
        """The spec of a row's shared form, each distinct part text decoded once a load."""
        own, texts = shared
        parts = {}
        for name in PARTS:  # a row without one is unreadable (KeyError): parsed again
            text = texts[name]
            part = self._parts.get((name, text), self)
            if part is self:
                part = self._parts[name, text] = decode_part(name, json.loads(text))
            parts[name] = part
        return assemble(own, parts)

    def stored_specs(self) -> list[dict[str, Any]]:
        """Every spec the cache holds, as encoded (for tests and curious users)."""
        conn = self._connection()
        if conn is None:
            return []
        return [json.loads(text) for (text,) in conn.execute("SELECT spec FROM specs")]

    def flush(self) -> None:
        """Write what this load validated, in one transaction; close the file."""
        conn = self._connection() if self._specs or self._files else self._conn
        try:
            if conn is not None and (self._specs or self._files):
                with conn:
                    conn.executemany(
                        "INSERT OR REPLACE INTO specs VALUES (?, ?)", self._specs.items()
                    )
                    conn.executemany(
                        "INSERT OR REPLACE INTO files VALUES (?, ?)", self._files.items()
                    )
        except sqlite3.Error:
            pass  # busy or read-only: the next load validates again
        finally:
            self._specs.clear()
            self._files.clear()
            self._known.clear()
            self._shared.clear()
            self._decoded.clear()
            self._parts.clear()
            self._fetched.clear()
            self._expected, self._positions = [], {}
            self._digests.clear()
            if conn is not None:
                conn.close()
            self._conn, self._opened = None, False

    def _digest(self, text: str) -> str:
        digest = self._digests.get(text)
        if digest is None:
            digest = self._digests[text] = _text_digest(text)
        return digest

    def _read(self, table: str, digest: str) -> str | None:
        conn = self._connection()
        if conn is None:
            return None
        try:
            row = conn.execute(f"SELECT * FROM {table} WHERE digest = ?", (digest,)).fetchone()
        except sqlite3.Error:
            return None
        return None if row is None else row[1]

    def _connection(self) -> sqlite3.Connection | None:
        """The cache file, opened (and created) on first use; None when it cannot be."""
        if not self._opened:
            self._opened = True
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.folder / "specs.db", timeout=1.0)
                # A cache: a lost write is a miss. Said before WAL, whose switch would
                # otherwise sync a new file four times (fdatasync: milliseconds on a disk).
                conn.execute("PRAGMA synchronous = OFF")
                conn.execute("PRAGMA journal_mode = WAL")
                for sql in _TABLES:
                    conn.execute(sql)
                self._conn = conn
            except (OSError, sqlite3.Error):
                self._conn = None
        return self._conn


def _text_digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()
