"""From the state store to report lines: each ledger entry with its job, attempt and place.

Lost work: the hourly entries of an interrupted attempt are lost in the share of
its billed time the controller recorded when it closed the attempt (nothing when
the job checkpointed once told to stop, else what came after its last checkpoint:
docs/spot.md); for attempts closed before shares were recorded, the share after
its last recorded checkpoint (`StateStore.record_checkpoint`), measured from the
attempt's running time (or its start) to its end; with no checkpoint recorded the
whole attempt is lost.
That share of the entry's hours and cost is its lost work, and the on-demand
baseline is a rate times hours: these derived figures are rounded once, per entry,
to the ledger's precisions (`broker.state.money`: 1e-6 h and 1e-6 USD); sums stay
exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING

from broker.reports.query import ZERO, Line
from broker.state.model import AttemptState, multiply, to_decimal, total
from broker.state.money import HOURS_STEP, USD_STEP, money

if TYPE_CHECKING:
    from broker.reports.savings import OnDemandPrices
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, LedgerEntry, StateStore

_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Ledger:
    """What the state store holds for a report period, read once."""

    entries: list[LedgerEntry]
    jobs: dict[str, Job]
    attempts: dict[str, Attempt]
    checkpoints: dict[str, datetime]
    lost: dict[str, Decimal]  # attempt id -> the share lost, as the controller recorded it
    specs: dict[tuple[str, int], JobSpec]  # (job id, version) -> its spec

    @classmethod
    def empty(cls) -> Ledger:
        """The ledger of a machine where nothing ran yet (no state file)."""
        return cls([], {}, {}, {}, {}, {})

    @classmethod
    def read(
        cls, store: StateStore, since: datetime | None = None, until: datetime | None = None
    ) -> Ledger:
        entries = store.ledger(since=since, until=until)
        jobs = {job.id: job for job in store.jobs()}
        attempts = {attempt.id: attempt for attempt in store.attempts()}
        wanted = {entry.job_id for entry in entries}
        specs = {
            (version.job_id, version.version): version.spec
            for job_id in sorted(wanted)
            for version in store.versions(job_id)
        }
        return cls(entries, jobs, attempts, store.checkpoints(), store.lost_shares(), specs)


def lost_share(
    attempt: Attempt | None, checkpoint: datetime | None, recorded: Decimal | None = None
) -> Decimal:
    """The share (0..1) of an attempt's billed time lost to its interruption: what the
    controller `recorded` when it closed the attempt, else (attempts closed before it
    recorded one) from the last checkpoint to the end."""
    if attempt is None or attempt.state != AttemptState.INTERRUPTED:
        return ZERO
    if recorded is not None:
        return recorded
    start, end = attempt.running_at or attempt.started_at, attempt.ended_at
    if end is None or end <= start:
        return Decimal(1)
    return share_lost(start, end, checkpoint, None)


def share_lost(
    start: datetime, end: datetime, saved: datetime | None, told: datetime | None
) -> Decimal:
    """The share of [start, end] an interruption threw away: none when the job saved
    at or after `told` (when it was told to stop: it kept the contract and checkpointed
    on SIGTERM); else what came after the last checkpoint `saved` (all without one)."""
    if end <= start:
        return Decimal(1) if saved is None else ZERO
    if saved is not None and told is not None and saved >= told:
        return ZERO
    if saved is None:
        return Decimal(1)
    at = min(max(saved, start), end)
    return Decimal((end - at) // _MICROSECOND) / Decimal((end - start) // _MICROSECOND)


def to_lines(ledger: Ledger, prices: OnDemandPrices | None = None) -> list[Line]:
    """Report lines for the ledger's entries; baselines when `prices` are given."""
    first_cloud = _first_clouds(ledger)
    rate_of = _rates(ledger, prices, first_cloud) if prices is not None else None
    return [_line(entry, ledger, rate_of) for entry in ledger.entries]


def _line(
    entry: LedgerEntry,
    ledger: Ledger,
    rate_of: Callable[[Attempt], Decimal | None] | None,
) -> Line:
    job = ledger.jobs[entry.job_id]
    attempt = ledger.attempts.get(entry.attempt_id or "")
    placed = attempt.placed_on if attempt is not None else None
    hourly = entry.kind != "egress"
    gpus = ZERO
    if hourly and placed is not None and placed.accelerator:
        gpus = _whole(multiply(to_decimal(placed.accelerator_count), to_decimal(placed.nodes)))
    share = ZERO
    if hourly:
        key = entry.attempt_id or ""
        share = lost_share(attempt, ledger.checkpoints.get(key), ledger.lost.get(key))
    lost_hours = _portion(entry.quantity, share, HOURS_STEP)
    lost_usd = _portion(entry.amount_usd, share, USD_STEP)
    baseline = None
    if hourly and attempt is not None and rate_of is not None:
        rate = rate_of(attempt)
        if rate is not None:
            baseline = money(multiply(rate, total((entry.quantity, -lost_hours))))
    keys = {
        "job": f"{job.team}/{job.name}",
        "team": job.team,
        "queue": job.queue,
        "cloud": entry.cloud or (placed.cloud if placed else "") or "-",
        "region": entry.region or (placed.region if placed else "") or "-",
        "gpu": (placed.accelerator if placed else "") or "-",
        "market": entry.market or "-",
        "kind": entry.kind,
        "day": entry.period_end.date().isoformat(),
        "month": entry.period_end.strftime("%Y-%m"),
    }
    return Line(
        entry_id=entry.id, attempt_id=entry.attempt_id, kind=entry.kind,
        amount=entry.amount_usd, quantity=entry.quantity, unit=entry.unit,
        unit_price=entry.unit_price_usd, market=entry.market, period_end=entry.period_end,
        keys=keys, detail=entry.detail, gpus=gpus, lost_hours=lost_hours, lost_usd=lost_usd,
        baseline_usd=baseline,
    )  # fmt: skip


def _whole(gpus: Decimal) -> Decimal:
    """8.0 GPUs as 8, so that GPU-hours keep the 6 places of the hours."""
    integral = gpus.to_integral_value()
    return integral if gpus == integral else gpus


def _portion(value: Decimal, share: Decimal, step: Decimal) -> Decimal:
    if share == 0:
        return ZERO
    if share == 1:
        return value
    return (value * share).quantize(step, rounding=ROUND_HALF_EVEN)


def _first_clouds(ledger: Ledger) -> dict[str, str]:
    """The cloud of each job's first attempt (by number)."""
    first: dict[str, Attempt] = {}
    for attempt in ledger.attempts.values():
        known = first.get(attempt.job_id)
        if known is None or attempt.number < known.number:
            first[attempt.job_id] = attempt
    return {job: a.placed_on.cloud for job, a in first.items()}


def _rates(
    ledger: Ledger, prices: OnDemandPrices, first_cloud: Mapping[str, str]
) -> Callable[[Attempt], Decimal | None]:
    from broker.reports.savings import baseline_rate, first_choice_cloud

    cache: dict[str, Decimal | None] = {}

    def rate_of(attempt: Attempt) -> Decimal | None:
        if attempt.id not in cache:
            spec = ledger.specs.get((attempt.job_id, attempt.version))
            cloud = first_choice_cloud(spec, first_cloud.get(attempt.job_id, ""))
            cache[attempt.id] = baseline_rate(prices, attempt.placed_on, cloud)
        return cache[attempt.id]

    return rate_of
