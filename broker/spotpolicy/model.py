"""What a spot policy sees and what it may answer.

A policy is a pure function of one `SpotState`: it keeps no memory between calls, so
the controller, the simulator and the replayer can ask it at any moment, restart it
freely, and tests can probe any state directly. Everything it needs (what runs now,
how much work and time are left) travels in the state.

Units: hours, as floats. `elapsed` and `deadline` share one origin: the moment the
job's start window opened (its submission, unless the manifest says otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Market = Literal["spot", "on-demand"]
Choice = Literal["spot", "on-demand", "wait"]
MARKETS: tuple[Market, ...] = ("spot", "on-demand")
CHOICES: tuple[Choice, ...] = ("spot", "on-demand", "wait")
_EPS = 1e-9  # hours; absorbs float noise when counting whole steps


@dataclass(frozen=True, slots=True)
class SpotState:
    """One job's situation when a policy is asked what to run next.

    - `elapsed`: hours since the job's start window opened.
    - `deadline`: hours from the same origin; `math.inf` when the job has none.
    - `work_left`: hours of work still to do at on-demand speed.
    - `restart_overhead`: hours a (re)start costs before work progresses again
      (provisioning, image pull, checkpoint restore); paid on every start or switch.
    - `current`: what runs now ("spot" | "on-demand"), None when nothing runs.
    - `spot_available`: whether spot capacity can be had now. `current="spot"` with
      `spot_available=False` reads as a preemption: nothing runs any more.
    - `work_total`: the job's work at its start (hours at on-demand speed); Uniform
      Progress draws its line from it. None when unknown.
    - `step`: hours until the policy is asked again (the controller's tick, the
      replayer's step); 0 means "continuously". A choice must stay safe that long.
    - `preemption_loss`: hours of work a spot preemption can destroy at most (the
      checkpoint interval; 0 when the job saves on the interruption notice).
    - `overhead_left`: hours of restart overhead the current run has still to pay
      (provisioning or restoring); 0 once it makes progress, or when nothing runs.
    """

    elapsed: float
    deadline: float
    work_left: float
    restart_overhead: float
    current: Market | None
    spot_available: bool
    work_total: float | None = None
    step: float = 0.0
    preemption_loss: float = 0.0
    overhead_left: float = 0.0

    def __post_init__(self) -> None:
        # `x >= 0` is False for NaN as for a negative: one test of all (a policy is asked
        # many thousand times a simulation), the culprit named only when one fails
        if not (
            self.elapsed >= 0
            and self.deadline >= 0
            and self.work_left >= 0
            and self.restart_overhead >= 0
            and self.step >= 0
            and self.overhead_left >= 0
        ):
            named = {
                "elapsed": self.elapsed,
                "deadline": self.deadline,
                "work_left": self.work_left,
                "restart_overhead": self.restart_overhead,
                "step": self.step,
                "overhead_left": self.overhead_left,
            }
            for name, value in named.items():
                if math.isnan(value) or value < 0:
                    raise ValueError(f"SpotState.{name} must be a number >= 0, got {value!r}")
        if math.isnan(self.preemption_loss) or self.preemption_loss < 0:
            raise ValueError(f"SpotState.preemption_loss must be >= 0, got {self.preemption_loss}")
        if self.work_total is not None and not self.work_total >= 0:
            raise ValueError(f"SpotState.work_total must be >= 0, got {self.work_total!r}")
        if self.current is not None and self.current not in MARKETS:
            raise ValueError(f"SpotState.current must be one of {MARKETS} or None")
        if math.isinf(self.step) or math.isinf(self.restart_overhead):
            raise ValueError("SpotState.step and restart_overhead must be finite")

    @property
    def starting(self) -> bool:
        """The current run is still paying its restart overhead."""
        return self.running is not None and self.overhead_left > _EPS

    @property
    def has_deadline(self) -> bool:
        return not math.isinf(self.deadline)

    @property
    def running(self) -> Market | None:
        """What actually runs: spot that is no longer available has been preempted."""
        if self.current == "spot" and not self.spot_available:
            return None
        return self.current

    @property
    def done(self) -> bool:
        return self.work_left <= _EPS

    @property
    def time_left(self) -> float:
        """Hours until the deadline (inf without one; negative once it has passed)."""
        return self.deadline - self.elapsed

    @property
    def spare(self) -> float:
        """Hours the job can still lose (idle, restarts, lost work) and finish in time
        on an uninterrupted machine: time left minus work left. Inf without a deadline."""
        return self.time_left - self.work_left if self.has_deadline else math.inf

    def short_of_time(self, reserve: float) -> bool:
        """True when the job can no longer afford to idle or gamble for one more step
        while keeping `reserve` hours of spare at the next decision.

        Continuous (`step` 0): time left < work left + reserve. With a step h, counted in
        whole steps as Can't Be Late's simulator does: ceil((work + reserve) / h) >=
        floor(time left / h). Either way, "not short" guarantees that after one more step
        spent anyhow, time left >= work left + reserve still holds.
        """
        if not self.has_deadline:
            return False
        need = self.work_left + reserve
        if math.isinf(need):
            return True
        if self.step <= 0:
            return self.time_left < need
        need_steps = math.ceil(need / self.step - _EPS)
        left_steps = math.floor(self.time_left / self.step + _EPS)
        return need_steps >= left_steps


class SpotPolicy(Protocol):
    """A named, parameterised rule choosing the market for one job, step by step."""

    @property
    def name(self) -> str:
        """The registry name ("deadline-aware", ...); a class attribute satisfies it."""
        ...

    def choose(self, state: SpotState) -> Choice:
        """What to run until the next decision: "spot", "on-demand", or "wait" (run
        nothing; stopping a running instance is graceful and loses no work)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The policy's name and parameters, as plain data for reports."""
        ...
