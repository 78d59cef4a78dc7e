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
      whether spot is on sale now. Off in production, where a job the policy lets use
      spot also takes on-demand when that is cheaper.
    - `cooldown_scale`: x the reclaim cool-down of `broker.recovery` (0: a reclaimed
      place sells spot again at once).
    - `stay_home`: with `spot_strict`, a reclaimed job whose policy would still wait
      plans spot only where its checkpoint is (`broker.dispatch.home`).
    - `restart_hours`: what a (re)start really costs, restore included, when known
      better than the planner's estimate (None: the estimate).
    - `pass_hours`: hours between two passes, which is how often the spot policy is
      asked again (0: continuously).
    - `pool_wait_factor`: Starburst's waiting budget for a full pool, x the job's
      hours (0: burst to a cloud at once).
    """

    spot_policy: Any = None
    spot_strict: bool = False
    cooldown_scale: float = 1.0
    stay_home: bool = False
    restart_hours: float | None = None
    pass_hours: float = 0.0
    pool_wait_factor: float = 1.0

    def policy(self) -> Any:
        """The spot policy in force."""
        if self.spot_policy is not None:
            return self.spot_policy
        from broker.spotpolicy import DeadlineAware

        return DeadlineAware()
