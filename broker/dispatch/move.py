"""Whether a running spot job leaves its spot for cheaper spot elsewhere.

A steered job takes the best spot on sale when it starts; when that is the only place
selling (a zone at 69.91 USD/h while zones at 16-19 USD/h are out), the job would pay it
until reclaimed, for the rest of its run. So at every pass a steered spot run is
compared with the best spot placement on sale elsewhere (the planner's first choice
for it, its checkpoint where it runs now), and it stops gracefully (SIGTERM,
checkpoint, re-plan) to move there when all three hold:

- its spot policy would start spot now were the job idle: the spare affords the
  restart the move costs (the deadline guarantee is the policy's, unchanged);
- the spot there costs at most `move_below` x the price here (0.5: half). Spot zones a
  few percent apart are within the noise of their reclaim risk, which the planner has
  already weighed in choosing the zone the job runs in; a move pays a restart (spare
  time), an egress and a fresh place's unknown risk, so only a gap of the kind a job
  gets stuck in (one zone at 69.91 USD/h selling while the others, at 16-19, are out)
  is worth it. 0 turns moving off;
- the move pays for itself: the price saved per hour, over the hours the job can
  expect to stay there (its work left, at most the mean time to the new place's next
  reclaim, 1 / its interruption rate), exceeds the checkpoint's egress plus the restart
  hours billed at the new price.

Pure values in, a bool out: the controller and the fleet-scale engine ask the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.dispatch.market import MarketAsk, choose_market
from broker.dispatch.settings import DispatchSettings


@dataclass(frozen=True, slots=True)
class SpotMove:
    """A steered spot run and the best spot on sale elsewhere (USD per hour, all
    nodes; `move_usd`: the checkpoint's egress to go there)."""

    here_per_hour: float
    there_per_hour: float
    move_usd: float
    there_rate: float = 0.0  # expected reclaims per hour there (0: none expected)


def moves_spot(ask: MarketAsk, move: SpotMove, settings: DispatchSettings) -> bool:
    """True when the spot run of `ask` stops now to move to the cheaper spot of `move`."""
    below = settings.move_below
    if below <= 0 or not settings.spot_strict:
        return False
    if move.there_per_hour > below * move.here_per_hour:
        return False
    left = max(0.0, ask.work_total - ask.work_done)
    if move.there_rate > 0:
        left = min(left, 1.0 / move.there_rate)  # the saving lasts until its next reclaim
    saved = (move.here_per_hour - move.there_per_hour) * left
    cost = move.move_usd + ask.restart_hours * move.there_per_hour
    if saved <= cost:
        return False
    return choose_market(ask, settings, current=None, spot_available=True) == "spot"
