"""Our deadline-aware spot policy: spot while the spare time allows, on-demand before
the deadline is at risk, back to spot only once the spare has been rebuilt.

Spare = time left - work left (hours the job can still lose and finish in time on a
machine that is never interrupted). With d = restart overhead, L = the state's
preemption loss and h = the state's step, the policy keeps these thresholds:

    switch_at = switch_margin * d + L     below it: run on-demand
    resume_at = resume_margin * d + L     above it: (re)enter spot
    reserve(t) = min(pace * (deadline - work_total) / deadline, reserve_rate) * (deadline - t)

"Below" and "above" are judged one step ahead (SpotState.short_of_time). The reserve
is spare held back for later: waiting idle for spot, and leaving on-demand for spot,
must keep the spare above threshold + reserve(t). The reserve shrinks as the deadline
nears, so time spent on on-demand rebuilds the spare measured against it; that is
what the resume threshold (hysteresis) waits for. pace=0 holds nothing back (wait for
spot until the safety net); pace=1, uncapped, spends the spare evenly over the job, which
is Can't Be Late's uniform progress line (spare - reserve(t) = progress - expected
progress).
`reserve_rate` caps the hours held per hour left: the reserve insures against spot
being out over the time left, which depends on the market, not on how loose the
deadline is, so a loose deadline's spare beyond that share is spent freely (with the
defaults the cap binds from deadlines of 1.25x the work; docs/spot.md).

Why the deadline always holds (docs/spot-policy.md has the full argument): every
choice other than on-demand is made only with spare >= switch_at + h; waiting one step
then leaves spare >= switch_margin * d >= d, and a spot run entered at resume_at + h
loses at most d (its start) + L (its preemption), leaving spare >= (resume_margin - 1)
* d + h >= d. From spare >= d an on-demand start finishes in time, and on-demand is never
interrupted. The reserve only makes waiting and leaving on-demand rarer, so it keeps the
argument. Hence a job whose deadline is feasible at all (deadline - work >= d) meets it,
as long as `step` covers the real decision interval and `preemption_loss` the real loss.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from broker.spotpolicy.model import Choice, SpotState


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineAware:
    """Spot while spare time allows; on-demand when the deadline is at risk.

    - `switch_margin` (>= 1): run on-demand once the spare falls below this many restart
      overheads (+ preemption loss). The issue's rule: twice the restart overhead.
    - `resume_margin` (>= switch_margin + 1): enter spot, or leave on-demand for it, only
      with at least this many overheads of spare (+ loss). One overhead above the switch
      margin is the least that stops a fresh spot start from falling straight back under
      the switch threshold by paying its own start: the hysteresis band.
    - `wait_for_spot`: when spot is unavailable and the spare allows, wait (pay nothing)
      rather than start on-demand. Without a deadline this means: wait for spot forever.
    - `pace` (0..1): the share of the initial spare held back, spent evenly until the
      deadline (see the module docstring); needs `work_total` in the state.
    - `reserve_rate` (>= 0, hours per hour left): the most the reserve holds back per
      hour until the deadline. 0.15: above the 0.125 h an hour that pace 0.75 holds for
      a deadline of 1.2x the work, which the suite's 1.2x jobs need whole (0.10 cost
      them 18-26 % more), and below V100's 0.25 (1.5x), more than its window 1 could
      afford (docs/benchmarks.md, "The reserve's shape"). math.inf: no cap.
    """

    name: ClassVar[str] = "deadline-aware"
    switch_margin: float = 2.0
    resume_margin: float = 3.0
    wait_for_spot: bool = True
    pace: float = 0.75
    reserve_rate: float = 0.15

    def __post_init__(self) -> None:
        if not (math.isfinite(self.switch_margin) and self.switch_margin >= 1.0):
            raise ValueError(
                f"switch_margin must be >= 1 (a switch costs one restart overhead), "
                f"got {self.switch_margin}"
            )
        if not (
            math.isfinite(self.resume_margin) and self.resume_margin >= self.switch_margin + 1.0
        ):
            raise ValueError(
                f"resume_margin must be >= switch_margin + 1 = {self.switch_margin + 1} "
                f"(entering spot costs one restart overhead), got {self.resume_margin}"
            )
        if not 0.0 <= self.pace <= 1.0:
            raise ValueError(f"pace must be within 0..1, got {self.pace}")
        if math.isnan(self.reserve_rate) or self.reserve_rate < 0.0:
            raise ValueError(f"reserve_rate must be >= 0 (hours per hour), got {self.reserve_rate}")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}

    def reserve(self, state: SpotState) -> float:
        """Spare hours held back at this moment (0 without a deadline or with pace 0): the
        pace's share of the initial spare, spent evenly, at most `reserve_rate` an hour
        left. (The uncapped line keeps its own arithmetic, so its figures stay to the bit.)"""
        if self.pace == 0.0 or not state.has_deadline or state.deadline <= 0:
            return 0.0
        if state.work_total is None:
            raise ValueError("deadline-aware with pace > 0 needs SpotState.work_total")
        initial_spare = max(state.deadline - state.work_total, 0.0)
        time_left = max(state.deadline - state.elapsed, 0.0)
        if self.pace * initial_spare <= self.reserve_rate * state.deadline:
            return self.pace * initial_spare * (time_left / state.deadline)
        return self.reserve_rate * time_left

    def back_at(self, state: SpotState) -> float:
        """The spare an on-demand run needs to go back to spot: the resume threshold (the
        deadline guarantee), and the switch threshold + reserve, the line below which an
        idle job was sent to on-demand.

        Not the resume threshold + reserve: that asked an on-demand run to rebuild, on
        top of the reserve, the hysteresis band and its own start (2 restarts of spare,
        1.6 h on demand at V100's 0.25 h of reserve shed per hour) while spot sold
        again. The band still guards the deadline; the reserve is a cost heuristic, and
        an on-demand run back at its line has the spare the reserve asks for."""
        d, loss = state.restart_overhead, state.preemption_loss
        resume_at = self.resume_margin * d + loss
        return max(resume_at, self.switch_margin * d + loss + self.reserve(state))

    def choose(self, state: SpotState) -> Choice:
        if state.done:
            return "wait"
        reserve = self.reserve(state)
        d, loss = state.restart_overhead, state.preemption_loss
        switch_at = self.switch_margin * d + loss
        resume_at = self.resume_margin * d + loss
        running = state.running
        if state.short_of_time(switch_at):
            return "on-demand"  # safety: spot or waiting could cost the deadline
        if state.spot_available:
            if running == "spot":
                return "spot"  # stay until preempted: its start is already paid
            if running == "on-demand":
                # Hysteresis: never abandon an on-demand start half paid, and leave only
                # once the spare is back above the resume threshold and at the line that
                # sent the job there (switch threshold + reserve): see `back_at`.
                rebuilt = not state.starting and not state.short_of_time(self.back_at(state))
                return "spot" if rebuilt else "on-demand"
            return "on-demand" if state.short_of_time(resume_at) else "spot"
        if running == "on-demand":
            return "on-demand"  # going idle would only cost another start later
        if self.wait_for_spot and not state.short_of_time(switch_at + reserve):
            return "wait"
        return "on-demand"
