"""The state store on one SQLite file in WAL mode (the default, a single user's).

A write is one `BEGIN IMMEDIATE` transaction: the file's write lock serialises
writers (the busy timeout makes the second wait), so the guards a write reads need
no row locks. Reads see the last commit and never block a writer. The file is
examined before SQLite touches it (`broker.state.files`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from broker.clock import Clock
from broker.state import schema
from broker.state.files import (
    APPLICATION_ID,
    DamagedState,
    ReadOnlyState,
    StateFileError,
    examine,
    read_only_uri,
)
from broker.state.model import StateError, ts_text


class SqliteBackend:
    """SQLite's dialect and locking (see `broker.state.backend.Backend`)."""

    dialect = "sqlite"
    for_update = ""
    index_join = "CROSS JOIN"  # SQLite keeps the left table as the outer loop

    def __init__(self, location: Path) -> None:
        self.location = location

    def begin(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_snapshot(self, conn: Any) -> None:
        """Reads that see one committed state: a read transaction (WAL keeps that state
        for it, and no writer waits)."""
        conn.execute("BEGIN")

    def begin_migration(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def table_exists(self, conn: sqlite3.Connection, name: str) -> bool:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return conn.execute(sql, (name,)).fetchone() is not None

    @contextmanager
    def rebuilding(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Foreign keys off while a table is rebuilt (a no-op inside a transaction: this
        runs before it), restored after; `check_references` checks them whole."""
        (keys,) = conn.execute("PRAGMA foreign_keys").fetchone()
        conn.execute("PRAGMA foreign_keys = OFF")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA foreign_keys = {'ON' if keys else 'OFF'}")

    def check_references(self, conn: sqlite3.Connection, version: int) -> None:
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise StateError(f"migration {version} broke {len(broken)} reference(s)")

    def retryable(self, exc: BaseException) -> bool:
        return False  # the busy timeout waits for the other writer; nothing races

    def reset_serials(self, conn: sqlite3.Connection, table: str) -> None:
        pass  # AUTOINCREMENT continues after the highest id inserted

    def json_number(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def json_text(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def joined_text(self, column: str) -> str:
        return f"GROUP_CONCAT({column}, ' ')"


def open_sqlite(
    file: Path, clock: Clock, *, busy_timeout: float, read_only: bool
) -> tuple[SqliteBackend, sqlite3.Connection]:
    """Open (creating it and its directory if needed) and migrate the state file; see
    `StateStore.open` for what is refused and why."""
    found = examine(file)
    if read_only:
        if found.kind in ("missing", "empty"):
            raise StateFileError(file, f"no state file at {file}")
        conn = _connect_read_only(file, busy_timeout)
    else:
        if not found.writable:
            where = f"the state file {file} is in a read-only location"
            raise ReadOnlyState(file, f"{where}: this command writes it")
        file.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(file, timeout=busy_timeout, isolation_level=None)
    backend = SqliteBackend(file)
    try:
        conn.row_factory = sqlite3.Row
        _check_version(backend, conn, exact=read_only)  # before anything is written
        if not read_only:
            conn.execute("PRAGMA foreign_keys = ON")
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise StateError(f"{file}: cannot use WAL mode here (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")  # a commit survives power loss too
            schema.migrate(conn, ts_text(clock.now()), backend=backend)
            (known,) = conn.execute("PRAGMA application_id").fetchone()
            if known != APPLICATION_ID:  # new, or made before the id existed
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    except sqlite3.OperationalError:  # locked, a failing migration: not the file's fault
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:  # "malformed", "file is not a database"
        conn.close()
        raise DamagedState(file, f"the state file {file} is damaged ({exc})") from None
    except BaseException:
        conn.close()
        raise
    return backend, conn


def _connect_read_only(file: Path, busy_timeout: float) -> sqlite3.Connection:
    """A read-only connection that creates nothing beside the file: `mode=ro` when a live
    writer's `-wal` and `-shm` are there (it reads through them), else `immutable` (a
    read-only connection would leave a `-wal` and `-shm` of its own behind)."""
    live = Path(f"{file}-wal").exists() and Path(f"{file}-shm").exists()
    uri = read_only_uri(file, immutable=not live)
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:  # "malformed": the schema page is damaged
        conn.close()
        raise DamagedState(file, f"the state file {file} is damaged ({exc})") from None
    return conn


def _check_version(backend: SqliteBackend, conn: sqlite3.Connection, *, exact: bool) -> None:
    """SchemaTooNew for a file a newer broker wrote; with `exact` (read-only: nothing can
    be migrated), a StateFileError for an older one too."""
    file = backend.location
    found, newest = schema.schema_version(conn, backend), schema.MIGRATIONS[-1].version
    if found > newest:
        raise schema.too_new(found, newest, file)
    if exact and found < newest:
        raise StateFileError(
            file,
            f"the state file {file} has schema version {found} and this broker needs {newest}: "
            "run a command that writes it (e.g. broker submit) where it can be written",
        )
