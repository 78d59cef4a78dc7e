"""The metrics' figures, from the state alone: plain values, no Prometheus types.

Everything here is counted from what the store records (jobs, attempts, instance rows,
ledger, events), through its read interface (`broker.state.reads`), so the controller
that wrote it, a restarted one and `broker metrics serve` on a dashboard host give the
same numbers. Money is summed exactly (Decimal); it becomes a float only at exposition.
Every key is a bounded label: team, queue, cloud, region, pool, market, error class;
never a job or attempt id.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, TypeVar

from broker.launch_errors import error_class_of, error_classes
from broker.state.model import OPEN_ATTEMPT, AttemptState, total
from broker.state.tallies import AttemptFact, Charge

if TYPE_CHECKING:
    from broker.state.reads import StateReads

# Upper bounds (seconds) of the histograms' buckets; +Inf is implicit.
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0,
                6 * 3600.0, 12 * 3600.0, 24 * 3600.0)  # fmt: skip
RECOVERY_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
RECLAIM, PREEMPTION = "reclaim", "preemption"  # who ended an interrupted attempt
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Histogram:
    """Observations in buckets: `counts[i]` fell at or below `bounds[i]` and above the
    bound before; the last count is above every bound (+Inf)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float  # the sum of the observations

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, observations at or below it) as the exposition writes them, +Inf last."""
        running, rows = 0, []
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            rows.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return rows


def histogram(values: Iterable[float], bounds: tuple[float, ...]) -> Histogram:
    counts = [0] * (len(bounds) + 1)
    seen = 0.0
    for value in values:
        counts[bisect_left(bounds, value)] += 1  # le: a value equal to a bound is in it
        seen += value
    return Histogram(bounds, tuple(counts), seen)


@dataclass(frozen=True, slots=True)
class StateFigures:
    """What the state says now. Keys are label values, in the order the names say."""

    jobs: dict[tuple[str, str, str], int]  # (team, queue, state) -> jobs
    queue_wait: dict[tuple[str, str], Histogram]  # (team, queue) -> waits of started attempts
    running_jobs: dict[tuple[str, str, str], int]  # (cloud, pool, market) -> running attempts
    running_gpus: dict[tuple[str, str, str], float]  # (cloud, pool, market) -> their GPUs
    gpu_hours: dict[tuple[str, str, str], float]  # (team, cloud, market) -> billed GPU-hours
    spend_usd: dict[tuple[str, str, str], Decimal]  # (team, cloud, market) -> ledger sum
    pool_allocated_gpus: dict[str, float]  # pool -> GPUs of its open attempts
    interruptions: dict[tuple[str, str, str, str], int]  # (kind, cloud, region, pool)
    recovery: Histogram  # from an interruption to the next attempt running
    checkpoint_bytes: dict[tuple[str, str], int]  # (from cloud, to cloud) -> bytes copied
    launches: dict[tuple[str, str], int]  # (cloud, market) -> attempts started
    launch_failures: dict[tuple[str, str], int]  # (cloud, error class) -> never ran


def state_figures(reads: StateReads) -> StateFigures:
    """Every figure, from a handful of reads of one committed state (`broker.state.tallies`)."""
    with reads.snapshot():
        attempts = reads.attempt_facts()
        jobs, charges = reads.job_counts(), reads.charges()
        moved = _moved(reads)
    by_job: dict[str, list[AttemptFact]] = {}
    for attempt in attempts:  # in job, then number order
        by_job.setdefault(attempt.job_id, []).append(attempt)
    running = [a for a in attempts if a.state is AttemptState.RUNNING]
    return StateFigures(
        jobs=jobs,
        queue_wait=_waits(by_job),
        running_jobs=_count((a.cloud, a.pool, a.market) for a in running),
        running_gpus=_add(((a.cloud, a.pool, a.market), a.gpus) for a in running),
        gpu_hours=_add(
            ((a.team, a.cloud, a.market), float(a.billed_hours) * a.gpus)
            for a in attempts
            if a.billed_hours is not None
        ),
        spend_usd=_spend(charges),
        pool_allocated_gpus=_add(
            (a.pool, a.gpus) for a in attempts if a.state in OPEN_ATTEMPT and a.pool
        ),
        interruptions=_count(
            (RECLAIM if a.reclaimed else PREEMPTION, a.cloud, a.region, a.pool)
            for a in attempts
            if a.state is AttemptState.INTERRUPTED
        ),
        recovery=histogram(_recoveries(by_job), RECOVERY_BUCKETS),
        checkpoint_bytes=moved,
        launches=_count((a.cloud, a.market) for a in attempts),
        launch_failures=_failures(attempts),
    )


def _waits(by_job: Mapping[str, list[AttemptFact]]) -> dict[tuple[str, str], Histogram]:
    """How long each started attempt waited in the queue: from the job's queueing, or
    the end of its attempt before (a reclaimed or failed job waits afresh), to its start."""
    waits: dict[tuple[str, str], list[float]] = {}
    for tries in by_job.values():
        entered: datetime = tries[0].queued_at
        for attempt in tries:
            seconds = max(0.0, (attempt.started_at - entered).total_seconds())
            waits.setdefault((attempt.team, attempt.queue), []).append(seconds)
            if attempt.ended_at is not None:
                entered = max(entered, attempt.ended_at)
    return {key: histogram(values, WAIT_BUCKETS) for key, values in waits.items()}


def _recoveries(by_job: Mapping[str, list[AttemptFact]]) -> list[float]:
    """Seconds from each interrupted attempt's end to the next attempt of its job
    running (interruptions not yet recovered are not counted)."""
    found = []
    for tries in by_job.values():
        for before, after in zip(tries, tries[1:], strict=False):
            if before.state is AttemptState.INTERRUPTED and before.ended_at is not None:
                if after.running_at is not None:
                    found.append(max(0.0, (after.running_at - before.ended_at).total_seconds()))
    return found


def _failures(attempts: Iterable[AttemptFact]) -> dict[tuple[str, str], int]:
    """Attempts that failed without ever running, by the error class their reason names."""
    classes = error_classes()
    return _count(
        (a.cloud, error_class_of(a.reason, classes))
        for a in attempts
        if a.state is AttemptState.FAILED and a.running_at is None
    )


def _spend(charges: Iterable[Charge]) -> dict[tuple[str, str, str], Decimal]:
    amounts: dict[tuple[str, str, str], list[Decimal]] = {}
    for charge in charges:
        amounts.setdefault((charge.team, charge.cloud, charge.market), []).append(charge.amount_usd)
    return {key: total(values) for key, values in amounts.items()}


def _moved(reads: StateReads) -> dict[tuple[str, str], int]:
    """Checkpoint bytes copied between places (`record_migration`: "cloud/region")."""
    moved: dict[tuple[str, str], int] = {}
    for event in reads.events_of_kind("checkpoint_migrated"):
        key = (str(event.data["from"]).split("/")[0], str(event.data["to"]).split("/")[0])
        moved[key] = moved.get(key, 0) + int(event.data["bytes"])
    return moved


def _count(keys: Iterable[K]) -> dict[K, int]:
    counts: dict[K, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


def _add(pairs: Iterable[tuple[K, float]]) -> dict[K, float]:
    sums: dict[K, float] = {}
    for key, value in pairs:
        sums[key] = sums.get(key, 0.0) + value
    return sums
