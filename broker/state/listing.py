"""`broker jobs`: every run of every job, newest first, with the sums of its attempts
and ledger, in one query (`StateReads.listing`); or one row per attempt (the `sacct`
view). Rows come back as frozen values; money is exact (summed here, not in SQL).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.state.model import AttemptState, JobState, parse_ts, total

if TYPE_CHECKING:
    from broker.state.backend import Backend


@dataclass(frozen=True, slots=True)
class JobListing:
    """One run of a job as `broker jobs` lists it: the job, where its latest attempt ran,
    and the sums of its attempts and ledger (exact money)."""

    id: str
    team: str
    name: str
    run: int
    state: JobState
    version: int
    queue: str
    created_at: datetime
    ended_at: datetime | None  # when it reached a final state
    attempts: int
    gpu_hours: float  # billed hours x GPUs, over its attempts
    cost_usd: Decimal  # its ledger, exactly
    cloud: str = ""  # of its latest attempt ("" before the first)
    region: str = ""
    instance_type: str = ""
    market: str = ""
    submitter: str = ""  # who submitted it ("" in rows from before it was recorded)

    @property
    def where(self) -> str:
        return f"{self.cloud}/{self.region}/{self.instance_type}" if self.cloud else ""


@dataclass(frozen=True, slots=True)
class AttemptListing:
    """One attempt as `broker jobs --attempts` lists it (the `sacct` view)."""

    id: str
    job_id: str
    team: str
    name: str
    run: int
    number: int
    state: AttemptState
    cloud: str
    region: str
    instance_type: str
    market: str
    started_at: datetime
    ended_at: datetime | None
    billed_hours: Decimal | None
    gpu_hours: float
    cost_usd: Decimal
    exit_code: int | None
    reason: str
    time_scale: float | None  # billed seconds per wall second; None: not recorded


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of `broker jobs`: the runs (newest first) or their attempts, and how many
    runs matched before the limit."""

    jobs: list[JobListing]
    attempts: list[AttemptListing]
    matched: int


# `broker jobs`: the runs that match, newest first, limited; then one row per run (or per
# attempt) with the sums of its attempts and ledger. The placement is the attempt's
# `PlacedOn` row (its keys are the same in every format); money is summed in Python.
# `picked p CROSS JOIN attempts` (and ledger) on SQLite: it keeps the page as the outer
# loop and looks each run's rows up by index, rather than scanning every attempt and
# ledger line of the file for a page of 50 (40 ms of 100,000 jobs' default page; 2 ms so).
# The JSON and aggregate functions are the backend's (`Backend.json_number`, ...).
_PICKED = """WITH picked AS (
    SELECT j.*, (SELECT COUNT(*) FROM jobs j{where}) AS matched,
        CASE WHEN j.state IN ({terminal}) THEN j.updated_at END AS finished_at
    FROM jobs j{where}
    ORDER BY j.created_at DESC, j.run DESC, j.id DESC{limit}
)"""


def _place(db: Backend, a: str) -> str:
    return ", ".join(
        f"{db.json_text(f'{a}.placement_json', key)} AS {key}"
        for key in ("cloud", "region", "instance_type")
    )


def _gpu_hours(db: Backend, a: str) -> str:
    return (
        f"CAST(COALESCE({a}.billed_hours, '0') AS DOUBLE PRECISION)"
        f" * COALESCE({db.json_number(f'{a}.placement_json', 'accelerator_count')}, 0)"
        f" * COALESCE({db.json_number(f'{a}.placement_json', 'nodes')}, 1)"
    )


def job_listing_sql(db: Backend) -> str:
    """The query of `StateReads.listing`, one row per run (a template: {where}, ...)."""
    join = db.index_join
    return (
        _PICKED
        + f""",
tries AS (
    SELECT a.job_id, COUNT(*) AS attempts, MAX(a.number) AS last, MAX(a.ended_at) AS ended,
        SUM({_gpu_hours(db, "a")}) AS gpu_hours
    FROM picked p {join} attempts a ON a.job_id = p.id GROUP BY a.job_id
),
money AS (
    SELECT l.job_id, {db.joined_text("l.amount_usd")} AS amounts
    FROM picked p {join} ledger l ON l.job_id = p.id GROUP BY l.job_id
)
SELECT p.*, COALESCE(t.attempts, 0) AS attempts, COALESCE(t.gpu_hours, 0) AS gpu_hours,
    CASE WHEN p.finished_at IS NOT NULL THEN COALESCE(t.ended, p.finished_at) END AS ended_at,
    la.market, {_place(db, "la")}, m.amounts
FROM picked p
LEFT JOIN tries t ON t.job_id = p.id
LEFT JOIN attempts la ON la.job_id = p.id AND la.number = t.last
LEFT JOIN money m ON m.job_id = p.id
ORDER BY p.created_at DESC, p.run DESC, p.id DESC"""
    )


def attempt_listing_sql(db: Backend) -> str:
    """The query of `StateReads.listing(attempts=True)`, one row per attempt."""
    return (
        _PICKED
        + f""",
money AS (
    SELECT l.attempt_id, {db.joined_text("l.amount_usd")} AS amounts
    FROM picked p {db.index_join} ledger l ON l.job_id = p.id GROUP BY l.attempt_id
)
SELECT a.*, p.team, p.name, p.run, p.matched, {_place(db, "a")}, {_gpu_hours(db, "a")}
    AS gpu_hours, {db.json_number("a.placement_json", "time_scale")} AS time_scale, m.amounts
FROM picked p
JOIN attempts a ON a.job_id = p.id
LEFT JOIN money m ON m.attempt_id = a.id
ORDER BY p.created_at DESC, p.run DESC, p.id DESC, a.number"""
    )


def money(amounts: str | None) -> Decimal:
    return total(Decimal(text) for text in (amounts or "").split())


def job_listing(row: Any) -> JobListing:
    return JobListing(
        id=row["id"], team=row["team"], name=row["name"], run=row["run"],
        state=JobState(row["state"]), version=row["version"], queue=row["queue"],
        created_at=datetime.fromisoformat(row["created_at"]),
        ended_at=parse_ts(row["ended_at"]), attempts=row["attempts"],
        gpu_hours=float(row["gpu_hours"]), cost_usd=money(row["amounts"]),
        cloud=row["cloud"] or "", region=row["region"] or "",
        instance_type=row["instance_type"] or "", market=row["market"] or "",
        submitter=row["submitter"],
    )  # fmt: skip


def attempt_listing(row: Any) -> AttemptListing:
    hours = row["billed_hours"]
    return AttemptListing(
        id=row["id"], job_id=row["job_id"], team=row["team"], name=row["name"],
        run=row["run"], number=row["number"], state=AttemptState(row["state"]),
        cloud=row["cloud"] or "", region=row["region"] or "",
        instance_type=row["instance_type"] or "", market=row["market"],
        started_at=datetime.fromisoformat(row["started_at"]),
        ended_at=parse_ts(row["ended_at"]),
        billed_hours=None if hours is None else Decimal(hours),
        gpu_hours=float(row["gpu_hours"]), cost_usd=money(row["amounts"]),
        exit_code=row["exit_code"], reason=row["reason"], time_scale=row["time_scale"],
    )  # fmt: skip
