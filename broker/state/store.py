"""The state store: the only writer of jobs, versions, attempts, instances, events
and ledger entries, on one SQLite file in WAL mode or on a PostgreSQL database.

Every write method is one transaction that also writes its events, so a killed
process leaves either all of a change or none of it, and writers take turns: on
SQLite `BEGIN IMMEDIATE` locks the file (the busy timeout makes the second wait), on
PostgreSQL the job and attempt rows a write reads are locked `FOR UPDATE`
(`broker.state.backend`: what differs between the two lives in one backend module
each). Checks that guard a write (state, expected state, attempt still open) are
read inside that transaction, which is what makes compare-and-set and "bill once"
hold across controllers. A write that loses a race on PostgreSQL (a deadlock, a key
two writers inserted) runs again whole (`retried`). "Now" comes from the injected
Clock, read once per transaction.

One StateStore per thread: it holds one connection, which is not shared.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from broker.clock import Clock
from broker.state.attempts import AttemptWrites
from broker.state.backend import Backend, Connection, retried
from broker.state.ended import Ended
from broker.state.held import HeldRows
from broker.state.leases import LeaseWrites
from broker.state.location import DatabaseUrl, StateLocation, parse_location
from broker.state.model import (
    IN_FLIGHT,
    OPEN_ATTEMPT,
    TERMINAL,
    IllegalTransition,
    Job,
    JobState,
    UnknownAttempt,
    UnknownJob,
    can_transition,
    job_maker,
    json_text,
)
from broker.state.reads import StateReads
from broker.state.runs import RunWrites
from broker.state.transactions import Transactions
from pricing.userio.redact import redact, redact_data

_TEXTS_KEPT = 4096  # redactions an open store remembers
_JOBS_KEPT = 20_000  # job rows an open store remembers the Jobs of
K = TypeVar("K")
V = TypeVar("V")


def _kept(memory: dict[K, V], key: K, make: Callable[[], V], most: int) -> V:
    """`memory[key]`, made and kept when missing; `memory` is emptied when it holds `most`
    (an open store remembers a bounded number of answers)."""
    known = memory.get(key)
    if known is None:
        if len(memory) >= most:
            memory.clear()
        known = memory[key] = make()
    return known


def default_state_path() -> Path:
    """`$XDG_STATE_HOME/broker/state.db`, else `~/.local/state/broker/state.db`."""
    from pricing.userio.dirs import user_state_dir

    return user_state_dir() / "state.db"


def _insert_event(
    conn: Connection,
    job_id: str,
    attempt_id: str | None,
    now: str,
    kind: str,
    message: str,
    data: Mapping[str, Any],
) -> None:
    """One event row (module-level so that tests can make it fail mid-transaction), its
    message and data as `StateStore._event` redacted them."""
    row = (job_id, attempt_id, now, kind, message, json_text(data))
    conn.execute(
        "INSERT INTO events (job_id, attempt_id, time, kind, message, data_json)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        row,
    )


@functools.lru_cache(maxsize=256)
def _insert_sql(table: str, names: tuple[str, ...]) -> str:
    """`StateStore._insert`'s statement, made once per table and columns."""
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


@functools.lru_cache(maxsize=256)
def _update_sql(table: str, where: tuple[str, ...], names: tuple[str, ...]) -> str:
    """`StateStore._update`'s statement, made once per table, keys and columns."""
    assigns = ", ".join(f"{name} = ?" for name in names)
    match = " AND ".join(f"{name} = ?" for name in where)
    return f"UPDATE {table} SET {assigns} WHERE {match}"


class StateStore(Transactions, RunWrites, AttemptWrites, LeaseWrites, StateReads, HeldRows):
    """Durable broker state. Open with `StateStore.open(path, clock)`; a controller then
    writes as a lease holder (`hold_as`: broker.state.leases)."""

    def __init__(
        self,
        conn: Connection,
        clock: Clock,
        path: StateLocation,
        new_id: Callable[[], str],
        backend: Backend,
    ) -> None:
        self._conn, self._clock, self.path, self._new_id = conn, clock, path, new_id
        self._holder = None  # no leases until a controller says who it is
        self._backend = backend
        self._together = False  # inside `together`: writes are savepoints of its transaction
        self._texts: dict[str, str] = {}  # text -> redacted (`_redacted`)
        self._jobs_read: dict[tuple, Job] = {}  # a job row's values -> its Job (`_jobs_of`)
        self._held_rows = None  # the rows the open write locked (broker.state.held)
        self._ended = Ended()  # what this store's own writes ended (`ended_here`)
        self._ending: list[tuple[str, str]] = []  # ... in the open write, until it commits

    def ended_here(self) -> Ended:
        """The jobs and attempts this store's own writes ended since it was opened."""
        return self._ended

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | DatabaseUrl,
        clock: Clock,
        *,
        busy_timeout: float = 30.0,
        new_id: Callable[[], str] | None = None,
        read_only: bool = False,
    ) -> StateStore:
        """Open (creating it and its directory if needed) and migrate the state: a
        SQLite file at a path, or the PostgreSQL database of a `postgresql://` URL.

        A file is examined first (`broker.state.files`): one that is not a broker
        state file is refused with `NotAStateFile` before SQLite touches it, one of a
        newer schema with `SchemaTooNew` before anything is written, one in a read-only
        location with `ReadOnlyState`. `read_only` opens existing state for reading
        only (no WAL switch, no migration, nothing created). `busy_timeout` is how long
        a write waits for another writer, in seconds; `new_id` makes the 12 hex digits
        of job and attempt ids (tests, simulator). A database that cannot be reached
        raises `StateUnavailable` (one line, no password).
        """
        location = parse_location(path)
        backend: Backend
        if isinstance(location, DatabaseUrl):
            from broker.state.pg_backend import open_postgres

            backend, conn = open_postgres(
                location, clock, busy_timeout=busy_timeout, read_only=read_only
            )
        else:
            from broker.state.sqlite_backend import open_sqlite

            backend, conn = open_sqlite(
                location, clock, busy_timeout=busy_timeout, read_only=read_only
            )
        return cls(conn, clock, location, new_id or (lambda: secrets.token_hex(6)), backend)

    @property
    def statements_sent(self) -> int | None:
        """Statements this store sent to a PostgreSQL server (each a round trip), for
        the benchmarks and the tests that a pass's reads do not grow with its jobs;
        None on SQLite (in-process: a statement costs no round trip)."""
        from broker.state.pg_backend import PgConnection

        conn = self._conn
        return conn.statements if isinstance(conn, PgConnection) else None

    @property
    def round_trips(self) -> int | None:
        """How many times this store waited for a PostgreSQL server's answer: fewer than
        its statements, as a write's statements whose results it does not read go out
        together (`PgConnection.begin_pipelined`); None on SQLite."""
        from broker.state.pg_backend import PgConnection

        conn = self._conn
        return conn.round_trips if isinstance(conn, PgConnection) else None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- jobs (submissions and runs: broker.state.runs) ------------------------------

    @retried
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
                claims = to is not JobState.CANCELLED
                row = self._job_to_claim(job_id) if claims else self._job_row(job_id)
                state = JobState(row["state"])
                if expect is not None and state != JobState(expect):
                    return False
                if claims:
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
        self._conn.execute(_insert_sql(table, tuple(columns)), tuple(columns.values()))

    def _update(self, table: str, where: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
        self._keep_held(table, where.get("id"), columns)
        sql = _update_sql(table, tuple(where), tuple(columns))
        self._conn.execute(sql, (*columns.values(), *where.values()))

    def _event(
        self, job_id: str, attempt_id: str | None, now: str, kind: str, message: str, data: Any
    ) -> None:
        """Record an event, its message and data redacted (`pricing.userio.redact`, each
        text's answer remembered): no secret is ever stored."""
        fields = data if type(data) is dict else dict(data)  # a copy is made below
        text, payload = self._redacted(message), redact_data(fields, self._redacted)
        _insert_event(self._conn, job_id, attempt_id, now, kind, text, payload)

    def _jobs_of(self, rows: Iterable[Any]) -> list[Job]:
        """`job_of` of each row, remembered by the row's values (up to `_JOBS_KEPT`
        rows): a controller pass reads the whole queue, most of it as the pass before
        read it; a row not seen is read by position (`job_maker`)."""
        memory, make, jobs = self._jobs_read, None, []
        for row in rows:
            values = tuple(row)
            job = memory.get(values)
            if job is None:
                if make is None:
                    make = job_maker(row.keys())
                if len(memory) >= _JOBS_KEPT:
                    memory.clear()
                job = memory[values] = make(values)
            jobs.append(job)
        return jobs

    def _redacted(self, text: str) -> str:
        """`redact(text)`, remembered (a few thousand texts at most): events repeat the
        same texts (states, places, markets, reasons), each redaction some twenty patterns."""
        return _kept(self._texts, text, lambda: redact(text), _TEXTS_KEPT)

    def _fresh_id(self, prefix: str, table: str) -> str:
        while True:
            candidate = prefix + self._new_id()
            sql = f"SELECT 1 FROM {table} WHERE id = ?"
            if self._conn.execute(sql, (candidate,)).fetchone() is None:
                return candidate

    def _locked(self) -> str:
        """` FOR UPDATE` on PostgreSQL inside a write (the row guards it), else ""."""
        return self._backend.for_update if self._conn.in_transaction else ""

    def _job_row(self, job_id: str) -> Any:
        held = self._held("jobs", job_id)
        if held is not None:
            return held
        sql = f"SELECT * FROM jobs WHERE id = ?{self._locked()}"
        row = self._conn.execute(sql, (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job {job_id!r}")
        return self._hold_row("jobs", job_id, row)

    def _job_state(self, job_id: str) -> JobState:
        return JobState(self._job_row(job_id)["state"])

    def _attempt_row(self, attempt_id: str) -> Any:
        held = self._held("attempts", attempt_id)
        if held is not None:
            return held
        sql = f"SELECT * FROM attempts WHERE id = ?{self._locked()}"
        row = self._conn.execute(sql, (attempt_id,)).fetchone()
        if row is None:
            raise UnknownAttempt(f"no attempt {attempt_id!r}")
        return self._hold_row("attempts", attempt_id, row)

    def _is_latest(self, att: Any) -> bool:
        latest = self._held_count(att["job_id"], "latest_attempt")
        if latest is not None:
            return bool(latest == att["number"])
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
        if to in TERMINAL:
            self._ending.append(("job", job_id))
        message = f"{current} -> {to}" + (f": {reason}" if reason else "")
        payload = {**data, **extra, "from": current, "to": to, "reason": reason}
        self._event(job_id, attempt_id, now, "transition", message, payload)
