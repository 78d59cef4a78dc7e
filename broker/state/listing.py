"""`broker jobs`: every run of every job, newest first, with the sums of its attempts
and ledger, in one query (`StateReads.listing`); or one row per attempt (the `sacct`
view). Rows come back as frozen values; money is exact (summed here, not in SQL).

Its runtime columns (`est. h`, `runtime h`: broker.learned_runtime.as_listed) read only
what they need of each run (`listed_runs`): the spec's requirements and runtime parts,
each distinct part decoded once, and of each attempt its outcome, times, GPU and time
scale, never a whole placement or spec (100,000 runs: seconds, not twenty).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.state.model import AttemptState, JobState, parse_ts, total

if TYPE_CHECKING:
    from broker.spec import Requirements, RuntimeEstimate
    from broker.state.backend import Backend, Connection
    from broker.state.model import Attempt

# A state's text to the state, looked up (a call of the enum costs 20 times as much,
# and `broker jobs --limit 0` makes one per run and per attempt).
_JOB_STATES = {state.value: state for state in JobState}
_ATTEMPT_STATES = {state.value: state for state in AttemptState}


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
        state=_JOB_STATES[row["state"]], version=row["version"], queue=row["queue"],
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
        run=row["run"], number=row["number"], state=_ATTEMPT_STATES[row["state"]],
        cloud=row["cloud"] or "", region=row["region"] or "",
        instance_type=row["instance_type"] or "", market=row["market"],
        started_at=datetime.fromisoformat(row["started_at"]),
        ended_at=parse_ts(row["ended_at"]),
        billed_hours=None if hours is None else Decimal(hours),
        gpu_hours=float(row["gpu_hours"]), cost_usd=money(row["amounts"]),
        exit_code=row["exit_code"], reason=row["reason"], time_scale=row["time_scale"],
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class AttemptWork:
    """What a runtime is learned from in an attempt (broker.learned_runtime): its
    outcome, billed hours and times, the GPU it ran on and its time scale (billed
    seconds per wall second; None: not recorded)."""

    id: str
    state: AttemptState
    billed_hours: Decimal | None
    running_at: datetime | None
    ended_at: datetime | None
    accelerator: str
    time_scale: float | None

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptWork:
        placed = attempt.placed_on
        return cls(
            attempt.id, attempt.state, attempt.billed_hours, attempt.running_at,
            attempt.ended_at, placed.accelerator, placed.time_scale,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ListedRun:
    """One run as `broker jobs` learns its runtime columns: its spec's team, name,
    requirements and runtime estimate (the parts a runtime is learned for), its attempts
    in order, the lost share of each interrupted one (`StateReads.lost_shares`), and its
    first attempt's plan: the hours it planned on its GPU and the plan's first
    assumption (None and "" when that placement records no plan)."""

    team: str
    name: str
    requirements: Requirements
    runtime: RuntimeEstimate
    attempts: tuple[AttemptWork, ...]
    lost_shares: dict[str, Decimal]
    planned_hours: float | None = None
    planned_assumption: str = ""


_PER_QUERY = 500  # ids bound in one IN (...): well under any backend's limit


def listed_runs(conn: Connection, db: Backend, job_ids: Sequence[str]) -> dict[str, ListedRun]:
    """The `ListedRun` of each job id (unknown ids are left out): three queries per 500
    runs, JSON read in the database, each distinct spec part decoded once."""
    from broker.spec_codec import decode_part

    parts: dict[tuple[str, str], Any] = {}

    def part(name: str, text: str) -> Any:
        if (name, text) not in parts:
            parts[name, text] = decode_part(name, json.loads(text))
        return parts[name, text]

    found: dict[str, ListedRun] = {}
    for begin in range(0, len(job_ids), _PER_QUERY):
        chunk = list(job_ids[begin : begin + _PER_QUERY])
        marks = ",".join("?" * len(chunk))
        attempts, planned = _attempt_works(conn, db, chunk, marks)
        shares = _lost_shares(conn, db, chunk, marks)
        for row in conn.execute(_spec_sql(db, marks), chunk):
            job_id = row["id"]
            hours, assumption = planned.get(job_id, (None, ""))
            found[job_id] = ListedRun(
                row["team"], row["name"], part("requirements", row["requirements"]),
                part("runtime", row["runtime"]), tuple(attempts.get(job_id, ())),
                shares.get(job_id, {}), hours, assumption,
            )  # fmt: skip
    return found


def _spec_sql(db: Backend, marks: str) -> str:
    """A run's team, name (the job row's: its spec's, as submitted) and spec parts."""
    spec = ", ".join(
        f"{db.json_text('v.spec_json', key)} AS {key}" for key in ("requirements", "runtime")
    )
    return (
        f"SELECT j.id, j.team, j.name, {spec} FROM jobs j"
        f" JOIN job_versions v ON v.job_id = j.id AND v.version = j.version WHERE j.id IN ({marks})"
    )


def _attempt_works(
    conn: Connection, db: Backend, chunk: list[str], marks: str
) -> tuple[dict[str, list[AttemptWork]], dict[str, tuple[float, str]]]:
    """The attempts of the runs in order, and each run's first plan (hours, assumption),
    read as `PlacedOn.from_row` reads a placement of either layout."""
    from broker.state.placed import FORMATS

    place = "a.placement_json"
    sql = (
        f"SELECT a.job_id, a.id, a.state, a.billed_hours, a.running_at, a.ended_at,"
        f" {db.json_number(place, 'format')} AS format,"
        f" {db.json_text(place, 'accelerator')} AS accelerator,"
        f" {db.json_number(place, 'time_scale')} AS time_scale,"
        f" {db.json_text(place, 'cost')} AS cost,"
        f" {db.json_text(place, 'cost_breakdown')} AS cost_breakdown"
        f" FROM attempts a WHERE a.job_id IN ({marks}) ORDER BY a.started_at, a.job_id, a.number"
    )
    attempts: dict[str, list[AttemptWork]] = {}
    planned: dict[str, tuple[float, str]] = {}
    for row in conn.execute(sql, chunk):
        job_id, hours = row["job_id"], row["billed_hours"]
        laid_out = row["format"] in FORMATS  # else the first layout: no time scale
        tried = attempts.setdefault(job_id, [])
        if not tried:
            cost = row["cost"] if laid_out else row["cost_breakdown"]
            if cost is not None:
                plan = json.loads(cost)
                said = tuple(plan.get("assumptions", ()))
                planned[job_id] = (plan["run_hours"], said[0] if said else "")
        tried.append(
            AttemptWork(
                row["id"],
                _ATTEMPT_STATES[row["state"]],
                None if hours is None else Decimal(hours),
                parse_ts(row["running_at"]),
                parse_ts(row["ended_at"]),
                row["accelerator"] or "",
                row["time_scale"] if laid_out else None,
            )  # fmt: skip
        )
    return attempts, planned


def _lost_shares(
    conn: Connection, db: Backend, chunk: list[str], marks: str
) -> dict[str, dict[str, Decimal]]:
    """Per run, its attempts' lost shares, as `StateReads.lost_shares` reads them."""
    sql = (
        f"SELECT job_id, attempt_id, {db.json_text('data_json', 'lost_share')} AS share"
        f" FROM events WHERE kind = 'attempt_finished' AND job_id IN ({marks})"
        " ORDER BY job_id, id"
    )
    shares: dict[str, dict[str, Decimal]] = {}
    for row in conn.execute(sql, chunk):
        if row["share"] is not None and row["attempt_id"] is not None:
            shares.setdefault(row["job_id"], {})[row["attempt_id"]] = Decimal(row["share"])
    return shares
