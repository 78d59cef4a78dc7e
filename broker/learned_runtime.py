"""Runtimes learned from history, for jobs whose manifest leaves the estimate to the broker.

A manifest that omits `runtime.estimate_hours`, or writes `auto`, is planned for what its
team's own runs took, in the manner of Tsafrir, Etsion & Feitelson ("Backfilling using
system-generated predictions rather than user runtime estimates", IEEE TPDS 2007): the
mean of the last `K` (2) succeeded runs of the same job name; with none, of the last `K`
succeeded runs of the team's jobs on the same GPUs (model and count); with none at all,
the default of 1 h. A job still running when it reaches its estimate has it raised, as
Tsafrir's scheme bumps an underestimate when it is reached: by 15 min, then 30 min, 1 h,
2 h, 5 h, ... until it lies beyond the time the job has run (`LADDER_HOURS`).

This module is the one place that decides the figure; the controller's planning (its
cost), the deadline policy (`broker.controller.steering`), the budget check (the plan's
expected cost, and `grown_cost` for what is running), `broker plan --explain`, `broker
status` and `broker jobs` all read `runtime_of`. Every estimate says where it came from
(`RuntimeEstimate.source`). A run's runtime is its work: the billed hours of its succeeded
attempt plus what its interrupted attempts kept (billed hours less the share their
interruption lost), as hours on the first-choice GPU (scaled by relative throughput, as
the planner scales the other way). Failed and cancelled attempts count for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from itertools import islice
from typing import TYPE_CHECKING, Protocol

from broker.spec import DEFAULT_HOURS, MANIFEST, NO_HISTORY, JobSpec, Requirements, RuntimeEstimate

if TYPE_CHECKING:
    from broker.state import Attempt, Job, JobState, StateStore
    from broker.state.listing import AttemptWork, ListedRun
    from broker.state.placed import PlacedOn
    from broker.state.reads import FinishedRun

K = 2  # runs averaged (Tsafrir et al. found the last two best)
SIMILAR_SCAN = 50  # newest succeeded runs of the team searched for jobs on the same GPUs
SIMILAR_WINDOW = 5000  # ... among the store's newest runs (of every team)
LADDER_HOURS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)  # raises, in turn
MAX_HOURS = 87_660.0  # ten years: the manifest's own bound (pricing.userio.bounds)


class Asked(Protocol):
    """What a runtime is learned for: a job's team and name, what it asks for and its
    own estimate (a `JobSpec`; a run as `broker jobs` reads it, `ListedRun`)."""

    @property
    def team(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def requirements(self) -> Requirements: ...
    @property
    def runtime(self) -> RuntimeEstimate: ...


@dataclass(frozen=True, slots=True)
class PastRun:
    """One succeeded run as history: who it was, its work in hours on the GPU it ran on."""

    label: str  # team/name
    hours: float
    gpu: str  # "" for a CPU-only run
    gpus: float  # GPUs over all nodes


def work_hours(
    attempts: Sequence[Attempt], lost_shares: dict[str, Decimal], now: datetime | None = None
) -> float:
    """Hours of work in `attempts` (module docstring); with `now`, an attempt still
    running counts its billed time so far (wall time times its time scale)."""
    from broker.state.listing import AttemptWork

    return worked_hours([AttemptWork.of(a) for a in attempts], lost_shares, now)


def worked_hours(
    attempts: Sequence[AttemptWork], lost_shares: dict[str, Decimal], now: datetime | None = None
) -> float:
    """`work_hours` of what the attempts did (`AttemptWork`: all it reads of them)."""
    from broker.state import AttemptState

    done = 0.0
    for attempt in attempts:
        billed = float(attempt.billed_hours or 0)
        if attempt.state == AttemptState.SUCCEEDED:
            done += billed
        elif attempt.state == AttemptState.INTERRUPTED:
            done += billed * (1 - float(lost_shares.get(attempt.id, 1)))
        elif now is not None and attempt.ended_at is None and attempt.running_at is not None:
            scale = attempt.time_scale or 1.0
            done += max(0.0, (now - attempt.running_at).total_seconds() / 3600 * scale)
    return done


def past_run(run: FinishedRun) -> PastRun | None:
    """A finished run as history (None: it did no work the store knows of)."""
    hours = work_hours(run.attempts, run.lost_shares)
    if hours <= 0 or not run.attempts:
        return None
    placed = run.attempts[-1].placed_on
    return PastRun(f"{run.job.team}/{run.job.name}", hours, placed.accelerator, placed.gpus)


def on_first_choice(spec: Asked, hours: float, gpu: str) -> float:
    """`hours` of work on `gpu` as hours on the job's first-choice GPU."""
    asks = spec.requirements.accelerators
    if not asks or not gpu or gpu == asks[0].gpu:
        return hours
    return hours * _speed(gpu) / _speed(asks[0].gpu)


def _speed(gpu: str) -> float:
    from pricing.gpus import find_gpu

    model = find_gpu(gpu)
    return model.relative_throughput if model is not None else 1.0


def similar(spec: Asked, run: PastRun) -> bool:
    """Whether `run` ran on the job's first-choice GPU model and count (all nodes)."""
    asks = spec.requirements.accelerators
    if not asks:
        return run.gpu == ""
    return run.gpu == asks[0].gpu and run.gpus == asks[0].count * spec.requirements.nodes


def learn(
    spec: Asked, same_name: Sequence[PastRun], like: Sequence[PastRun], k: int = K
) -> RuntimeEstimate:
    """The estimate of an `auto` job from its history, newest first: the mean of its own
    last `k` runs, else of the last `k` similar runs, else the default; a manifest's
    own estimate is kept."""
    runtime = spec.runtime
    if not runtime.auto:
        return runtime
    used, what = list(same_name[:k]), f"of {spec.team}/{spec.name}"
    if not used:
        used = list(islice((run for run in like if similar(spec, run)), k))
        asks = spec.requirements.accelerators
        what = f"on {asks[0].gpu}:{asks[0].count * spec.requirements.nodes:g}" if asks else "on CPU"
    if not used:
        return replace(runtime, estimate_hours=DEFAULT_HOURS, source=NO_HISTORY)
    hours = [on_first_choice(spec, run.hours, run.gpu) for run in used]
    mean = min(MAX_HOURS, sum(hours) / len(hours))
    shown = ", ".join(
        f"{h:.2f} h" if run.label == f"{spec.team}/{spec.name}" else f"{run.label} {h:.2f} h"
        for run, h in zip(used, hours, strict=True)
    )
    runs = "the last run" if len(used) == 1 else f"mean of the last {len(used)} runs"
    source = f"history: {runs} {what} ({shown})"
    return replace(runtime, estimate_hours=mean, source=source)


def raised(runtime: RuntimeEstimate, ran_hours: float) -> RuntimeEstimate:
    """An `auto` estimate the job has run up to, raised along `LADDER_HOURS` until it
    lies beyond `ran_hours`; any other estimate as it is."""
    if not runtime.auto or ran_hours < runtime.estimate_hours:
        return runtime
    hours, step = runtime.estimate_hours, 0
    while hours <= ran_hours and hours < MAX_HOURS:
        hours += LADDER_HOURS[min(step, len(LADDER_HOURS) - 1)]
        step += 1
    hours = min(hours, MAX_HOURS)
    source = (
        f"{runtime.source}; raised to {hours:.2f} h: it has run {ran_hours:.2f} h, "
        f"past the {runtime.estimate_hours:.2f} h estimated"
    )
    return replace(runtime, estimate_hours=hours, source=source)


class History:
    """The store's succeeded runs as history, each query asked once: one controller
    pass's or one command's worth (a team's new job names share one search for similar
    jobs). Made per pass, so a run that ends is history by the next."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._runs: dict[tuple[str, str | None, datetime | None, int], list[PastRun]] = {}

    def runs(self, team: str, name: str | None, before: datetime | None, limit: int):
        key = (team, name, before, limit)
        if key not in self._runs:
            within = SIMILAR_WINDOW if name is None else None
            found = self.store.finished_runs(team, name, before=before, limit=limit, within=within)
            self._runs[key] = [p for p in map(past_run, found) if p is not None]
        return self._runs[key]


def history_estimate(history: History, spec: Asked, before: datetime | None) -> RuntimeEstimate:
    """`learn` over the store's succeeded runs (that ended before `before`, when given)."""
    if not spec.runtime.auto:
        return spec.runtime
    same = history.runs(spec.team, spec.name, before, K)
    like = history.runs(spec.team, None, before, SIMILAR_SCAN) if not same else []
    return learn(spec, same, like)


def runtime_of(
    history: History, spec: JobSpec, job: Job | None = None, now: datetime | None = None
) -> RuntimeEstimate:
    """The one estimate of a job's runtime: the manifest's, or learned from history (for
    a finished run, the history before it was submitted) and, with `now`, raised by
    what the run has worked so far."""
    from broker.state import TERMINAL

    store = history.store
    finished = job is not None and job.state in TERMINAL
    runtime = history_estimate(history, spec, job.created_at if finished and job else None)
    if job is None or now is None or finished or not runtime.auto:
        return runtime
    return raised_by_work(store, job, spec, runtime, now)


def raised_by_work(
    store: StateStore, job: Job, spec: JobSpec, runtime: RuntimeEstimate, now: datetime
) -> RuntimeEstimate:
    """`runtime` raised by the work the job's attempts have done by `now`."""
    from broker.state import AttemptState
    from broker.state.listing import AttemptWork

    attempts = store.attempts(job.id)
    interrupted = any(a.state == AttemptState.INTERRUPTED for a in attempts)
    shares = store.lost_shares(job.id) if interrupted else {}
    return raised_by(spec, runtime, [AttemptWork.of(a) for a in attempts], shares, now)


def raised_by(
    spec: Asked,
    runtime: RuntimeEstimate,
    attempts: Sequence[AttemptWork],
    lost_shares: dict[str, Decimal],
    now: datetime,
) -> RuntimeEstimate:
    """`runtime` raised by the work `attempts` have done by `now` (none: as it is)."""
    if not attempts:
        return runtime
    gpu = attempts[-1].accelerator
    return raised(runtime, on_first_choice(spec, worked_hours(attempts, lost_shares, now), gpu))


def actual_hours(store: StateStore, job: Job, spec: JobSpec) -> float | None:
    """A run's work in hours on its first-choice GPU, once it succeeded (else None)."""
    from broker.state import AttemptState, JobState

    attempts = store.attempts(job.id) if job.state == JobState.SUCCEEDED else []
    if not attempts:
        return None
    interrupted = any(a.state == AttemptState.INTERRUPTED for a in attempts)
    shares = store.lost_shares(job.id) if interrupted else {}
    gpu = attempts[-1].placed_on.accelerator
    return on_first_choice(spec, work_hours(attempts, shares), gpu)


def as_listed(
    history: History, state: JobState, run: ListedRun, now: datetime
) -> tuple[RuntimeEstimate | None, float | None]:
    """A run's estimate and, once it succeeded, its work in hours on the first-choice
    GPU, as `broker jobs` shows them: a finished run's estimate is the one its first
    attempt was planned with (recorded in the attempt's placement; None when it never
    launched or the record has no plan); a queued or active run's is `runtime_of` now
    (`run`: what the store's `listed_runs` read of it, its attempts in order)."""
    from broker.state import TERMINAL, JobState

    attempts = run.attempts
    runtime: RuntimeEstimate | None = None
    if state not in TERMINAL:  # runtime_of(history, spec, job, now), from what was read
        runtime = history_estimate(history, run, None)
        if runtime.auto:
            runtime = raised_by(run, runtime, attempts, run.lost_shares, now)
    elif attempts and run.planned_hours is not None:
        hours = on_first_choice(run, run.planned_hours, attempts[0].accelerator)
        source = _planned_source(run.planned_assumption)
        runtime = replace(run.runtime, estimate_hours=hours, source=source)
    if state != JobState.SUCCEEDED or not attempts:
        return runtime, None
    took = worked_hours(attempts, run.lost_shares)
    return runtime, on_first_choice(run, took, attempts[-1].accelerator)


def _planned_source(assumption: str) -> str:
    """The source a plan's runtime assumption names (`broker.planner.assemble`: "runtime
    estimate 2 h on V100 (history: ...), scaled by ..."; none named: the manifest's)."""
    head, sep, _ = assumption.partition("), scaled by relative GPU throughput")
    if sep and " (" in head:
        return head.split(" (", 1)[1]
    return MANIFEST


def grown_hours(placed: PlacedOn, spec: JobSpec) -> float:
    """Hours on its GPU a running attempt's plan did not count: how much the job's
    estimate has grown since it was planned (an overrun raises an `auto` estimate)."""
    if not spec.runtime.auto or placed.cost is None:
        return 0.0
    now_hours = on_gpu(spec, spec.runtime.estimate_hours, placed.accelerator)
    return max(0.0, now_hours - placed.cost.run_hours)


def grown_cost(placed: PlacedOn, spec: JobSpec) -> float:
    """USD a running attempt's plan did not count: its price for the `grown_hours`."""
    return float(placed.price_per_hour) * grown_hours(placed, spec)


def on_gpu(spec: JobSpec, hours: float, gpu: str) -> float:
    """`hours` on the job's first-choice GPU as hours on `gpu` (the planner's scaling)."""
    asks = spec.requirements.accelerators
    if not asks or not gpu or gpu == asks[0].gpu:
        return hours
    return hours * _speed(asks[0].gpu) / _speed(gpu)
