"""The controller's side of moving a spot run to cheaper spot (`broker.dispatch.move`).

A steered job's running spot attempt is compared, at each pass, with the best spot
placement on sale elsewhere: the planner's first spot choice for the job in another
zone, over the offers as the next plan would see them (cool-downs closed, learned
rates), its checkpoint where it runs now. The rule itself is `moves_spot`; a job that
moves is stopped gracefully and re-planned in the same pass, without stay-home (it left
its zone by choice, not by a reclaim: `moved_by_choice`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.dispatch.settings import DispatchSettings
    from broker.planner.decision import Decision
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore
    from pricing.query import OfferIndex

MOVE_REASON = "cheaper spot on sale elsewhere"


def moved_by_choice(store: StateStore, job: Job) -> bool:
    """Whether the job's last attempt ended because it moved to cheaper spot."""
    attempts = [a for a in store.attempts(job.id) if a.running_at is not None]
    return bool(attempts) and attempts[-1].reason.startswith(MOVE_REASON)


def wants_a_look(spec: JobSpec, attempt: Attempt, settings: DispatchSettings) -> bool:
    """Whether `attempt` is a steered job's spot run that the move rule is asked about."""
    from broker.dispatch.steered import steered

    if settings.move_below <= 0 or attempt.market != "spot":
        return False
    return steered(spec.requirements.spot, spec.runtime.deadline is not None)


def moves_to_cheaper_spot(
    store: StateStore,
    job: Job,
    spec: JobSpec,
    attempt: Attempt,
    index: OfferIndex,
    now: datetime,
    settings: DispatchSettings,
    moves_with_job: bool,
    plan_many: Callable[[list[JobSpec], OfferIndex, datetime], list[Decision]],
) -> bool:
    """True when the running spot `attempt` of steered `job` should stop to move;
    `plan_many`: the controller's planner (`Planning._plan_many`)."""
    from broker.controller.steering import market_ask
    from broker.dispatch.move import SpotMove, moves_spot
    from broker.recovery import with_checkpoint_at
    from pricing.regions import Place

    requirements = spec.requirements
    if not wants_a_look(spec, attempt, settings):
        return False
    here = attempt.placed_on
    planned = with_checkpoint_at(spec, Place(here.cloud, here.region), moves_with_job)
    planned = replace(
        planned,
        requirements=replace(requirements, spot="only"),
        runtime=replace(spec.runtime, deadline=None),  # the policy owns it (planning.py)
    )
    (decision,) = plan_many([planned], index, now)
    there = next((p for p in decision.placements if p.zone != here.zone), None)
    if there is None:
        return False
    move = SpotMove(
        here_per_hour=float(attempt.price_per_hour),
        there_per_hour=there.price_per_hour,
        move_usd=there.cost.egress,
        there_rate=there.cost.interruption_rate,
    )
    return moves_spot(market_ask(store, job, spec, now, settings), move, settings)
