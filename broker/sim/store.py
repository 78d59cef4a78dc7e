"""The simulator's state store: the real `StateStore`, its reads remembered between writes.

A controller pass asks the store the same questions many times (every job's attempts,
its manifest version, the recent reclaims, ...) and most simulated passes write
nothing at all; each answer is decoded from SQLite rows and JSON anew. Here every
public read is remembered until the next write transaction, so a question asked again
before anything changed is answered from memory. Nothing else differs: the writes,
the schema, the SQL and the decoding are the production store's, and every answer is
what the production store would give (its values are frozen dataclasses; lists and
dicts are handed out as copies). Likewise a ledger row is decoded once per content (an
attempt's row is read again only when it changed, a job's events once each, as they are
appended; an attempt's placement is decoded once per text: `placed_of`), and a text's
redaction is remembered for the process, not only for one store. A simulator's store need
not survive a crash, so it is held in memory while the run lasts (a copy of a file migrated
once per process) and written to its file when closed; its connection serves the next run
of the thread, its statements compiled once.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from broker.state import StateStore
from broker.state.model import (
    Attempt,
    AttemptState,
    Event,
    Job,
    JobState,
    LedgerEntry,
    ledger_of,
)


def _settled(value: Any) -> Any:
    """An argument as the read gets it and as a key: a collection (of states, read as an
    SQL `IN`, where order does not matter) as a tuple, keyed by its set."""
    if value is None or isinstance(value, (str, int, float, datetime, Enum)):
        return value, value
    items = tuple(value)
    return items, ("in", frozenset(items))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is list or kind is dict:  # the common answers, without two isinstance calls
        return value.copy()
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


_CHANGED_ROWS = (("INSERT", ("NEW",)), ("UPDATE", ("OLD", "NEW")), ("DELETE", ("OLD",)))
_TRIGGER = "sim_watch_"  # the watching triggers' names begin so (`_watching_triggers`)
_PLAIN = (str, int, type(None))  # arguments that are their own key
_NONE = object()  # no answer remembered
_READS_OF: dict[str, list[str]] = {}  # table -> the remembered reads whose SQL reads it


def _remembered(read: Callable[..., Any], tables: tuple[str, ...]) -> Callable[..., Any]:
    """`read`, answered from memory when asked again before a write changes a row of
    one of `tables` (those its SQL reads)."""
    name = read.__name__
    for table in tables:
        _READS_OF.setdefault(table, []).append(name)

    @functools.wraps(read)
    def remembered(self: SimStateStore, *args: Any, **kwargs: Any) -> Any:
        if self._conn.in_transaction:  # inside a write: its own reads must see it
            return read(self, *args, **kwargs)
        memo = self._memo[name]
        if not kwargs:  # most reads: ids only, their own key
            for a in args:
                if type(a) not in _PLAIN:
                    break
            else:
                answer = memo.get(args, _NONE)
                if answer is _NONE:
                    answer = memo[args] = read(self, *args)
                return _copy(answer)
        asked = (args, tuple(kwargs.items()))  # a key as it is, when hashable
        try:
            answer = memo.get(asked, _NONE)
        except TypeError:  # a list of states, say: keyed by its set below
            pass
        else:
            if answer is _NONE:
                answer = memo[asked] = read(self, *args, **kwargs)
            return _copy(answer)
        settled = [_settled(a) for a in args]
        named = {k: _settled(v) for k, v in sorted(kwargs.items())}
        key = (tuple(k for _, k in settled), tuple((n, k) for n, (_, k) in named.items()))
        if key not in memo:
            memo[key] = read(
                self, *(a for a, _ in settled), **{n: a for n, (a, _) in named.items()}
            )
        return _copy(memo[key])

    return remembered


@functools.lru_cache(maxsize=1 << 16)
def _redacted(text: str) -> str:
    """`redact(text)`, remembered for the process: it is a pure function of the text, and
    the runs of a benchmark write the same texts (field names, places, reasons) again."""
    from pricing.userio.redact import redact

    return redact(text)


class _Watcher:
    """What a connection's triggers call (`SimStateStore._watch`): the store that holds
    it now. Its functions are the connection's for good, as a compiled statement keeps
    the functions its triggers called when it was compiled."""

    store: SimStateStore

    def touched(self, table: str) -> None:
        self.store._touched.add(table)

    def attempt(self, rowid: int) -> None:
        self.store._attempt_changed(rowid)


_IDLE = threading.local()  # `conn`: a closed store's (connection, watcher), for open_fast


def _connection(template: bytes) -> tuple[sqlite3.Connection, _Watcher]:
    """An in-memory connection holding the database `template` (`_migrated`, its watching
    triggers in it), with the watcher its triggers call: a closed store's connection of
    this thread when there is one (its compiled statements outlive `deserialize`, which
    replaces the database whole: every run's schema is the template's), else a new one."""
    idle, _IDLE.conn = getattr(_IDLE, "conn", None), None
    if idle is not None:
        conn, watcher = idle
        try:
            conn.deserialize(template)
            return conn, watcher
        except sqlite3.Error:  # a statement of the last run still open, say: a new one
            conn.close()
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(template)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")  # as StateStore.open sets it
    watcher = _Watcher()
    conn.create_function("sim_touched", 1, watcher.touched, deterministic=False)
    conn.create_function("sim_attempt", 1, watcher.attempt, deterministic=False)
    return conn, watcher


@functools.cache
def _closed() -> sqlite3.Connection:
    """A closed connection: what a closed store holds (any use raises)."""
    conn = sqlite3.connect(":memory:")
    conn.close()
    return conn


@functools.lru_cache(maxsize=4)
def _migrated(at: datetime) -> bytes:
    """The bytes of a new state file that `StateStore.open` created and migrated with its
    clock at `at` (the migrations record when they ran), made once per process; in
    rollback-journal mode, as an in-memory database cannot be in WAL mode."""
    import tempfile

    from broker.clock import FixedClock

    with tempfile.TemporaryDirectory(prefix="broker-sim-template-") as tmp:
        file = Path(tmp) / "state.db"
        StateStore.open(file, FixedClock(at)).close()  # its WAL checkpointed
        conn = sqlite3.connect(file, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("BEGIN")  # the triggers in one transaction: one sync of the file
            for sql in _watching_triggers():
                conn.execute(sql)
            conn.execute("COMMIT")
            return conn.serialize()
        finally:
            conn.close()


def _watching_triggers() -> list[str]:
    """The triggers that tell a store which tables a write changes (`SimStateStore._watch`),
    by calling its functions `sim_touched` (a table, or `events:<kind>` for the events of
    one kind) and `sim_attempt` (an attempt's rowid, read again alone: `_every_attempt`).
    A new event is told by the store itself (`SimStateStore._event`, the one writer of
    events): a trigger costs each event row half as much again."""
    made = []
    for table in sorted({name.partition(":")[0] for name in _READS_OF}):  # others: no one
        kinds = any(name.startswith(f"{table}:") for name in _READS_OF)
        for op, rows in _CHANGED_ROWS:
            if (op, table) == ("INSERT", "events"):
                continue
            told = [f"'{table}:' || {row}.kind" for row in rows] if kinds else [f"'{table}'"]
            calls = [f"SELECT sim_touched({what});" for what in told]
            if table == "attempts":
                calls += [f"SELECT sim_attempt({row}.rowid);" for row in rows]
            made.append(
                f"CREATE TRIGGER {_TRIGGER}{op.lower()}_{table} AFTER {op} ON {table}"
                f" BEGIN {' '.join(calls)} END"
            )
    return made


def _without_triggers(data: bytes) -> bytes:
    """A serialized state without the watching triggers: the state file as the production
    store writes it (its connections have no `sim_touched`)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.deserialize(data)
        sql = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?"
        for (name,) in conn.execute(sql, (f"{_TRIGGER}%",)).fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        return conn.serialize()
    finally:
        conn.close()


class SimStateStore(StateStore):
    """`StateStore` whose reads are remembered until the next write (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # read -> {arguments -> answer}, until a write changes a table the read reads
        self._memo: dict[str, dict[tuple, Any]] = {n: {} for r in _READS_OF.values() for n in r}
        self._touched: set[str] = set()  # tables the write under way changed (`_watch`)
        self._watching = False  # whether `_touched` is told (else a write forgets all)
        self._attempt_rows: dict[int, Attempt] = {}  # rowid -> attempt, as last read
        self._stale_attempts: set[int] | None = None  # rowids to read again (None: all)
        self._rows: dict[tuple, Any] = {}  # (decoder, row values) -> value
        self._changed = 0  # see `changes`
        self._leases_only = False  # inside a heartbeat
        self._file: Path | None = None  # written when closed (`open_fast`: held in memory)
        self._events: dict[str, list[Event]] = {}  # job id -> its events read so far
        self._watcher: _Watcher | None = None  # what the triggers call (`_watch`)

    # the reads the controller, recovery, steering and the cadence ask (each only reads)
    # (each only reads), with the tables their SQL reads (broker.state.reads, attempts)
    job = _remembered(StateStore.job, ("jobs", "job_versions"))
    all_jobs = _remembered(StateStore.jobs, ("jobs", "job_versions"))  # every one, in order
    queued = _remembered(StateStore.queued, ("jobs", "job_versions"))
    version = _remembered(StateStore.version, ("job_versions",))
    versions = _remembered(StateStore.versions, ("job_versions",))
    attempt = _remembered(StateStore.attempt, ("attempts",))

    def _every_attempt(self) -> list[Attempt]:
        """`StateStore.attempts()`: every attempt in its order (started_at, job_id,
        number: no ties). Only the rows a write changed are read again (`_watch` tells
        their rowids), then sorted by the same key: a reclaim's pass changes one or two
        attempts of the many a spot job piles up."""
        if self._conn.in_transaction or not self._watching:
            return StateStore.attempts(self)
        if self._stale_attempts is None:
            sql = "SELECT rowid AS sim_rowid, * FROM attempts"
            self._attempt_rows = {r[0]: self._attempt_of(r) for r in self._conn.execute(sql)}
        else:
            sql = "SELECT rowid AS sim_rowid, * FROM attempts WHERE rowid = ?"
            for rowid in sorted(self._stale_attempts):
                row = self._conn.execute(sql, (rowid,)).fetchone()
                if row is None:
                    self._attempt_rows.pop(rowid, None)
                else:
                    self._attempt_rows[rowid] = self._attempt_of(row)
        self._stale_attempts = set()
        return sorted(self._attempt_rows.values(), key=_attempt_order)

    all_attempts = _remembered(_every_attempt, ("attempts",))  # every one, in order
    ledger = _remembered(StateStore.ledger, ("ledger", "jobs"))
    instances = _remembered(StateStore.instances, ("instances", "attempts"))
    # events of one kind (`_watch`: an event forgets only the reads of its kind)
    checkpoints = _remembered(StateStore.checkpoints, ("events:checkpoint",))
    lost_shares = _remembered(StateStore.lost_shares, ("events:attempt_finished",))
    migration = _remembered(StateStore.migration, ("events:checkpoint_migrated",))

    @property
    def changes(self) -> int:
        """Write transactions so far that changed a row a remembered read may read (not
        lease heartbeats): equal at two moments, no read's answer changed between."""
        return self._changed

    @classmethod
    def open_fast(
        cls, path, clock, *, new_id: Callable[[], str], kept: bool = True
    ) -> SimStateStore:
        """A new state at `path`, held in memory while the simulation runs and written to
        the file when closed (`kept`; not for a run whose folder is thrown away): a copy
        of a file `StateStore.open` created and migrated at the same moment
        (`_migrated`), so migrations run once per process, and no write waits for a
        file's locks or journal. A simulator's store is thrown away; the schema, the SQL
        and the rows are the production store's."""
        from broker.state.model import StateError
        from broker.state.sqlite_backend import SqliteBackend

        file = Path(path)
        if file.exists():
            raise StateError(f"{file}: a simulation starts from a new state file")
        conn, watcher = _connection(_migrated(clock.now()))
        store = cls(conn, clock, file, new_id, SqliteBackend(file))
        store._file = file if kept else None
        store._watch(watcher)
        return store

    def _watch(self, watcher: _Watcher) -> None:
        """Be the store the connection's triggers tell which tables a write changes
        (`_watching_triggers`), so a write forgets only the reads of those tables (an
        interrupted attempt's events and ledger rows leave the jobs' manifests
        remembered); of the events, which kinds (a notice leaves the checkpoints
        remembered). The triggers are in the in-memory database only: the file written
        when it closes has none (`_without_triggers`)."""
        watcher.store = self
        self._watcher = watcher
        self._watching = True

    def close(self) -> None:
        """Close, writing the state to its file first (when opened by `open_fast`). The
        connection is kept for the next `open_fast` of this thread (`_connection`), when
        it is watched and no write is open; this store cannot use it any more."""
        conn = self._conn
        if conn is _closed():
            return  # closed already
        if self._file is not None:
            self._file.write_bytes(_without_triggers(conn.serialize()))
        if not self._watching or conn.in_transaction or getattr(_IDLE, "conn", None) is not None:
            super().close()
        else:
            _IDLE.conn = (conn, self._watcher)
        self._conn = _closed()  # its reads and writes fail, as a closed store's do

    def _writing(self) -> Iterator[str]:
        """A write transaction (`StateStore._write`); the remembered reads are forgotten
        only when it changed a row (a pass's lease heartbeat mostly changes none). Reads
        inside it are never remembered (`_remembered`), so they see its own writes."""
        before = self._conn.total_changes
        try:
            yield from super()._writing()
        finally:
            if self._conn.total_changes != before and not self._leases_only:
                self._changed += 1
                self._forget(self._touched if self._watching else _READS_OF)
            self._touched.clear()

    def heartbeat(self) -> int:
        """`StateStore.heartbeat`, which writes the leases table alone: no remembered read
        reads it (leases are read by claims, never remembered), so the memory is kept."""
        self._leases_only = True
        try:
            return super().heartbeat()
        finally:
            self._leases_only = False

    def _attempt_changed(self, rowid: int) -> None:
        if self._stale_attempts is not None:
            self._stale_attempts.add(rowid)

    def _picked_attempts(
        self, job_id: str | None = None, states: Iterable[AttemptState] | None = None
    ) -> list[Attempt]:
        """`StateStore.attempts`, picked from every attempt read once (`all_attempts`):
        its SQL filters them by job and state and keeps the order of every attempt
        (started_at, job_id, number: one order, no ties), so a filter here gives the same
        list, and one query serves every job's and every state's question."""
        if self._conn.in_transaction:
            return StateStore.attempts(self, job_id, states)
        picked = self.all_attempts()
        if job_id is not None:
            picked = [a for a in picked if a.job_id == job_id]
        if states is not None:
            wanted = _state_names(states)
            picked = [a for a in picked if a.state in wanted]
        return picked

    attempts = _remembered(_picked_attempts, ("attempts",))

    def _picked_jobs(
        self,
        states: Iterable[JobState] | None = None,
        team: str | None = None,
        queue: str | None = None,
        submitter: str | None = None,
    ) -> list[Job]:
        """`StateStore.jobs`, a question of states alone picked from every job read once
        (`all_jobs`), as `attempts` is: its SQL keeps the order of every job (created_at,
        run, id: no ties)."""
        if self._conn.in_transaction or (team, queue, submitter) != (None, None, None):
            return StateStore.jobs(self, states, team, queue, submitter)
        picked = self.all_jobs()
        if states is not None:
            wanted = _state_names(states)
            picked = [j for j in picked if j.state in wanted]
        return picked

    jobs = _remembered(_picked_jobs, ("jobs", "job_versions"))

    def attempts_of(self, job_ids: Iterable[str]) -> dict[str, list[Attempt]]:
        """`StateStore.attempts_of`, picked from every attempt read once (as `attempts`)."""
        if self._conn.in_transaction:
            return super().attempts_of(job_ids)
        found: dict[str, list[Attempt]] = {job_id: [] for job_id in job_ids}
        for attempt in self.all_attempts():
            if attempt.job_id in found:
                found[attempt.job_id].append(attempt)
        return found

    def events(self, job_id: str, after: int = 0) -> list[Event]:
        """`StateStore.events`, reading only the events written since the job's last read:
        events are only ever appended, with increasing ids (one writer, AUTOINCREMENT),
        so those read before are still the job's first ones."""
        if self._conn.in_transaction:  # inside a write: read as the production store does
            return super().events(job_id, after)
        known = self._events.setdefault(job_id, [])
        known += super().events(job_id, known[-1].id if known else 0)
        return [e for e in known if e.id > after] if after else list(known)

    def _event(
        self, job_id: str, attempt_id: str | None, now: str, kind: str, message: str, data: Any
    ) -> None:
        """`StateStore._event`, telling the reads of events of its kind to forget (the
        events table has no trigger for a new row: `_watching_triggers`)."""
        self._touched.add(f"events:{kind}")
        super()._event(job_id, attempt_id, now, kind, message, data)

    # `StateStore._redacted`, remembered for the process (called as the function itself)
    _redacted = staticmethod(_redacted)  # type: ignore[assignment]

    def _ledger_of(self, row: sqlite3.Row) -> LedgerEntry:
        """A ledger row decoded once per content (a pass's budget reads every entry)."""
        return self._decoded(row, ledger_of)

    def _decoded(self, row: sqlite3.Row, decode: Callable[[sqlite3.Row], Any]) -> Any:
        key = (decode, tuple(row))
        if key not in self._rows:
            self._rows[key] = decode(row)
        return self._rows[key]

    def _forget(self, tables) -> None:
        """Forget the remembered answers of every read of `tables`."""
        for table in tables:
            for name in _READS_OF.get(table, ()):
                self._memo[name] = {}


def _state_names(states: Iterable[str] | str) -> set[str]:
    """The states a filter keeps, as the store's SQL takes them (`_filters`: one state
    or several)."""
    return {states} if isinstance(states, str) else {str(s) for s in states}


def _attempt_order(attempt: Attempt) -> tuple:
    """`ORDER BY started_at, job_id, number` (the text times are fixed-width UTC, so
    their text order is their time order; text compares as its code points)."""
    return attempt.started_at, attempt.job_id, attempt.number
