"""The state's reads for the metrics (`broker.metrics.figures`): the whole state in three
light queries, so a scrape of 10,000 jobs costs a fraction of decoding every job and
attempt as full records (`StateReads.jobs`, `attempts`).

Part of `StateReads` (broker.state.reads). Reads take no write lock: in WAL mode (and
on PostgreSQL, in a REPEATABLE READ snapshot) they see the last committed state and
never block a writer. Money comes back as exact
Decimal, summed by the caller (as `broker.state.listing` does), never in SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from broker.state.backend import Backend, Connection
from broker.state.model import AttemptState, parse_ts
from broker.state.placed import ONPREM


def _attempt_facts(db: Backend) -> str:
    """One row per attempt with its job's team, queue and queueing time, where it ran and
    whether its instance was taken back by the provider (an instance row "interrupted");
    the placement's fields in the backend's JSON functions (the one place its dialect
    shows in these reads)."""

    def text(key: str) -> str:
        return db.json_text("a.placement_json", key)

    def number(key: str) -> str:
        return db.json_number("a.placement_json", key)

    return f"""SELECT a.job_id, a.number, a.state, a.market, a.started_at, a.running_at,
    a.ended_at, a.billed_hours, a.reason, j.team, j.queue, j.queued_at,
    {text("cloud")} AS cloud, {text("region")} AS region, {text("zone")} AS zone,
    COALESCE({number("accelerator_count")}, 0) * COALESCE({number("nodes")}, 1) AS gpus,
    EXISTS (SELECT 1 FROM instances i WHERE i.attempt_id = a.id AND i.state = 'interrupted')
        AS reclaimed
FROM attempts a JOIN jobs j ON j.id = a.job_id
ORDER BY a.job_id, a.number"""


@dataclass(frozen=True, slots=True)
class AttemptFact:
    """What the metrics need of one attempt (no manifest, no plan figures)."""

    job_id: str
    number: int
    team: str
    queue: str
    queued_at: datetime  # its job's (FIFO key: when the run joined the queue)
    state: AttemptState
    market: str
    cloud: str
    region: str
    pool: str  # the on-prem pool ("" on a cloud)
    gpus: float  # over all nodes
    started_at: datetime
    running_at: datetime | None
    ended_at: datetime | None
    billed_hours: Decimal | None
    reason: str
    reclaimed: bool  # the provider took its instance back


@dataclass(frozen=True, slots=True)
class Charge:
    """One ledger line, as the metrics sum it."""

    team: str
    cloud: str
    market: str
    amount_usd: Decimal


class StateTallies:
    """The metrics' reads (a part of `StateReads`)."""

    _conn: Connection
    _backend: Backend

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """The reads inside see one committed state, not a commit between two of them: a
        read transaction, which in WAL mode never blocks a writer (on a store with no
        transaction of its own open, e.g. one opened read-only for a scrape)."""
        self._backend.begin_snapshot(self._conn)
        try:
            yield
        finally:
            self._conn.execute("COMMIT")

    def job_counts(self) -> dict[tuple[str, str, str], int]:
        """(team, queue, state) -> how many jobs (runs)."""
        sql = "SELECT team, queue, state, COUNT(*) AS n FROM jobs GROUP BY team, queue, state"
        return {(r["team"], r["queue"], r["state"]): r["n"] for r in self._conn.execute(sql)}

    def attempt_facts(self) -> list[AttemptFact]:
        """Every attempt, by job then number."""
        return [_fact(row) for row in self._conn.execute(_attempt_facts(self._backend))]

    def charges(self) -> list[Charge]:
        """Every ledger line with its job's team."""
        sql = (
            "SELECT j.team, l.cloud, l.market, l.amount_usd FROM ledger l"
            " JOIN jobs j ON j.id = l.job_id"
        )
        return [
            Charge(r["team"], r["cloud"], r["market"], Decimal(r["amount_usd"]))
            for r in self._conn.execute(sql)
        ]


def _fact(row: Any) -> AttemptFact:
    cloud, hours = row["cloud"] or "", row["billed_hours"]
    return AttemptFact(
        job_id=row["job_id"], number=row["number"], team=row["team"], queue=row["queue"],
        queued_at=datetime.fromisoformat(row["queued_at"]), state=AttemptState(row["state"]),
        market=row["market"], cloud=cloud, region=row["region"] or "",
        pool=(row["zone"] or "") if cloud == ONPREM else "", gpus=float(row["gpus"]),
        started_at=datetime.fromisoformat(row["started_at"]),
        running_at=parse_ts(row["running_at"]), ended_at=parse_ts(row["ended_at"]),
        billed_hours=None if hours is None else Decimal(hours), reason=row["reason"],
        reclaimed=bool(row["reclaimed"]),
    )  # fmt: skip
