"""Which market a deadline job may use now: what its spot policy says.

A job with `spot: prefer` and a deadline is steered: at every decision the spot
policy (`broker.spotpolicy`) is asked, from the job's slack, whether it may run on
spot, must run on demand, or should wait for spot. Jobs without a deadline, or that
never or only use spot, are not asked (the planner's price decides).

The engines differ only in how they count the work a job has done; the question and
its answer are built here, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from broker.dispatch.settings import DispatchSettings
from broker.spotpolicy import SpotState


@dataclass(frozen=True, slots=True)
class MarketAsk:
    """One steered job at one moment, in hours from its submission.

    `work_done` is work that survives a restart (checkpointed, or running now), less
    what each start spent before working; `checkpoint_hours` is the interval between
    checkpoints (None: the job keeps none, so a reclaim loses everything).
    `since_reclaim` and `reclaimed_often` are for the hold after a reclaim
    (`broker.dispatch.hold`); the spot policy does not read them.
    """

    elapsed: float
    deadline: float
    work_total: float
    work_done: float
    restart_hours: float
    checkpoint_hours: float | None
    since_reclaim: float = math.inf  # hours since the job's last reclaim
    reclaimed_often: bool = False  # that reclaim's place reclaims at least as its catalog says


def spot_state(
    ask: MarketAsk,
    settings: DispatchSettings,
    *,
    current: str | None = None,
    spot_available: bool = True,
) -> SpotState:
    """The policy's view of `ask` (`current`: the market running now, if any)."""
    every = ask.checkpoint_hours
    return SpotState(
        elapsed=ask.elapsed,
        deadline=ask.deadline,
        work_left=max(0.0, ask.work_total - ask.work_done),
        restart_overhead=ask.restart_hours,
        current=current,  # type: ignore[arg-type]
        spot_available=spot_available,
        work_total=ask.work_total,
        preemption_loss=every if every is not None else math.inf,
        step=settings.pass_hours,
    )


def choose_market(
    ask: MarketAsk,
    settings: DispatchSettings,
    *,
    current: str | None = None,
    spot_available: bool = True,
) -> str:
    """"spot", "on-demand" or "wait", from the settings' spot policy."""
    state = spot_state(ask, settings, current=current, spot_available=spot_available)
    return settings.policy().choose(state)


def spot_only(choice: str, settings: DispatchSettings) -> bool:
    """Whether the choice plans the job on spot alone (the strict setting: a job told
    "spot" or "wait" waits queued while no spot is on sale)."""
    return settings.spot_strict and choice in ("spot", "wait")
