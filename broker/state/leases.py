"""Leases: which controller holds a job's next step, so several controllers share a queue.

Any number of `broker run` processes may point at one state. A job's next step (its
launch, a recovery, a migration, the stop of a cancelled job) belongs to the controller
that holds the job's lease: a row of `leases` with the holder's id, the step, and an
expiry. The lease is taken by compare-and-set inside the same write transaction as the
state change it guards (`StateStore._claim`), renewed by every write of its holder and
by the holder's heartbeat at the start of each pass, and released in the transaction
that leaves the job at rest (queued, running, or ended). A lease whose expiry has
passed is anyone's: a controller killed mid-launch has its claims taken over, and the
instances it launched are found by their attempt tag, as after a restart.

Every time here is the store's injected clock. Writes made without a holder (the
single-user commands: submit, a store opened by a script) take no lease; reads never do.

The claim query is the one place the dialects differ: on PostgreSQL it locks the job's
row with `FOR UPDATE ... SKIP LOCKED`, so a claim that meets another transaction's lock
fails at once (held) instead of waiting; on SQLite, `BEGIN IMMEDIATE` has already
serialised the writers.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from broker.state.held import JOB_HELD
from broker.state.model import JobState, StateError, UnknownJob, parse_ts, ts_text

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

DEFAULT_LEASE_SECONDS = 60.0
# Job states in which a step is half done: the holder keeps its lease through them.
STEP_STATES = (JobState.PLANNED, JobState.LAUNCHING, JobState.INTERRUPTED, JobState.MIGRATING)

_CLAIM = JOB_HELD  # the whole job row: the write that claims keeps it (broker.state.held)
_LOCK = {"sqlite": "", "postgresql": " FOR UPDATE OF j SKIP LOCKED"}
_WAIT_LOCK = "SELECT id FROM jobs WHERE id = ?"  # + " FOR UPDATE": waits for another write
_TAKE = (
    "INSERT INTO leases (job_id, holder, step, taken_at, heartbeat_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET"
    " taken_at = CASE WHEN leases.holder = excluded.holder THEN leases.taken_at"
    " ELSE excluded.taken_at END,"
    " holder = excluded.holder, step = excluded.step,"
    " heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at"
)


def claim_sql(dialect: str = "sqlite") -> str:
    """The claim query of `dialect`: the job and its lease, the job's row locked on
    PostgreSQL (skipped, so no row, when another transaction holds it)."""
    return _CLAIM + _LOCK[dialect]


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a store writes as: a controller's id and how long its leases last."""

    id: str
    seconds: float = DEFAULT_LEASE_SECONDS

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a lease holder needs an id")
        if not self.seconds > 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {self.seconds}")

    @classmethod
    def new(cls, seconds: float = DEFAULT_LEASE_SECONDS, kind: str = "controller") -> Holder:
        """A fresh id for this process: `<kind>@<host>:<pid>:<random>` (the random part
        keeps two runs of one pid, or two stores of one process, apart)."""
        return cls(f"{kind}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}", seconds)


def holder_gone(holder: str) -> bool:
    """Whether a holder named by `Holder.new` was a process of this host that has exited
    (its claims need not wait for their expiry: a controller killed and restarted here
    resumes at once). False for any other name, and for a pid that runs again (the
    lease then simply expires)."""
    _, at, rest = holder.partition("@")
    parts = rest.split(":")
    if not at or len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): not gone
        return False
    return False


@dataclass(frozen=True, slots=True)
class Lease:
    """A job's lease as stored."""

    job_id: str
    holder: str
    step: str
    taken_at: datetime
    heartbeat_at: datetime
    expires_at: datetime


class LeaseHeld(StateError):
    """Another controller holds the job's next step; nothing was written."""

    def __init__(self, job_id: str, holder: str, expires_at: str | None) -> None:
        until = f" until {expires_at}" if expires_at else " (its row is locked)"
        super().__init__(f"job {job_id}: its next step is held by {holder}{until}")
        self.job_id, self.holder = job_id, holder


class LeaseWrites:
    """Leases (a part of `StateStore`, which provides the connection and transactions)."""

    _conn: sqlite3.Connection
    _write: Callable[[], AbstractContextManager[str]]
    _event: Callable[..., None]
    _job_row: Callable[[str], Any]
    _held: Callable[[str, str], Any]
    _hold_row: Callable[[str, str, Any], Any]
    _keep_held: Callable[[str, Any, Any], None]
    _locked: Callable[[], str]
    _holder: Holder | None
    dialect: str

    def hold_as(self, holder: Holder | None) -> None:
        """Write as `holder` from now on (None: take no leases, as a single user does)."""
        self._holder = holder

    @property
    def holder(self) -> Holder | None:
        return self._holder

    def claim(self, job_id: str, step: str) -> bool:
        """Take (or renew) the job's lease for `step`, in a transaction of its own, before
        a step that begins with a provider call (a relaunch, a stop); False when another
        controller's lease is live. True without a holder (nothing to share)."""
        try:
            with self._write() as now:
                self._claim(job_id, now, step)
        except LeaseHeld:
            return False
        return True

    def release(self, job_id: str) -> None:
        """Give the job's lease back, if this store holds it (no write when it does not:
        only its holder writes a lease under its id, so one not seen now is not there)."""
        if self._holder is None:
            return
        sql = "SELECT 1 FROM leases WHERE job_id = ? AND holder = ?"
        if self._conn.execute(sql, (job_id, self._holder.id)).fetchone() is None:
            return
        with self._write():
            self._drop_lease(job_id)

    def heartbeat(self) -> int:
        """Push back the expiry of every lease this store holds (a controller does it at
        the start of each pass, so a long pass keeps its claims); how many. No write when
        it holds none (most passes: leases are released at rest), as `release` reasons."""
        if self._holder is None:
            return 0
        sql = "SELECT 1 FROM leases WHERE holder = ? LIMIT 1"
        if self._conn.execute(sql, (self._holder.id,)).fetchone() is None:
            return 0
        with self._write() as now:
            sql = "UPDATE leases SET heartbeat_at = ?, expires_at = ? WHERE holder = ?"
            until = self._lease_end(now)
            return self._conn.execute(sql, (now, until, self._holder.id)).rowcount

    def leases(self) -> list[Lease]:
        """Every lease as stored (expired ones too), by job id."""
        rows = self._conn.execute("SELECT * FROM leases ORDER BY job_id").fetchall()
        return [
            Lease(
                job_id=r["job_id"],
                holder=r["holder"],
                step=r["step"],
                taken_at=_at(r["taken_at"]),
                heartbeat_at=_at(r["heartbeat_at"]),
                expires_at=_at(r["expires_at"]),
            )  # fmt: skip
            for r in rows
        ]

    # --- inside a write transaction ------------------------------------------------------

    def _claim(
        self, job_id: str, now: str, step: str, then: Callable[[], Any] | None = None
    ) -> Any:
        """Compare-and-set the job's lease to this store's holder; LeaseHeld (the caller
        rolls back) while another holder's lease is live. A lease taken over from a
        holder whose expiry passed is an event of the job, naming both. `then` sends the
        write's next read, after the claim's own statements and in their round trip; its
        pending result is returned (None without `then`)."""
        if self._holder is None:
            return then() if then is not None else None
        row, sent = self._held("jobs", job_id), None
        if row is None or "holder" not in row.keys():  # not yet read with its lease
            row, sent = self._claimed_row(job_id, locked=row is not None, then=then)
        elif then is not None:
            sent = then()
        holder, expires = row["holder"], row["expires_at"]
        mine = self._holder.id
        if holder is not None and holder != mine:
            gone = expires > now and holder_gone(holder)
            if expires > now and not gone:
                raise LeaseHeld(job_id, holder, expires)
            why = "its process has exited" if gone else f"expired at {expires}"
            message = f"{step}: lease of {holder} ({why}) taken over by {mine}"
            data = {"from": holder, "to": mine, "expires_at": expires, "step": step}
            data["holder_exited"] = gone
            self._event(job_id, None, now, "lease_taken_over", message, data)
        until = self._lease_end(now)
        self._conn.execute(_TAKE, (job_id, mine, step, now, now, until))
        self._keep_held("jobs", job_id, {"holder": mine, "expires_at": until})
        return sent

    def _job_to_claim(self, job_id: str) -> Any:
        """The job's row for a write that goes on to claim it (`_claim`): locked, and read
        again with its lease and attempt counts (`JOB_HELD`) by a statement sent with the
        lock's, in the same round trip. That statement begins once the lock is this
        write's (a pipeline's statements run in turn), so what it read with the row holds
        (broker.state.held); `_claim` then reads nothing."""
        if self._holder is None or self._held("jobs", job_id) is not None:
            return self._job_row(job_id)
        return self._claimed_row(job_id, locked=False, wait=True)[0]

    def _claimed_row(
        self,
        job_id: str,
        *,
        locked: bool,
        wait: bool = False,
        then: Callable[[], Any] | None = None,
    ) -> tuple[Any, Any]:
        """The job's row read with its lease and counts (`JOB_HELD`) after this write has
        locked it, and kept: `locked`, it already is; else it is locked first, by the
        statement sent just before, in the same round trip: waiting for another write's
        lock (`wait`, as any locking read of a job) or skipping it (the claim's: LeaseHeld
        at once). On SQLite nothing is sent to lock it: `BEGIN IMMEDIATE` already keeps
        every other writer out (and a second statement of the claim's SQL, sent while the
        first is unread, would be compiled anew). UnknownJob when there is no such job.
        With the row, what `then` sent after (`_claim`), or None."""
        locking = None
        if not locked and _LOCK[self.dialect]:  # SQLite: `BEGIN IMMEDIATE` locked it all
            lock = _WAIT_LOCK + self._locked() if wait else claim_sql(self.dialect)
            locking = self._conn.execute(lock, (job_id,))
        full = self._conn.execute(JOB_HELD, (job_id,))  # sent before either is read
        sent = then() if then is not None else None
        got = locking.fetchone() if locking is not None else True
        row = full.fetchone()
        if row is None:
            raise UnknownJob(f"no job {job_id!r}")
        if got is None:
            raise LeaseHeld(job_id, "another transaction", None)  # PostgreSQL: row locked
        return self._hold_row("jobs", job_id, row), sent

    def _rest_lease(self, job_id: str) -> None:
        """Release this holder's lease on a job that is at rest (no step half done)."""
        if self._holder is None:
            return
        if JobState(self._job_row(job_id)["state"]) not in STEP_STATES:
            self._drop_lease(job_id)

    def _drop_lease(self, job_id: str) -> None:
        assert self._holder is not None
        sql = "DELETE FROM leases WHERE job_id = ? AND holder = ?"
        self._conn.execute(sql, (job_id, self._holder.id))
        held = self._held("jobs", job_id)  # with its lease when claimed in this write
        if held is not None and "holder" in held.keys() and held["holder"] == self._holder.id:
            self._keep_held("jobs", job_id, {"holder": None, "expires_at": None})

    def _lease_end(self, now: str) -> str:
        assert self._holder is not None
        return _later(now, self._holder.seconds)


@functools.lru_cache(maxsize=1024)
def _later(now: str, seconds: float) -> str:
    """The time text `seconds` after the time text `now`; remembered, as a pass claims
    many jobs at one moment."""
    return ts_text(_at(now) + timedelta(seconds=seconds))


def _at(text: str) -> datetime:
    moment = parse_ts(text)
    assert moment is not None
    return moment
