"""The state store: the only writer of jobs, versions, attempts, instances, events
and ledger entries, on one SQLite file in WAL mode.

Every write method is one `BEGIN IMMEDIATE` transaction that also writes its
events, so a killed process leaves either all of a change or none of it, and two
processes on one file take turns (the busy timeout makes the second wait). Checks
that guard a write (state, expected state, attempt still open) are read inside
that transaction, which is what makes compare-and-set and "bill once" hold across
controllers. "Now" comes from the injected Clock, read once per transaction.

One StateStore per thread: it holds one connection, which is not shared.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from broker.clock import Clock
from broker.state import schema
from broker.state.attempts import AttemptWrites
from broker.state.files import (
    APPLICATION_ID,
    DamagedState,
    ReadOnlyState,
    StateFileError,
    examine,
    read_only_uri,
)
from broker.state.leases import LeaseWrites
from broker.state.model import (
    IN_FLIGHT,
    OPEN_ATTEMPT,
    IllegalTransition,
    JobState,
    StateError,
    UnknownAttempt,
    UnknownJob,
    can_transition,
    json_text,
    ts_text,
)
from broker.state.reads import StateReads
from broker.state.runs import RunWrites
from pricing.userio.redact import redact, redact_data


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


def _check_version(file: Path, conn: sqlite3.Connection, *, exact: bool) -> None:
    """SchemaTooNew for a file a newer broker wrote; with `exact` (read-only: nothing can
    be migrated), a StateFileError for an older one too."""
    found, newest = schema.schema_version(conn), schema.MIGRATIONS[-1].version
    if found > newest:
        raise schema.too_new(found, newest, file)
    if exact and found < newest:
        raise StateFileError(
            file,
            f"the state file {file} has schema version {found} and this broker needs {newest}: "
            "run a command that writes it (e.g. broker submit) where it can be written",
        )


def default_state_path() -> Path:
    """`$XDG_STATE_HOME/broker/state.db`, else `~/.local/state/broker/state.db`."""
    from pricing.userio.dirs import user_state_dir

    return user_state_dir() / "state.db"


def _insert_event(
    conn: sqlite3.Connection,
    job_id: str,
    attempt_id: str | None,
    now: str,
    kind: str,
    message: str,
    data: Mapping[str, Any],
) -> None:
    """One event row (module-level so that tests can make it fail mid-transaction); its
    message and data redacted (`pricing.userio.redact`): no secret is ever stored."""
    row = (job_id, attempt_id, now, kind, redact(message), json_text(redact_data(dict(data))))
    conn.execute(
        "INSERT INTO events (job_id, attempt_id, time, kind, message, data_json)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        row,
    )


class StateStore(RunWrites, AttemptWrites, LeaseWrites, StateReads):
    """Durable broker state. Open with `StateStore.open(path, clock)`; a controller then
    writes as a lease holder (`hold_as`: broker.state.leases)."""

    dialect = "sqlite"  # which claim query (broker.state.leases.claim_sql) runs

    def __init__(
        self, conn: sqlite3.Connection, clock: Clock, path: Path, new_id: Callable[[], str]
    ) -> None:
        self._conn, self._clock, self.path, self._new_id = conn, clock, path, new_id
        self._holder = None  # no leases until a controller says who it is

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        clock: Clock,
        *,
        busy_timeout: float = 30.0,
        new_id: Callable[[], str] | None = None,
        read_only: bool = False,
    ) -> StateStore:
        """Open (creating it and its directory if needed) and migrate the state file.

        The file is examined first (`broker.state.files`): one that is not a broker
        state file is refused with `NotAStateFile` before SQLite touches it, one of a
        newer schema with `SchemaTooNew` before anything is written, one in a read-only
        location with `ReadOnlyState`. `read_only` opens an existing file for reading
        only (no WAL switch, no migration, nothing created). `busy_timeout` is how long
        a write waits for another writer, in seconds; `new_id` makes the 12 hex digits
        of job and attempt ids (tests, simulator).
        """
        file = Path(path)
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
        try:
            conn.row_factory = sqlite3.Row
            _check_version(file, conn, exact=read_only)  # before anything is written
            if not read_only:
                conn.execute("PRAGMA foreign_keys = ON")
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                if str(mode).lower() != "wal":
                    raise StateError(f"{file}: cannot use WAL mode here (got {mode})")
                conn.execute("PRAGMA synchronous = FULL")  # a commit survives power loss too
                schema.migrate(conn, ts_text(clock.now()))
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
        return cls(conn, clock, file, new_id or (lambda: secrets.token_hex(6)))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[str]:
        """One write transaction; yields "now" read under the lock, so times follow commits."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield ts_text(self._clock.now())
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    # --- jobs (submissions and runs: broker.state.runs) ------------------------------

    def transition(
        self,
        job_id: str,
        to: JobState,
        reason: str = "",
        data: Mapping[str, Any] | None = None,
        expect: JobState | None = None,
    ) -> bool:
        """Move a job; False (and no change) when `expect` is given and the state is not it,
        or when another controller holds the job's lease (broker.state.leases).

        Raises IllegalTransition for a move the state machine forbids, LeaseHeld for a
        held job when no `expect` is given. A cancel takes no lease: a user's cancel is
        never blocked, and the holder of a step in flight sees it at its next write.
        """
        from broker.state.leases import LeaseHeld

        to = JobState(to)
        try:
            with self._write() as now:
                state = self._job_state(job_id)
                if expect is not None and state != JobState(expect):
                    return False
                if to is not JobState.CANCELLED:
                    self._claim(job_id, now, f"to {to}")
                self._move(job_id, state, to, now, reason, data or {}, None)
                self._settle(job_id, now)
                self._rest_lease(job_id)
                return True
        except LeaseHeld:
            if expect is None:
                raise
            return False

    # --- helpers (inside a write transaction) -------------------------------------------

    def _insert(self, table: str, columns: Mapping[str, Any]) -> None:
        names, marks = ", ".join(columns), ", ".join("?" * len(columns))
        sql = f"INSERT INTO {table} ({names}) VALUES ({marks})"
        self._conn.execute(sql, tuple(columns.values()))

    def _update(self, table: str, where: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
        assigns = ", ".join(f"{name} = ?" for name in columns)
        match = " AND ".join(f"{name} = ?" for name in where)
        sql = f"UPDATE {table} SET {assigns} WHERE {match}"
        self._conn.execute(sql, (*columns.values(), *where.values()))

    def _event(
        self, job_id: str, attempt_id: str | None, now: str, kind: str, message: str, data: Any
    ) -> None:
        _insert_event(self._conn, job_id, attempt_id, now, kind, message, data)

    def _fresh_id(self, prefix: str, table: str) -> str:
        while True:
            candidate = prefix + self._new_id()
            sql = f"SELECT 1 FROM {table} WHERE id = ?"
            if self._conn.execute(sql, (candidate,)).fetchone() is None:
                return candidate

    def _job_row(self, job_id: str) -> sqlite3.Row:
        row = self._conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job {job_id!r}")
        return row

    def _job_state(self, job_id: str) -> JobState:
        return JobState(self._job_row(job_id)["state"])

    def _attempt_row(self, attempt_id: str) -> sqlite3.Row:
        row = self._conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise UnknownAttempt(f"no attempt {attempt_id!r}")
        return row

    def _is_latest(self, att: sqlite3.Row) -> bool:
        (latest,) = self._conn.execute(
            "SELECT MAX(number) FROM attempts WHERE job_id = ?", (att["job_id"],)
        ).fetchone()
        return bool(latest == att["number"])

    def _digest(self, job_id: str, version: int) -> str:
        sql = "SELECT digest FROM job_versions WHERE job_id = ? AND version = ?"
        return str(self._conn.execute(sql, (job_id, version)).fetchone()[0])

    def _in_flight(self, job_id: str, state: JobState) -> bool:
        """Whether an attempt may be alive: a newer version then waits for it."""
        if state in IN_FLIGHT:
            return True
        marks = ",".join("?" * len(OPEN_ATTEMPT))
        sql = f"SELECT 1 FROM attempts WHERE job_id = ? AND state IN ({marks})"
        return self._conn.execute(sql, (job_id, *OPEN_ATTEMPT)).fetchone() is not None

    def _set(self, job_id: str, now: str, **columns: Any) -> None:
        self._update("jobs", {"id": job_id}, {"updated_at": now, **columns})

    def _move(
        self, job_id: str, current: JobState, to: JobState, now: str, reason: str,
        data: Mapping[str, Any], attempt_id: str | None,
    ) -> None:  # fmt: skip
        """The one place a job's state changes by the state machine; writes its event."""
        if not can_transition(current, to):
            raise IllegalTransition(job_id, current, to)
        extra: dict[str, Any] = {}
        if to is JobState.CANCELLED:  # cancelling stops the job, a waiting version too
            pending = self._job_row(job_id)["pending_version"]
            if pending is not None:
                extra["dropped_version"] = pending
            self._set(job_id, now, state=to, pending_version=None)
        else:
            self._set(job_id, now, state=to)
        message = f"{current} -> {to}" + (f": {reason}" if reason else "")
        payload = {**data, **extra, "from": current, "to": to, "reason": reason}
        self._event(job_id, attempt_id, now, "transition", message, payload)
