"""Whether a file is a broker state file, told before SQLite opens it.

SQLite opens any file and writes to it at once (switching it to WAL mode rewrites its
header), so a mistyped `--state` pointing at another program's database, a text file
or a damaged copy must be refused *before* a connection exists. `examine` reads the
first 100 bytes (the SQLite header) and decides:

- no file, or an empty one: `missing` / `empty`, a new state file may be made there;
- not a regular file, no SQLite header, a page size SQLite never writes, a file
  shorter than its header says (truncated): `NotAStateFile`;
- an SQLite file with the broker's application id (`APPLICATION_ID`, set on every
  file the broker makes): `broker`;
- an SQLite file with another program's application id: `NotAStateFile`;
- an SQLite file with no application id: a broker state file written before the id
  existed when it holds the `schema_migrations` table (`legacy`; the id is set on its
  next write), else `NotAStateFile`. That table is looked up through a connection
  opened `immutable`, which never writes, locks or creates a file.

`writable` says whether the file and its folder may be written (WAL mode needs the
`-wal` and `-shm` files beside it): read commands open a state file in a read-only
location read-only, and write commands are refused there with one line.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from broker.state.model import StateError

APPLICATION_ID = 0x42524B52  # "BRKR" in the SQLite header's application id (offset 68)
SQLITE_HEADER = b"SQLite format 3\x00"


class StateFileError(StateError):
    """A state file the broker will not use as asked; the file was not changed."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(message)
        self.path = Path(path)


class NotAStateFile(StateFileError):
    """The file is not a broker state file (another program's, text, damaged)."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(path, f"not a broker state file: {path} ({why}); it was not changed")
        self.why = why


class ReadOnlyState(StateFileError):
    """A command that writes state was given a state file in a read-only location."""


class DamagedState(StateFileError):
    """SQLite found the broker's own state file damaged while reading it."""


@dataclass(frozen=True)
class Examined:
    """What is at a state path, and whether it may be written."""

    kind: Literal["missing", "empty", "broker", "legacy"]
    writable: bool


def examine(path: Path) -> Examined:
    """What `path` holds (see the module docstring); NotAStateFile when it is not ours."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return Examined("missing", _creatable(path.parent))
    except OSError as exc:
        raise NotAStateFile(path, f"cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(status.st_mode):
        raise NotAStateFile(path, "a directory")
    if not stat.S_ISREG(status.st_mode):
        raise NotAStateFile(path, "not a regular file")
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    if status.st_size == 0:
        return Examined("empty", writable)
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise NotAStateFile(path, f"cannot be read: {exc.strerror or exc}") from None
    # A live writer's checkpoint writes the header's new page count before the pages it
    # counts: with a `-wal` beside it, a short file is one being written, not truncated.
    live = Path(f"{path}-wal").exists()
    _check_header(path, header, status.st_size, growing=live)
    (application_id,) = struct.unpack(">I", header[68:72])
    if application_id == APPLICATION_ID:
        return Examined("broker", writable)
    if application_id != 0:
        raise NotAStateFile(path, f"an SQLite database of another program (id {application_id:#x})")
    if not _has_broker_tables(path):
        raise NotAStateFile(path, "an SQLite database without the broker's tables")
    return Examined("legacy", writable)


def _check_header(path: Path, header: bytes, size: int, growing: bool = False) -> None:
    """NotAStateFile unless `header` is a whole SQLite header of a file of `size` bytes
    (`growing`: a live writer may be extending it, so fewer pages than counted is fine)."""
    if not header.startswith(SQLITE_HEADER):
        raise NotAStateFile(path, "not an SQLite database")
    if len(header) < 100:
        raise NotAStateFile(path, "an SQLite header cut short")
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise NotAStateFile(path, f"a damaged SQLite header (page size {page_size})")
    pages, counter, valid_for = struct.unpack(">I", header[28:32]), header[24:28], header[92:96]
    if size < page_size or size % page_size:
        raise NotAStateFile(path, f"a truncated SQLite database ({size} bytes)")
    if counter == valid_for and pages[0] * page_size > size and not growing:
        raise NotAStateFile(
            path, f"a truncated SQLite database ({size} of {pages[0] * page_size} bytes)"
        )


def _has_broker_tables(path: Path) -> bool:
    """Whether an SQLite file without an application id holds `schema_migrations`,
    looked up without writing: `immutable` (no lock, no `-wal`/`-shm` made), or
    read-only through the live `-wal` of a writer that has not checkpointed yet."""
    import sqlite3
    from urllib.parse import quote

    uri = f"file:{quote(str(path.resolve()))}"
    live = Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
    try:
        conn = sqlite3.connect(f"{uri}?{'mode=ro' if live else 'immutable=1'}", uri=True)
    except sqlite3.Error:
        return False
    try:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        return conn.execute(sql).fetchone() is not None
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _creatable(folder: Path) -> bool:
    """Whether a file may be made in `folder`, or in the nearest folder above it that exists."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def read_only_uri(path: Path, *, immutable: bool) -> str:
    """The URI that opens `path` read-only: `mode=ro` (reads through a live writer's
    `-wal`), or `immutable=1` (no lock, nothing created: the file as it is now)."""
    from urllib.parse import quote

    return f"file:{quote(str(path.resolve()))}?{'immutable=1' if immutable else 'mode=ro'}"
