"""Rows of the state store as frozen dataclasses, the job state machine, and the
exact conversions (money, time, JSON) between Python values and portable SQL text.

Nothing here touches a database: the store (`broker.state.store`) is the only writer.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
    Rounded,
)
from enum import StrEnum
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

from providers.gang import GangMember

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state.placed import PlacedOn


class StateError(Exception):
    """Root of the state store's errors."""


class IllegalTransition(StateError):
    """A move the job state machine does not allow; nothing was changed."""

    def __init__(self, job_id: str, current: JobState, to: JobState, why: str = "") -> None:
        self.job_id, self.current, self.to = job_id, current, to
        super().__init__(
            f"job {job_id}: cannot move {current} -> {to}" + (f" ({why})" if why else "")
        )


class UnknownJob(StateError, LookupError):
    """No job (or more than one) answers to the name or id given."""


class UnknownAttempt(StateError, LookupError):
    """No attempt has this id."""


class JobState(StrEnum):
    QUEUED = "queued"
    PLANNED = "planned"
    LAUNCHING = "launching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    MIGRATING = "migrating"


_S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.QUEUED: frozenset({_S.PLANNED, _S.CANCELLED}),
    _S.PLANNED: frozenset({_S.LAUNCHING, _S.QUEUED, _S.CANCELLED}),
    _S.LAUNCHING: frozenset({_S.RUNNING, _S.FAILED, _S.QUEUED, _S.CANCELLED}),
    # RUNNING -> QUEUED: a failure with restarts left (recovery.max_restarts_on_error).
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.INTERRUPTED, _S.QUEUED}),
    _S.INTERRUPTED: frozenset({_S.MIGRATING, _S.QUEUED, _S.CANCELLED, _S.FAILED}),
    _S.MIGRATING: frozenset({_S.LAUNCHING, _S.QUEUED, _S.FAILED, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}
TERMINAL = frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED})
# States in which an attempt may be alive: a newer version waits for them to end.
IN_FLIGHT = frozenset({_S.LAUNCHING, _S.RUNNING, _S.INTERRUPTED, _S.MIGRATING})


def can_transition(current: JobState, to: JobState) -> bool:
    return to in TRANSITIONS[current]


class AttemptState(StrEnum):
    LAUNCHING = "launching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


OPEN_ATTEMPT = frozenset({AttemptState.LAUNCHING, AttemptState.RUNNING})
Outcome = Literal["succeeded", "failed", "interrupted", "cancelled"]
OUTCOME_JOB_STATE: dict[str, JobState] = {
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "interrupted": JobState.INTERRUPTED,
    "cancelled": JobState.CANCELLED,
}
LEDGER_KINDS = ("compute", "egress", "onprem")
TERMINATED = "terminated"  # an instance row's state once its attempt ended, if not told
LIVE_INSTANCE = ("pending", "running")  # instance rows in these states may still bill


@dataclass(frozen=True, slots=True)
class SubmitResult:
    job_id: str  # the run the submission went to (a new one when `created`)
    version: int  # the newest version of the job (in force, or waiting for a live attempt)
    created: bool  # a new run (job id) was queued: the first, a re-run, or a new version's
    changed: bool
    run: int = 1  # which run of its (team, name)
    waiting: bool = False  # the new version waits for the live attempt to end
    state: JobState = JobState.QUEUED  # the run's state after the submission


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    team: str
    name: str
    queue: str
    priority: int
    state: JobState
    version: int  # the version in force (the one planned and run)
    pending_version: int | None  # a newer version waiting for the live attempt to end
    digest: str  # of `version`
    created_at: datetime
    updated_at: datetime
    queued_at: datetime  # FIFO key within a priority (a new run joins the back)
    run: int = 1  # runs of one (team, name) are numbered 1, 2, ...: each is its own job
    submitter: str = ""  # who submitted it (broker.users); "" in rows from before


@dataclass(frozen=True, slots=True)
class JobVersion:
    job_id: str
    version: int
    digest: str
    manifest_text: str
    spec: JobSpec
    queue: str
    priority: int
    submitted_at: datetime


@dataclass(frozen=True, slots=True)
class Attempt:
    id: str  # `a-<12 hex>`: the providers' idempotency key and instance tag
    job_id: str
    number: int
    version: int
    placed_on: PlacedOn
    market: str
    price_per_hour: Decimal  # USD for all nodes, as in force at launch
    price_source: str
    price_as_of: str
    state: AttemptState
    started_at: datetime
    running_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    billed_hours: Decimal | None = None


@dataclass(frozen=True, slots=True)
class InstanceRow:
    """An instance as the store last recorded it (a provider reports `providers.base.Instance`)."""

    cloud: str
    provider_id: str
    region: str
    zone: str
    instance_type: str
    attempt_id: str | None
    job_id: str | None
    tags: dict[str, str]
    state: str
    created_at: datetime
    updated_at: datetime
    terminated_at: datetime | None = None
    members: tuple[GangMember, ...] = ()  # a gang's nodes by rank, as last observed


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    job_id: str
    attempt_id: str | None
    time: datetime
    kind: str  # submitted | version | transition | attempt_running | attempt_finished | instance
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    id: int
    job_id: str
    team: str
    attempt_id: str | None
    kind: str  # compute | egress | onprem
    amount_usd: Decimal
    quantity: Decimal
    unit: str
    unit_price_usd: Decimal
    market: str
    price_source: str
    price_as_of: str
    period_start: datetime
    period_end: datetime
    created_at: datetime
    cloud: str = ""  # the place that bills it: the sender for egress, else the attempt's
    region: str = ""
    detail: str = ""  # what it was for, e.g. "input s3://... aws:us-east-1 -> gcp:..."


# --- exact conversions -------------------------------------------------------------

# Only + and x (which are exact) run here, so precision can be unbounded: 1 + 1e-300
# keeps every digit. Any rounding would raise instead of passing silently.
_EXACT = Context(
    prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Rounded, InvalidOperation]
)


def to_decimal(value: Decimal | float | int | str) -> Decimal:
    """A finite Decimal equal to `value` as written: floats by `repr` (32.7726 stays 32.7726)."""
    if isinstance(value, bool):
        raise TypeError("a bool is not an amount")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite amount: {value!r}")
        value = repr(value)
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"not a decimal amount: {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"not a finite amount: {value!r}")
    return number


def multiply(a: Decimal, b: Decimal) -> Decimal:
    """a × b without rounding (raises if it would round)."""
    return _EXACT.multiply(a, b)


def total(values: Iterable[Decimal]) -> Decimal:
    """The exact sum (the default context would round past 28 digits)."""
    result = Decimal(0)
    for value in values:
        result = _EXACT.add(result, value)
    return result


def decimal_text(value: Decimal | float | int | str) -> str:
    """Plain decimal text for SQL (no exponent, no trailing zeros): exact and portable."""
    text = format(to_decimal(value), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@functools.lru_cache(maxsize=1024)
def ts_text(moment: datetime) -> str:
    """ISO-8601 UTC, fixed width, so text order is time order. Remembered: a pass stamps
    many rows with the same moment (equal moments, whatever their zone, give one text)."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: the clock must give timezone-aware UTC times")
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}{utc:-%m-%dT%H:%M:%S.%fZ}"  # glibc's %Y drops a year's leading 0s


def parse_ts(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _json_default(value: object) -> object:
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return ts_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


# `json.dumps` with these arguments, made once (`dumps` builds an encoder per call when
# given any); an encoder keeps no state between calls
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default)


def json_text(value: Any) -> str:
    """Canonical JSON (sorted keys); datetimes, timedeltas and Decimals as text/seconds."""
    return _CANONICAL.encode(value)


# --- rows to values (a row is anything indexable by column name, e.g. sqlite3.Row) ---


def _dec(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def job_of(row: Any) -> Job:
    return Job(
        id=row["id"], team=row["team"], name=row["name"], queue=row["queue"],
        priority=row["priority"], state=JobState(row["state"]), version=row["version"],
        pending_version=row["pending_version"], digest=row["digest"],
        created_at=_at(row["created_at"]), updated_at=_at(row["updated_at"]),
        queued_at=_at(row["queued_at"]), run=row["run"], submitter=row["submitter"],
    )  # fmt: skip


_JOB_COLUMNS = (
    "id", "team", "name", "queue", "priority", "state", "version", "pending_version",
    "digest", "created_at", "updated_at", "queued_at", "run", "submitter",
)  # fmt: skip


def job_maker(columns: Sequence[str]) -> Callable[[Sequence[Any]], Job]:
    """`job_of` for rows of `columns` (a query's column names, the first of two of one
    name winning, as a row read by name finds), read by position: what a pass reads
    for every queued job."""
    at: dict[str, int] = {}
    for number, column in enumerate(columns):
        at.setdefault(column, number)
    values_of = itemgetter(*(at[name] for name in _JOB_COLUMNS))

    def make(row: Sequence[Any]) -> Job:
        (id_, team, name, queue, priority, state, version, pending, digest, created,
         updated, queued, run, submitter) = values_of(row)  # fmt: skip
        return Job(
            id_, team, name, queue, priority, JobState(state), version, pending, digest,
            _at(created), _at(updated), _at(queued), run, submitter,
        )  # fmt: skip

    return make


def version_of(row: Any) -> JobVersion:
    from broker.spec_codec import decode  # here: listing jobs needs no spec types

    return JobVersion(
        job_id=row["job_id"], version=row["version"], digest=row["digest"],
        manifest_text=row["manifest_text"], spec=decode(json.loads(row["spec_json"])),
        queue=row["queue"], priority=row["priority"], submitted_at=_at(row["submitted_at"]),
    )  # fmt: skip


def attempt_of(row: Any) -> Attempt:
    price = Decimal(row["price_per_hour_usd"])
    placed = _placed_of(row["placement_json"], row["price_per_hour_usd"])
    return Attempt(
        id=row["id"], job_id=row["job_id"], number=row["number"], version=row["version"],
        placed_on=placed, market=row["market"],
        price_per_hour=price, price_source=row["price_source"],
        price_as_of=row["price_as_of"], state=AttemptState(row["state"]),
        started_at=_at(row["started_at"]), running_at=parse_ts(row["running_at"]),
        ended_at=parse_ts(row["ended_at"]), exit_code=row["exit_code"], reason=row["reason"],
        billed_hours=_dec(row["billed_hours"]),
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def placed_of(placement_json: str) -> PlacedOn:
    """An attempt's `placement_json` decoded, remembered by its text (it is frozen, so
    shared): every change of an attempt's state reads its row again."""
    from broker.state.placed import PlacedOn

    return PlacedOn.from_row(json.loads(placement_json))


@functools.lru_cache(maxsize=4096)
def _placed_of(placement_json: str, price: str) -> PlacedOn:
    """`placed_of` at the attempt's price, remembered as it is."""
    return replace(placed_of(placement_json), price_per_hour=Decimal(price))


def instance_of(row: Any) -> InstanceRow:
    return InstanceRow(
        cloud=row["cloud"], provider_id=row["provider_id"], region=row["region"],
        zone=row["zone"], instance_type=row["instance_type"], attempt_id=row["attempt_id"],
        job_id=row["job_id"], tags=json.loads(row["tags_json"]), state=row["state"],
        created_at=_at(row["created_at"]), updated_at=_at(row["updated_at"]),
        terminated_at=parse_ts(row["terminated_at"]),
        members=tuple(GangMember(**m) for m in json.loads(row["members_json"])),
    )  # fmt: skip


def event_of(row: Any) -> Event:
    return Event(
        id=row["id"], job_id=row["job_id"], attempt_id=row["attempt_id"], time=_at(row["time"]),
        kind=row["kind"], message=row["message"], data=json.loads(row["data_json"]),
    )  # fmt: skip


def ledger_of(row: Any) -> LedgerEntry:
    return LedgerEntry(
        id=row["id"], job_id=row["job_id"], team=row["team"], attempt_id=row["attempt_id"],
        kind=row["kind"], amount_usd=Decimal(row["amount_usd"]),
        quantity=Decimal(row["quantity"]), unit=row["unit"],
        unit_price_usd=Decimal(row["unit_price_usd"]), market=row["market"],
        price_source=row["price_source"], price_as_of=row["price_as_of"],
        period_start=_at(row["period_start"]), period_end=_at(row["period_end"]),
        created_at=_at(row["created_at"]), cloud=row["cloud"], region=row["region"],
        detail=row["detail"],
    )  # fmt: skip


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)
