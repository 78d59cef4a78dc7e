"""The controller's side of the market decision: what the store says a job has done,
turned into the question `broker.dispatch.market` answers.

Work a reclaimed attempt saved counts up to its last checkpoint, a running attempt's
is its time running, each less its restart overhead (time spent starting is not
progress). The deadline guarantee of the deadline-aware policy needs the overhead and
the pass interval to be true (docs/spot-policy.md), which is what the settings'
`restart_hours` and `pass_hours` are for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from broker.dispatch.market import MarketAsk, choose_market
from broker.dispatch.steered import steered

if TYPE_CHECKING:
    from broker.dispatch.hold import Hold
    from broker.dispatch.settings import DispatchSettings
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore
    from pricing.table import OfferTable


def restart_overhead(spec: JobSpec, settings: DispatchSettings) -> float:
    """Hours every (re)start spends before working: the settings' when known, else the
    planner's estimate with a worst-case restore of the checkpoint."""
    if settings.restart_hours is not None:
        return settings.restart_hours
    from broker.planner.cost import RESTART_HOURS, copy_hours

    checkpoint = spec.checkpoint
    return RESTART_HOURS + (copy_hours(checkpoint.size_gb, "internet") if checkpoint else 0.0)


def work_done(store: StateStore, job: Job, spec: JobSpec, now: datetime, overhead: float) -> float:
    """Hours of the job's work that survive a restart now (module docstring)."""
    return _work_parts(store, job, spec, overhead)(now)


def _work_parts(
    store: StateStore, job: Job, spec: JobSpec, overhead: float
) -> Callable[[datetime], float]:
    """`work_done` at any moment while the store is as it is now: the attempts read once,
    each reclaimed attempt's kept hours worked out once, added in the attempts' order (the
    same float at every moment as `work_done` reading the store then)."""
    from broker.reports.lines import lost_share
    from broker.state import AttemptState

    attempts = store.attempts(job.id)
    interrupted, running = AttemptState.INTERRUPTED, AttemptState.RUNNING
    counted = spec.checkpoint is not None  # without one, a reclaim kept nothing
    reclaimed = counted and any(a.state == interrupted for a in attempts)
    recorded = store.lost_shares(job.id) if reclaimed else {}
    # the checkpoints count only where no share was recorded (attempts closed before)
    unrecorded = reclaimed and any(
        a.state == interrupted and a.id not in recorded for a in attempts
    )
    checkpoints = store.checkpoints() if unrecorded else {}
    parts: list[float | datetime] = []  # kept hours, or running since
    for attempt in attempts:
        state = attempt.state
        if state == interrupted and counted:
            share = lost_share(attempt, checkpoints.get(attempt.id), recorded.get(attempt.id))
            kept = 1 - float(share)
            parts.append(max(0.0, float(attempt.billed_hours or 0) * kept - overhead))
        elif state == running and attempt.running_at is not None:
            parts.append(attempt.running_at)

    def done_at(now: datetime) -> float:
        done = 0.0
        for part in parts:
            if isinstance(part, float):
                done += part
            else:
                done += max(0.0, (now - part).total_seconds() / 3600 - overhead)
        return done

    return done_at


def market_ask(
    store: StateStore, job: Job, spec: JobSpec, now: datetime, settings: DispatchSettings
) -> MarketAsk:
    """The job's situation now, in hours from its submission (it has a deadline)."""
    return market_asks(store, job, spec, settings)(now)


def market_asks(
    store: StateStore,
    job: Job,
    spec: JobSpec,
    settings: DispatchSettings,
    often: Callable[[Attempt], bool] | None = None,
) -> Callable[[datetime], MarketAsk]:
    """`market_ask` at any moment while the store is as it is now, its reads done once (a
    question asked at many moments: `choices`). `often`: whether a reclaimed attempt's
    place reclaims at least as its catalog says (`reclaims_often`), asked of the job's
    last reclaim for the hold (None: not asked, never held)."""
    submitted = store.version(job.id, job.version).submitted_at
    deadline_at = spec.runtime.deadline_at(submitted)
    assert deadline_at is not None, "only jobs with a deadline are steered"
    overhead = restart_overhead(spec, settings)
    checkpoint = spec.checkpoint
    done_at = _work_parts(store, job, spec, overhead)
    deadline = (deadline_at - submitted).total_seconds() / 3600
    every = checkpoint.interval_minutes / 60 if checkpoint else None
    last = last_reclaim(store, job) if often is not None else None
    reclaimed_often = last is not None and often(last)  # type: ignore[misc]

    def ask_at(now: datetime) -> MarketAsk:
        since = math.inf
        if last is not None and last.ended_at is not None:
            since = (now - last.ended_at).total_seconds() / 3600
        return MarketAsk(
            elapsed=(now - submitted).total_seconds() / 3600,
            deadline=deadline,
            work_total=spec.runtime.estimate_hours,
            work_done=done_at(now),
            restart_hours=overhead,
            checkpoint_hours=every,
            since_reclaim=since,
            reclaimed_often=reclaimed_often,
        )

    return ask_at


def last_reclaim(store: StateStore, job: Job) -> Attempt | None:
    """The job's last spot attempt that ended by a reclaim (None: never reclaimed)."""
    from broker.state import AttemptState

    reclaimed = [
        a
        for a in store.attempts(job.id)
        if a.state == AttemptState.INTERRUPTED and a.market == "spot" and a.ended_at is not None
    ]
    return max(reclaimed, key=lambda a: a.ended_at) if reclaimed else None  # type: ignore[arg-type,return-value]


def reclaims_often_in(store: StateStore, table: OfferTable) -> Callable[[Attempt], bool]:
    """`often` for `market_asks`: the learned rate at a reclaimed attempt's place, as the
    store knew it at the reclaim, against the prior `table` gives it."""
    from broker.learned_rates import reclaims_often

    def often(attempt: Attempt) -> bool:
        p = attempt.placed_on
        key = (p.cloud, p.region, p.instance_type)
        return reclaims_often(store, table, key, attempt.ended_at)  # type: ignore[arg-type]

    return often


def holds_at(
    spec: JobSpec,
    job: Job,
    store: StateStore,
    settings: DispatchSettings,
    often: Callable[[Attempt], bool],
    asks: Callable[[datetime], MarketAsk] | None = None,
) -> Callable[[datetime], Hold]:
    """The hold (`broker.dispatch.hold`) of the queued job at any moment while the store
    is as it is now, its reads done once. A job that is not steered, or was not
    reclaimed within the hold's hours, is not held (asked without building its
    question: most of a queue). `asks`: its `market_asks` with `often`, when made
    already."""
    from broker.dispatch.hold import Hold, hold

    if settings.hold_hours <= 0 or not steered(
        spec.requirements.spot, spec.runtime.deadline is not None
    ):
        free = Hold(False, "not held: not steered by a spot policy")
        return lambda now: free
    last = last_reclaim(store, job)
    if last is None:
        free = Hold(False, "not held: never reclaimed")
        return lambda now: free
    ask_at = market_asks(store, job, spec, settings, often) if asks is None else asks
    return lambda now: hold(ask_at(now), settings)


def choices(
    spec: JobSpec,
    job: Job,
    store: StateStore,
    settings: DispatchSettings,
    *,
    current: str | None = None,
    spot_available: bool = True,
    asks: Callable[[datetime], MarketAsk] | None = None,
) -> Callable[[datetime], str]:
    """`steer(...)`'s choice at any moment while the store is as it is now, its reads
    done once: the simulator's cadence asks it at many moments (broker.dispatch.cadence).
    `asks`: the job's `market_asks`, when made already (with or without `often`: the
    spot policy reads neither of the hold's fields)."""
    if not steered(spec.requirements.spot, spec.runtime.deadline is not None):
        return lambda now: ""
    ask_at = market_asks(store, job, spec, settings) if asks is None else asks
    return lambda now: choose_market(
        ask_at(now), settings, current=current, spot_available=spot_available
    )


def steer(
    spec: JobSpec,
    job: Job,
    store: StateStore,
    now: datetime,
    settings: DispatchSettings,
    *,
    current: str | None = None,
    spot_available: bool = True,
    asks: Callable[[datetime], MarketAsk] | None = None,
) -> tuple[JobSpec, str]:
    """For a deadline job with `spot: prefer`, the spot policy's choice ("spot",
    "on-demand" or "wait"; "" when it is not asked) and the spec to plan: spot
    "never" when the policy says on-demand. `current`: the market running now;
    `asks`: as `choices` takes it."""
    requirements = spec.requirements
    choice_at = choices(
        spec, job, store, settings, current=current, spot_available=spot_available, asks=asks
    )
    choice = choice_at(now)
    if choice == "on-demand":
        return replace(spec, requirements=replace(requirements, spot="never")), choice
    return spec, choice
