"""`DispatchSettings`: how the engines steer markets, wait for pools and back off.

One frozen value, given to the controller and to the simulator's engines alike, so a
setting means the same in production and in a replay. The defaults are production's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DispatchSettings:
    """The knobs of the shared decisions (`broker.dispatch`).

    - `spot_policy`: the deadline job's spot policy (`broker.spotpolicy`); None: the
      deadline-aware one with its defaults.
    - `spot_strict`: a deadline job whose policy says "spot" or "wait" is planned on
      spot only (it waits queued while no spot is on sale), and the policy is told
      whether spot is on sale now (where the provider can tell). On by default: without
      it a job the policy told to wait took on-demand at once, and, not sent there by
      its policy, never went back to spot (81.43 USD on the V100 scenario against 39.73;
      docs/benchmarks.md). Where the provider cannot tell, spot is assumed on sale: the
      policy never says "wait", and a job it lets use spot waits queued while no spot
      placement is open (a cool-down, a full zone) until it sends the job to on-demand.
    - `cooldown_scale`: x the reclaim cool-down of `broker.recovery` (0: a reclaimed
      place sells spot again at once). 1: on clouds the cool-down is the only sign
      that capacity just went; it costs 0.5 % on the V100 scenario (39.73 USD against
      39.53), where the trace says when spot is back (docs/benchmarks.md).
    - `stay_home`: with `spot_strict`, a reclaimed job whose policy would still wait
      plans spot only where its checkpoint is (`broker.dispatch.home`). On by default:
      waiting for its own zone beats paying egress and a restart to move (47.36 USD on
      the V100 scenario without it, 39.73 with it).
    - `restart_hours`: what a (re)start really costs, restore included, when known
      better than the planner's estimate (None: the estimate).
    - `pass_hours`: hours between two passes, which is how often the spot policy is
      asked again (0: continuously).
    - `pool_wait_factor`: Starburst's waiting budget for a full pool, x the job's
      hours (0: burst to a cloud at once).
    - `move_below`: a steered spot run moves to spot on sale elsewhere at most this
      share of its price, when the saving pays for the move (`broker.dispatch.move`;
      0: never moves). 0.5: only a gap a job gets stuck in, not zones a few percent
      apart.
    - `hold_hours`, `hold_margin` (W, X): a job reclaimed less than W hours ago, at a
      place that has reclaimed at least as often as its catalog says, plans nothing
      while its spare stays W + X above the line where its policy would send it to
      on-demand (`broker.dispatch.hold`; 0: never held). After our own reclaim the zone
      often sells again for minutes and takes the new instance back (a "flap"): waiting
      W skips most of them (V100 39.40 -> 38.78 USD, docs/benchmarks.md).
    """

    spot_policy: Any = None
    spot_strict: bool = True
    cooldown_scale: float = 1.0
    stay_home: bool = True
    restart_hours: float | None = None
    pass_hours: float = 0.0
    pool_wait_factor: float = 1.0
    move_below: float = 0.5
    hold_hours: float = 1.2
    hold_margin: float = 1.0

    def policy(self) -> Any:
        """The spot policy in force."""
        if self.spot_policy is not None:
            return self.spot_policy
        from broker.spotpolicy import DeadlineAware

        return DeadlineAware()
