"""The rows a write transaction has locked and read, kept for the rest of that write.

Inside a write the job and attempt rows it read cannot change but by the write itself (on
PostgreSQL they are locked `FOR UPDATE`; SQLite's writers take turns), so a second read
of one (a state check after a claim, the lease's release, a version waiting to settle)
would only cost a round trip to the server. A write's own updates of a kept row
(`StateStore._update`, the lease it takes or drops) are applied to what is kept, and the
whole is dropped when the write ends (commit, rollback, savepoint undone): nothing kept
outlives the transaction that locked it.

What a row was read *with* (a job's lease, its attempts' count: `JOB_HELD`) is kept only
when the statement that read it began with the job's row already locked by this write.
On PostgreSQL a statement that waits for a row lock (or takes one on a row committed
after the statement began) returns the row as committed but reads the other tables as
they were when it began: a lease or an attempt that the other writer added would be
missed. So a write that claims a job sends `JOB_HELD` right after the locking read, in
the same round trip (`LeaseWrites._claimed_row`): a pipeline's statements run in turn, so
it begins with the lock held, and what it read with the row is kept; a row read without
it has no counts, and a count not kept is read by a query of its own (`_held_count`).

Part of `StateStore` (broker.state.store), whose `_write` opens and drops `_held_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.state.backend import Connection

# A job's row as a lease's claim reads it: the row, its lease (`holder`, `expires_at`;
# None when it has none) and its attempts' count and latest number (`attempts_made`,
# `latest_attempt`), in one round trip.
JOB_HELD = (
    "SELECT j.*, l.holder, l.expires_at,"
    " (SELECT COUNT(*) FROM attempts a WHERE a.job_id = j.id) AS attempts_made,"
    " (SELECT MAX(a.number) FROM attempts a WHERE a.job_id = j.id) AS latest_attempt"
    " FROM jobs j LEFT JOIN leases l ON l.job_id = j.id WHERE j.id = ?"
)


class HeldRows:
    """A write's kept rows (a part of `StateStore`)."""

    _conn: Connection
    _held_rows: dict[tuple[str, str], Any] | None  # (table, id) -> row, while a write is open

    def _held(self, table: str, key: str) -> Any:
        """The row of `table` with id `key` that this write already locked and read, as its
        own updates left it (None when it has not): inside a write the row cannot change
        but by this write (it is locked `FOR UPDATE` on PostgreSQL; SQLite's writers take
        turns), so reading it again would only cost a round trip."""
        return self._held_rows.get((table, key)) if self._held_rows is not None else None

    def _hold_row(self, table: str, key: str, row: Any) -> Any:
        """Remember a row this write locked and read (`_held`); `row` itself."""
        if self._held_rows is not None and self._conn.in_transaction:
            self._held_rows[(table, key)] = row
        return row

    def _keep_held(self, table: str, key: Any, columns: Mapping[str, Any]) -> None:
        """This write updated `columns` of a row it holds: what `_held` gives, updated too."""
        held = self._held(table, key) if isinstance(key, str) else None
        if held is not None and self._held_rows is not None:
            row = held if type(held) is dict else dict(held)  # a dict: made by a change before
            self._held_rows[(table, key)] = {**row, **columns}

    def _held_count(self, job_id: str, name: str) -> int | None:
        """`attempts_made` or `latest_attempt` of a job this write holds, when it was read
        after the job's row was locked (else None: the caller queries it)."""
        held = self._held("jobs", job_id)
        if held is None or name not in held.keys():
            return None
        return held[name]
