"""`broker state migrate`: a single user's state file copied into a team's database,
row for row (ids, times, decimal text and all), in one transaction on the target.

The source is opened as any broker command opens it (migrated to this broker's
schema first), the target likewise; tables are copied parents first, so every
foreign key holds as the rows arrive. A target that already has jobs is refused
unless `into_nonempty`: then events and ledger lines take new ids of the target's
(their order kept), and a job id the target knows already stops the copy, which
changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.clock import Clock
from broker.state.location import DatabaseUrl, StateLocation
from broker.state.model import StateError

# Parents first; each table's key orders its rows (events and ledger: by id, their order).
TABLES: tuple[tuple[str, str], ...] = (
    ("jobs", "id"),
    ("job_versions", "job_id, version"),
    ("attempts", "id"),
    ("instances", "cloud, provider_id"),
    ("events", "id"),
    ("ledger", "id"),
)
SERIAL_TABLES = ("events", "ledger")


class TargetNotEmpty(StateError):
    """The target database has jobs already (and the copy was not told to add to them)."""


@dataclass(frozen=True)
class Copied:
    """How many rows of each table were copied."""

    rows: dict[str, int]


def copy_state(
    source: Path, target: StateLocation, clock: Clock, *, into_nonempty: bool = False
) -> Copied:
    """Copy every row of the state file `source` into the database `target`."""
    from broker.state.store import StateStore

    if not isinstance(target, DatabaseUrl):
        raise StateError(f"the target must be a postgresql:// URL, not {target}")
    with StateStore.open(source, clock) as src, StateStore.open(target, clock) as dst:
        (jobs,) = dst._conn.execute("SELECT COUNT(*) FROM jobs").fetchone()
        if jobs and not into_nonempty:
            raise TargetNotEmpty(
                f"the state database {target.shown} already has {jobs} job(s): nothing copied"
                " (--into-nonempty adds this history to them)"
            )
        counts: dict[str, int] = {}
        dst._backend.begin(dst._conn)
        try:
            for table, key in TABLES:
                rows = src._conn.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
                counts[table] = len(rows)
                if not rows:
                    continue
                names = list(rows[0].keys())
                if into_nonempty and table in SERIAL_TABLES:
                    names.remove("id")
                marks = ", ".join("?" * len(names))
                sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})"
                dst._conn.executemany(sql, [tuple(row[n] for n in names) for row in rows])
            for table in SERIAL_TABLES:
                dst._backend.reset_serials(dst._conn, table)
        except BaseException:
            if dst._conn.in_transaction:
                dst._conn.execute("ROLLBACK")
            raise
        dst._conn.execute("COMMIT")
    return Copied(counts)
