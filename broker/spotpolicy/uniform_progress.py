"""The published baselines: Can't Be Late's Uniform Progress and greedy policies, plus
the two trivial ones (always on-demand; SkyPilot-style spot with failover).

Source: Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under Deadlines",
NSDI'24: the greedy policy (section 3.4, built on the Thrifty, Safety Net and
Exploitation rules of 3.3) and Uniform Progress (5.2.2); the reference implementation
`rc_cr_threshold` of its simulator `sky_spot` (as carried in andylizf/skynomad-artifact,
sky_spot/strategies/multi_region_rc_cr_threshold.py), whose step-counting form of the
safety net is used here; summary in ../shared/traces/cant-be-late-spot/README.md and
../shared/docs/spot-policies.md.

Notation: C(t) remaining work, R(t) time to deadline, d the changeover (restart)
overhead, cp(t) = C(0) - C(t) progress, ep(t) = C(0) * t / deadline the uniform line.
The paper folds lost work into d; our states carry it apart (`preemption_loss`, L), so
the safety nets here read R < C + 2d + L. With L = 0 they are the published rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from broker.spotpolicy.model import Choice, SpotState


def _check_margin(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 1.0):
        raise ValueError(f"{name} must be >= 1 (a switch costs one restart overhead), got {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Greedy:
    """Greedy (Can't Be Late, 3.4): spot whenever available, on-demand only when it must.

    1. Exploitation: once on spot, stay until preempted; wait while no spot is available.
    2. Safety net: when not on spot and R(t) < C(t) + safety_margin * d (+ L), move to
       on-demand and stay there until the end.
    `safety_margin` = 2 as published: one changeover into spot, one out of it.
    """

    name: ClassVar[str] = "greedy"
    safety_margin: float = 2.0

    def __post_init__(self) -> None:
        _check_margin("safety_margin", self.safety_margin)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}

    def choose(self, state: SpotState) -> Choice:
        if state.done:
            return "wait"  # Thrifty rule
        running = state.running
        if running is not None:
            return running  # spot until preempted; on-demand until the end
        reserve = self.safety_margin * state.restart_overhead + state.preemption_loss
        if state.short_of_time(reserve):
            return "on-demand"
        return "spot" if state.spot_available else "wait"


@dataclass(frozen=True, slots=True, kw_only=True)
class UniformProgress:
    """Uniform Progress (Can't Be Late, 5.2.2), the paper's policy for deadline jobs.

    1. Uniform progress: when idle and cp(t) < ep(t), run on-demand to catch up.
    2. Take risks: switch to spot whenever available, even behind the line; stay on it
       until preempted.
    3. Hysteresis: once on on-demand, stay until cp(t) >= ep(t + hysteresis_margin * d);
       while spot is unavailable, stay on on-demand (the reference keeps it "until the end").
    4. Safety net: when idle or on on-demand and R(t) < C(t) + safety_margin * d (+ L),
       run on-demand to the end.
    Published parameters: both margins 2 ("parameter-free"). Rule 3 overrides rule 2
    (its purpose, 5.2.2); rule 4 overrides both. Needs `work_total` for ep(t).
    """

    name: ClassVar[str] = "uniform-progress"
    safety_margin: float = 2.0
    hysteresis_margin: float = 2.0

    def __post_init__(self) -> None:
        _check_margin("safety_margin", self.safety_margin)
        if not (math.isfinite(self.hysteresis_margin) and self.hysteresis_margin >= 0):
            raise ValueError(f"hysteresis_margin must be >= 0, got {self.hysteresis_margin}")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}

    @staticmethod
    def expected_progress(state: SpotState, at: float) -> float:
        """ep(at): work that uniform progress would have done by time `at`."""
        if not state.has_deadline or state.work_total is None:
            return 0.0
        if state.deadline <= 0:
            return state.work_total
        return state.work_total * at / state.deadline

    def on_track(self, state: SpotState, at: float) -> bool:
        """cp(t) >= ep(at): progress so far is at least the line's value at `at`."""
        if not state.has_deadline:
            return True
        progress = (state.work_total or 0.0) - state.work_left
        return progress >= self.expected_progress(state, at)

    def choose(self, state: SpotState) -> Choice:
        if state.done:
            return "wait"
        if state.has_deadline and state.work_total is None:
            raise ValueError("uniform-progress needs SpotState.work_total for a deadline job")
        running = state.running
        choice: Choice = "spot" if state.spot_available else "wait"
        if not state.spot_available and not self.on_track(state, state.elapsed):
            choice = "on-demand"  # rule 1
        if running == "on-demand":
            ahead_by = self.hysteresis_margin * state.restart_overhead
            if not state.spot_available or not self.on_track(state, state.elapsed + ahead_by):
                choice = "on-demand"  # rule 3
        reserve = self.safety_margin * state.restart_overhead + state.preemption_loss
        if running != "spot" and state.short_of_time(reserve):
            choice = "on-demand"  # rule 4
        return choice


@dataclass(frozen=True, slots=True, kw_only=True)
class OnDemand:
    """Always on-demand: the reference every saving is measured against."""

    name: ClassVar[str] = "on-demand"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def choose(self, state: SpotState) -> Choice:
        return "wait" if state.done else "on-demand"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpotFailover:
    """SkyPilot managed jobs' market rule: spot, relaunched after every preemption.

    While spot is unavailable the job waits (SkyPilot keeps retrying the launch);
    with `allow_on_demand` it falls back to on-demand instead and stays there, as a
    managed job launched on on-demand does. Deadlines are ignored. Which region the
    relaunch lands in (EAGER_NEXT_REGION) is the planner's and simulator's business.
    """

    name: ClassVar[str] = "spot-failover"
    allow_on_demand: bool = False

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}

    def choose(self, state: SpotState) -> Choice:
        if state.done:
            return "wait"
        if state.running == "on-demand":
            return "on-demand"
        if state.spot_available:
            return "spot"
        return "on-demand" if self.allow_on_demand else "wait"
