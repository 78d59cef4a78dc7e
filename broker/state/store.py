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

import json
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from broker.clock import Clock
from broker.spec import JobSpec
from broker.state import schema
from broker.state.model import (
    IN_FLIGHT,
    OPEN_ATTEMPT,
    OUTCOME_JOB_STATE,
    TERMINAL,
    TERMINATED,
    Attempt,
    AttemptState,
    Event,
    IllegalTransition,
    Instance,
    Job,
    JobState,
    JobVersion,
    LedgerEntry,
    Outcome,
    StateError,
    SubmitResult,
    UnknownAttempt,
    UnknownJob,
    attempt_of,
    can_transition,
    decimal_text,
    event_of,
    instance_of,
    job_of,
    json_text,
    ledger_columns,
    ledger_of,
    to_decimal,
    total,
    ts_text,
    version_of,
)
from broker.state.placed import PlacedOn

if TYPE_CHECKING:
    from providers.base import InterruptionNotice

JOB_SELECT = (
    "SELECT j.*, v.digest FROM jobs j"
    " JOIN job_versions v ON v.job_id = j.id AND v.version = j.version"
)
LEDGER_SELECT = "SELECT l.*, j.team FROM ledger l JOIN jobs j ON j.id = l.job_id"


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
    """One event row (module-level so that tests can make it fail mid-transaction)."""
    conn.execute(
        "INSERT INTO events (job_id, attempt_id, time, kind, message, data_json)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (job_id, attempt_id, now, kind, message, json_text(dict(data))),
    )


class StateStore:
    """Durable broker state. Open with `StateStore.open(path, clock)`."""

    def __init__(
        self, conn: sqlite3.Connection, clock: Clock, path: Path, new_id: Callable[[], str]
    ) -> None:
        self._conn, self._clock, self.path, self._new_id = conn, clock, path, new_id

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        clock: Clock,
        *,
        busy_timeout: float = 30.0,
        new_id: Callable[[], str] | None = None,
    ) -> StateStore:
        """Open (creating it and its directory if needed) and migrate the state file.

        `busy_timeout` is how long a write waits for another writer, in seconds;
        `new_id` makes the 12 hex digits of job and attempt ids (tests, simulator).
        """
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(file, timeout=busy_timeout, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys = ON")
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise StateError(f"{file}: cannot use WAL mode here (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")  # a commit survives power loss too
            schema.migrate(conn, ts_text(clock.now()))
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

    # --- jobs and versions ----------------------------------------------------------

    def submit(self, spec: JobSpec, manifest_text: str, digest: str) -> SubmitResult:
        """Enqueue a manifest's spec, or record its new version (rules in docs/state.md).

        The job is known by the spec's (team, name); `manifest_text` is the document as
        written and `digest` tells an unchanged manifest from a changed one. The spec is
        kept in `broker.spec_codec`'s encoding and read back decoded (`version().spec`).
        """
        from broker.spec_codec import encode

        team, name, queue, priority = spec.team, spec.name, spec.queue, spec.priority
        version = {"digest": digest, "manifest_text": manifest_text, "queue": queue}
        version |= {"spec_json": json_text(encode(spec)), "priority": priority}
        with self._write() as now:
            version["submitted_at"] = now
            row = self._conn.execute(
                "SELECT * FROM jobs WHERE team = ? AND name = ?", (team, name)
            ).fetchone()
            if row is None:
                job_id = self._fresh_id("j-", "jobs")
                row = {"id": job_id, "team": team, "name": name, "queue": queue}
                row |= {"priority": priority, "state": JobState.QUEUED, "version": 1}
                self._insert("jobs", row | {"created_at": now, "updated_at": now, "queued_at": now})
                self._insert("job_versions", {"job_id": job_id, "version": 1, **version})
                message = f"submitted {team}/{name} (version 1)"
                data = {"version": 1, "digest": digest, "queue": queue, "priority": priority}
                self._event(job_id, None, now, "submitted", message, data)
                return SubmitResult(job_id, 1, created=True, changed=True)
            job_id, state = row["id"], JobState(row["state"])
            current, pending = row["version"], row["pending_version"]
            newest = pending or current
            if self._digest(job_id, newest) == digest:
                return SubmitResult(job_id, newest, created=False, changed=False)
            if pending is not None and self._digest(job_id, current) == digest:
                self._set(job_id, now, pending_version=None)
                message = f"version {pending} withdrawn: the manifest is version {current} again"
                self._event(job_id, None, now, "version", message, {"dropped": pending})
                return SubmitResult(job_id, current, created=False, changed=True)
            (number,) = self._conn.execute(
                "SELECT MAX(version) + 1 FROM job_versions WHERE job_id = ?", (job_id,)
            ).fetchone()
            self._insert("job_versions", {"job_id": job_id, "version": number, **version})
            if self._in_flight(job_id, state):
                self._set(job_id, now, pending_version=number)
                message = f"version {number} waits for the live attempt to end"
                data = {"version": number, "digest": digest, "waiting": True}
                self._event(job_id, None, now, "version", message, data)
            else:
                self._put_in_force(job_id, state, current, number, now)
            return SubmitResult(job_id, number, created=False, changed=True)

    def transition(
        self,
        job_id: str,
        to: JobState,
        reason: str = "",
        data: Mapping[str, Any] | None = None,
        expect: JobState | None = None,
    ) -> bool:
        """Move a job; False (and no change) when `expect` is given and the state is not it.

        Raises IllegalTransition for a move the state machine forbids.
        """
        to = JobState(to)
        with self._write() as now:
            state = self._job_state(job_id)
            if expect is not None and state != JobState(expect):
                return False
            self._move(job_id, state, to, now, reason, data or {}, None)
            self._settle(job_id, now)
            return True

    # --- attempts -------------------------------------------------------------------

    def start_attempt(self, job_id: str, placed: PlacedOn) -> str:
        """A new attempt on `placed` for a PLANNED (or MIGRATING) job, which moves to
        LAUNCHING; its id. The price, market and price source in force are the record's.

        The id exists before any instance does: providers use it as the launch's
        idempotency key and tag, so a restarted controller finds what it launched.
        """
        market = placed.market
        attempt = {"placement_json": json_text(placed.to_row()), "market": market}
        attempt |= {"price_per_hour_usd": decimal_text(placed.price_per_hour), "reason": ""}
        attempt |= {"price_source": placed.price_source, "price_as_of": placed.price_as_of}
        with self._write() as now:
            row = self._job_row(job_id)
            state = JobState(row["state"])
            if state not in (JobState.PLANNED, JobState.MIGRATING):
                why = "an attempt starts from planned or migrating"
                raise IllegalTransition(job_id, state, JobState.LAUNCHING, why)
            sql = "SELECT COUNT(*) + 1 FROM attempts WHERE job_id = ?"
            (number,) = self._conn.execute(sql, (job_id,)).fetchone()
            attempt_id = self._fresh_id("a-", "attempts")
            attempt |= {"id": attempt_id, "job_id": job_id, "number": number}
            attempt |= {"version": row["version"], "state": AttemptState.LAUNCHING}
            self._insert("attempts", attempt | {"started_at": now})
            data = {"attempt": attempt_id, "number": number, "market": market}
            data["price_per_hour_usd"] = attempt["price_per_hour_usd"]
            reason = f"attempt {number} on {placed.where}"
            self._move(job_id, state, JobState.LAUNCHING, now, reason, data, attempt_id)
            return attempt_id

    def attempt_running(self, attempt_id: str, instance: Mapping[str, Any]) -> bool:
        """The attempt's instance is up: record it, and move its job LAUNCHING -> RUNNING.

        False (no change) when the attempt was not launching (already seen, or ended).
        A cancelled job stays cancelled; its instance is still recorded, to be terminated.
        `instance` has `provider_id` and optionally cloud, region, zone, instance_type
        (default: the placement's), tags and state (default "running").
        """
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            if att["state"] != AttemptState.LAUNCHING:
                return False
            running = {"state": AttemptState.RUNNING, "running_at": now}
            self._update("attempts", {"id": attempt_id}, running)
            placed = PlacedOn.from_row(json.loads(att["placement_json"]))
            planned = {"cloud": placed.cloud, "region": placed.region, "zone": placed.zone}
            planned["instance_type"] = placed.instance_type
            found = {k: instance.get(k, default) for k, default in planned.items()}
            found |= {"state": "running", **instance, "attempt_id": attempt_id}
            self._upsert_instance(now, found)
            job_id, provider_id = att["job_id"], instance["provider_id"]
            message = f"attempt {att['number']} running on {provider_id}"
            data = {"provider_id": provider_id}
            if self._job_state(job_id) is JobState.LAUNCHING and self._is_latest(att):
                up = (JobState.LAUNCHING, JobState.RUNNING)
                self._move(job_id, *up, now, message, data, attempt_id)
            self._event(job_id, attempt_id, now, "attempt_running", message, data)
            return True

    def finish_attempt(
        self,
        attempt_id: str,
        outcome: Outcome,
        exit_code: int | None = None,
        reason: str = "",
        billed_hours: Any = 0,
        ledger_entries: Sequence[Mapping[str, Any]] = (),
        job_to: JobState | None = None,
    ) -> bool:
        """End an attempt, move its job and write its ledger entries, all in one transaction.

        False (no change, nothing billed) when the attempt has already ended: a
        restarted or second controller cannot bill twice. The job moves to
        `job_to`, by default the outcome's state (e.g. QUEUED to retry a
        recoverable failure), when the job is still LAUNCHING or RUNNING on this
        attempt; a job that moved on (cancelled, interrupted) keeps its state.
        Ledger entries: see `broker.state.model.ledger_columns`.
        """
        if outcome not in OUTCOME_JOB_STATE:
            raise ValueError(f"outcome must be one of {sorted(OUTCOME_JOB_STATE)}: {outcome!r}")
        hours = to_decimal(billed_hours)
        target = JobState(job_to) if job_to is not None else OUTCOME_JOB_STATE[outcome]
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            if att["state"] not in OPEN_ATTEMPT:
                return False
            job_id = att["job_id"]
            rows = [ledger_columns(entry, att, hours, now) for entry in ledger_entries]
            ended = {"state": AttemptState(outcome), "ended_at": now, "exit_code": exit_code}
            ended |= {"reason": reason, "billed_hours": decimal_text(hours)}
            self._update("attempts", {"id": attempt_id}, ended)
            for columns in rows:
                ids = {"job_id": job_id, "attempt_id": attempt_id, "created_at": now}
                self._insert("ledger", columns | ids)
            charged = decimal_text(total(Decimal(columns["amount_usd"]) for columns in rows))
            message = f"attempt {att['number']} {outcome}" + (f": {reason}" if reason else "")
            data = {"outcome": outcome, "exit_code": exit_code, "billed_hours": decimal_text(hours)}
            data["charged_usd"] = charged
            state = self._job_state(job_id)
            if state in (JobState.LAUNCHING, JobState.RUNNING) and self._is_latest(att):
                self._move(job_id, state, target, now, message, data, attempt_id)
            self._event(job_id, attempt_id, now, "attempt_finished", message, data)
            self._settle(job_id, now)
            return True

    def record_checkpoint(self, attempt_id: str, at: datetime | None = None, uri: str = "") -> None:
        """Note that an attempt's work up to `at` (default now) is safe in a checkpoint.

        An event (kind "checkpoint"), nothing else: reports count an interrupted
        attempt's lost work from its last checkpoint rather than from its start.
        """
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            data = {"at": ts_text(at) if at is not None else now, "uri": uri}
            message = f"attempt {att['number']} checkpointed"
            self._event(att["job_id"], attempt_id, now, "checkpoint", message, data)

    def record_notice(
        self, attempt_id: str, notice: InterruptionNotice, action: str, meaning: str
    ) -> bool:
        """Note a provider's interruption notice on its attempt (an event of kind
        "interruption_notice"), once per attempt and kind: a restarted controller that
        is told again records nothing. False when it was known already."""
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            sql = (
                "SELECT data_json FROM events WHERE kind = 'interruption_notice'"
                " AND attempt_id = ?"
            )
            for row in self._conn.execute(sql, (attempt_id,)):
                if json.loads(row["data_json"]).get("kind") == notice.kind:
                    return False
            deadline = ts_text(notice.deadline) if notice.deadline is not None else None
            data = {"kind": notice.kind, "noticed_at": ts_text(notice.noticed_at)}
            data |= {"deadline": deadline, "action": action}
            until = f", stops at {deadline}" if deadline else ""
            message = f"attempt {att['number']}: {notice.kind} notice{until}: {meaning}"
            self._event(att["job_id"], attempt_id, now, "interruption_notice", message, data)
            return True

    def record_migration(self, attempt_id: str, source: str, target: str, size: int) -> None:
        """Note that the checkpoint an attempt resumes from was copied from `source` to
        `target` (`size` bytes): once per attempt, so a restarted controller does not
        copy again."""
        with self._write() as now:
            att = self._attempt_row(attempt_id)
            data = {"from": source, "to": target, "bytes": size}
            message = f"attempt {att['number']}: checkpoint copied from {source} to {target}"
            self._event(att["job_id"], attempt_id, now, "checkpoint_migrated", message, data)

    def migration(self, attempt_id: str) -> dict[str, Any] | None:
        """The recorded checkpoint copy of an attempt, or None."""
        sql = "SELECT data_json FROM events WHERE kind = 'checkpoint_migrated' AND attempt_id = ?"
        row = self._conn.execute(sql, (attempt_id,)).fetchone()
        return json.loads(row["data_json"]) if row is not None else None

    # --- instances ------------------------------------------------------------------

    def record_instance(
        self,
        cloud: str,
        provider_id: str,
        state: str,
        *,
        attempt_id: str | None = None,
        region: str | None = None,
        zone: str | None = None,
        instance_type: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Instance:
        """Record what a provider reports about an instance (None keeps what is known).

        `provider_id` is unique within its cloud (adapters qualify names that are
        not, e.g. GCP's `zone/name`). The state "terminated" stamps `terminated_at`.
        """
        given = {"region": region, "zone": zone, "instance_type": instance_type, "tags": tags}
        found = {k: v for k, v in given.items() if v is not None}
        found |= {"cloud": cloud, "provider_id": provider_id, "state": state}
        with self._write() as now:
            if attempt_id is not None:
                found["attempt_id"] = self._attempt_row(attempt_id)["id"]
            self._upsert_instance(now, found)
        return self.instances(cloud=cloud, provider_id=provider_id)[0]

    def _upsert_instance(self, now: str, found: Mapping[str, Any]) -> None:
        """Insert or update one instance from the reported fields (absent ones are kept)."""
        key = {"cloud": found["cloud"], "provider_id": str(found["provider_id"])}
        sql = "SELECT * FROM instances WHERE cloud = ? AND provider_id = ?"
        old = self._conn.execute(sql, tuple(key.values())).fetchone()
        fields = ("region", "zone", "instance_type")
        row = dict(old) if old else {**dict.fromkeys(fields, ""), "tags_json": "{}"}
        row |= {k: found[k] for k in (*fields, "attempt_id") if k in found}
        if "tags" in found:
            row["tags_json"] = json_text(dict(found["tags"]))
        state = str(found["state"])
        row |= {"state": state, "updated_at": now}
        if state == TERMINATED and not row.get("terminated_at"):
            row["terminated_at"] = now
        if old is None:
            self._insert("instances", row | key | {"created_at": now})
        else:
            self._update("instances", key, row)
        attempt_id = row.get("attempt_id")
        if attempt_id is not None and (old is None or old["state"] != state):
            job_id = self._attempt_row(attempt_id)["job_id"]
            message = f"instance {key['provider_id']} on {key['cloud']} {state}"
            self._event(job_id, attempt_id, now, "instance", message, {**key, "state": state})

    # --- reads ----------------------------------------------------------------------

    def job(self, key: str) -> Job:
        """A job by id, `team/name`, or a name that only one team uses."""
        rows = self._conn.execute(f"{JOB_SELECT} WHERE j.id = ?", (key,)).fetchall()
        if not rows and "/" in key:
            team, name = key.split("/", 1)
            rows = self._conn.execute(
                f"{JOB_SELECT} WHERE j.team = ? AND j.name = ?", (team, name)
            ).fetchall()
        if not rows:
            rows = self._conn.execute(f"{JOB_SELECT} WHERE j.name = ?", (key,)).fetchall()
        if len(rows) == 1:
            return job_of(rows[0])
        if not rows:
            raise UnknownJob(f"no job {key!r}")
        teams = ", ".join(sorted(f"{r['team']}/{r['name']}" for r in rows))
        raise UnknownJob(f"{key!r} is more than one job ({teams}): give team/name")

    def jobs(
        self,
        states: Iterable[JobState] | None = None,
        team: str | None = None,
        queue: str | None = None,
    ) -> list[Job]:
        """Jobs in creation order, optionally filtered."""
        where, params = _filters(("j.state", states), ("j.team", team), ("j.queue", queue))
        sql = f"{JOB_SELECT}{where} ORDER BY j.created_at, j.id"
        return [job_of(r) for r in self._conn.execute(sql, params)]

    def queued(self, queue: str | None = None) -> list[Job]:
        """Queued jobs in the order they should be considered: priority, then FIFO."""
        where, params = _filters(("j.state", [JobState.QUEUED]), ("j.queue", queue))
        sql = f"{JOB_SELECT}{where} ORDER BY j.priority DESC, j.queued_at, j.id"
        return [job_of(r) for r in self._conn.execute(sql, params)]

    def version(self, job_id: str, number: int | None = None) -> JobVersion:
        """One version of a job's manifest; by default the one in force."""
        if number is None:
            number = self._job_row(job_id)["version"]
        row = self._conn.execute(
            "SELECT * FROM job_versions WHERE job_id = ? AND version = ?", (job_id, number)
        ).fetchone()
        if row is None:
            raise UnknownJob(f"job {job_id} has no version {number}")
        return version_of(row)

    def versions(self, job_id: str) -> list[JobVersion]:
        sql = "SELECT * FROM job_versions WHERE job_id = ? ORDER BY version"
        return [version_of(r) for r in self._conn.execute(sql, (job_id,))]

    def attempt(self, attempt_id: str) -> Attempt:
        return attempt_of(self._attempt_row(attempt_id))

    def attempts(
        self, job_id: str | None = None, states: Iterable[AttemptState] | None = None
    ) -> list[Attempt]:
        """A job's attempts in order; or, with `states` (e.g. OPEN_ATTEMPT), any job's."""
        where, params = _filters(("job_id", job_id), ("state", states))
        sql = f"SELECT * FROM attempts{where} ORDER BY started_at, job_id, number"
        return [attempt_of(r) for r in self._conn.execute(sql, params)]

    def instances(
        self,
        state: str | Iterable[str] | None = None,
        attempt_id: str | None = None,
        cloud: str | None = None,
        provider_id: str | None = None,
    ) -> list[Instance]:
        """Instances as last recorded, for reconciliation with what providers report."""
        where, params = _filters(
            ("i.state", [state] if isinstance(state, str) else state),
            ("i.attempt_id", attempt_id),
            ("i.cloud", cloud),
            ("i.provider_id", provider_id),
        )
        sql = (
            "SELECT i.*, a.job_id FROM instances i LEFT JOIN attempts a ON a.id = i.attempt_id"
            f"{where} ORDER BY i.created_at, i.cloud, i.provider_id"
        )
        return [instance_of(r) for r in self._conn.execute(sql, params)]

    def events(self, job_id: str, after: int = 0) -> list[Event]:
        """A job's events in order; `after` an event id, to follow new ones."""
        sql = "SELECT * FROM events WHERE job_id = ? AND id > ? ORDER BY id"
        return [event_of(r) for r in self._conn.execute(sql, (job_id, after))]

    def ledger(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        team: str | None = None,
        job_id: str | None = None,
    ) -> list[LedgerEntry]:
        """Ledger entries whose period ended in [since, until), oldest first."""
        where, params = _filters(("j.team", team), ("l.job_id", job_id))
        for op, moment in ((">=", since), ("<", until)):
            if moment is not None:
                where += f"{' AND' if where else ' WHERE'} l.period_end {op} ?"
                params.append(ts_text(moment))
        sql = f"{LEDGER_SELECT}{where} ORDER BY l.period_end, l.id"
        return [ledger_of(r) for r in self._conn.execute(sql, params)]

    def checkpoints(self) -> dict[str, datetime]:
        """The time of each attempt's last recorded checkpoint (attempts without one: absent)."""
        sql = "SELECT attempt_id, data_json FROM events WHERE kind = 'checkpoint'"
        last: dict[str, str] = {}
        for row in self._conn.execute(sql):
            at = json.loads(row["data_json"])["at"]
            if row["attempt_id"] is not None and at > last.get(row["attempt_id"], ""):
                last[row["attempt_id"]] = at
        return {attempt: datetime.fromisoformat(at) for attempt, at in last.items()}

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

    def _put_in_force(self, job_id: str, state: JobState, old: int, number: int, now: str) -> None:
        """Make `number` the version in force and queue the job for it.

        From a terminal state this starts a new run (the only way out of one), which
        joins the back of its priority; a queued job keeps its place in the queue.
        """
        version = self.version(job_id, number)
        columns: dict[str, Any] = {"version": number, "pending_version": None}
        columns |= {"queue": version.queue, "priority": version.priority, "state": JobState.QUEUED}
        if state in TERMINAL:
            columns["queued_at"] = now
        self._set(job_id, now, **columns)
        data = {"version": number, "previous": old, "digest": version.digest}
        if state is JobState.QUEUED:
            message = f"version {number} replaces version {old}"
            self._event(job_id, None, now, "version", message, data)
        else:
            message = f"{state} -> {JobState.QUEUED}: version {number}"
            data |= {"from": state, "to": JobState.QUEUED, "resubmitted": state in TERMINAL}
            self._event(job_id, None, now, "transition", message, data)

    def _settle(self, job_id: str, now: str) -> None:
        """Put a waiting version in force once no attempt of the job may be alive."""
        row = self._job_row(job_id)
        pending, state = row["pending_version"], JobState(row["state"])
        if pending is not None and not self._in_flight(job_id, state):
            self._put_in_force(job_id, state, row["version"], pending, now)


def _filters(*pairs: tuple[str, Any]) -> tuple[str, list[Any]]:
    """` WHERE a = ? AND b IN (?, ?)` for the pairs whose value is not None."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in pairs:
        if value is None:
            continue
        if isinstance(value, str):
            clauses.append(f"{column} = ?")
            params.append(value)
        else:
            values = [str(v) for v in value]
            if not values:
                clauses.append("1 = 0")
                continue
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(values)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
