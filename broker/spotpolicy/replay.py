"""A tiny deterministic replay of one job under one spot policy: a test oracle for the
policies and a yardstick for the simulator, not the simulator itself.

Time moves in steps of `step_hours`; availability[i] says whether spot can be had
during step i (after the sequence ends: never). At the start of each step:
1. If the job is on spot and spot is gone, it is preempted: the work done since its
   last checkpoint is lost (checkpoints every `checkpoint_interval` hours of progress
   of the run; 0 = nothing is ever lost, inf = the whole run is lost).
2. The policy chooses. A start on a market other than the running one pays the restart
   overhead first (during which nothing progresses, billed at the new market's price).
   Stopping by choice (a switch, or "wait") is graceful: the job checkpoints, loses
   nothing, and stops being billed.
3. The step runs: overhead, then progress; billing stops when the job finishes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from broker.spotpolicy.model import CHOICES, Choice, Market, SpotPolicy, SpotState

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """The job: hours of work (at on-demand speed), deadline (hours from the start of
    the replay; inf = none), restart overhead per start, checkpoint interval."""

    work: float
    deadline: float = math.inf
    restart_overhead: float = 0.0
    checkpoint_interval: float = 0.0

    def __post_init__(self) -> None:
        if not (self.work >= 0 and math.isfinite(self.work)):
            raise ValueError(f"work must be finite and >= 0, got {self.work}")
        if not (self.restart_overhead >= 0 and math.isfinite(self.restart_overhead)):
            raise ValueError(
                f"restart_overhead must be finite and >= 0, got {self.restart_overhead}"
            )
        if not (self.deadline >= 0 and self.checkpoint_interval >= 0):
            raise ValueError("deadline and checkpoint_interval must be >= 0")


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What the replay cost and how it went. `finish` is None when the job never
    finished (a policy that waits for spot that never comes)."""

    cost: float
    finish: float | None
    deadline_met: bool
    preemptions: int
    switches: int  # starts on a market other than the previous run's
    restarts: int  # every start, the first included
    lost_work: float  # hours of progress destroyed by preemptions
    spot_hours: float  # billed hours per market
    on_demand_hours: float
    choices: tuple[Choice, ...]  # one per step, as the policy answered


def replay(
    policy: SpotPolicy,
    job: ReplayJob,
    availability: Sequence[bool],
    *,
    step_hours: float,
    spot_price: float,
    on_demand_price: float,
) -> ReplayResult:
    """Replay `job` under `policy` over `availability`; see the module docstring."""
    if not (step_hours > 0 and math.isfinite(step_hours)):
        raise ValueError(f"step_hours must be > 0, got {step_hours}")
    price: dict[Market, float] = {"spot": spot_price, "on-demand": on_demand_price}
    horizon_hours = max(len(availability) * step_hours, _finite_or_zero(job.deadline))
    max_steps = math.ceil((horizon_hours + job.work + job.restart_overhead) / step_hours) + 2
    done = 0.0
    current: Market | None = None
    last_market: Market | None = None
    overhead_left = run_progress = 0.0
    cost = lost_work = 0.0
    billed: dict[Market, float] = {"spot": 0.0, "on-demand": 0.0}
    preemptions = switches = restarts = 0
    finish: float | None = 0.0 if job.work <= _EPS else None
    choices: list[Choice] = []
    for i in range(max_steps):
        if finish is not None:
            break
        t = i * step_hours
        available = i < len(availability) and bool(availability[i])
        if current == "spot" and not available:
            preemptions += 1
            lost = _lost(run_progress, job.checkpoint_interval)
            done -= lost
            lost_work += lost
            current, overhead_left, run_progress = None, 0.0, 0.0
        state = SpotState(
            elapsed=t,
            deadline=job.deadline,
            work_left=max(job.work - done, 0.0),
            restart_overhead=job.restart_overhead,
            current=current,
            spot_available=available,
            work_total=job.work,
            step=step_hours,
            preemption_loss=job.checkpoint_interval,
            overhead_left=overhead_left,
        )
        choice = policy.choose(state)
        choices.append(choice)
        if choice not in CHOICES:
            raise ValueError(f"{policy.name} answered {choice!r}, not one of {CHOICES}")
        if choice == "spot" and not available:
            raise ValueError(f"{policy.name} chose spot at step {i} while none is available")
        if choice == "wait":
            current, overhead_left = None, 0.0
        elif choice != current:
            restarts += 1
            switches += last_market is not None and choice != last_market
            current = last_market = choice
            overhead_left, run_progress = job.restart_overhead, 0.0
        if current is None:
            continue
        paid = min(overhead_left, step_hours)
        overhead_left -= paid
        progress = min(step_hours - paid, job.work - done)
        done += progress
        run_progress += progress
        busy = paid + progress if done >= job.work - _EPS else step_hours
        cost += busy * price[current]
        billed[current] += busy
        if done >= job.work - _EPS:
            finish = t + busy
    met = finish is not None and finish <= job.deadline + 1e-6
    return ReplayResult(
        cost=cost,
        finish=finish,
        deadline_met=met,
        preemptions=preemptions,
        switches=switches,
        restarts=restarts,
        lost_work=lost_work,
        spot_hours=billed["spot"],
        on_demand_hours=billed["on-demand"],
        choices=tuple(choices),
    )


def _lost(run_progress: float, interval: float) -> float:
    """Progress of this run since its last periodic checkpoint."""
    if interval <= 0:
        return 0.0
    if math.isinf(interval):
        return run_progress
    return max(run_progress - math.floor(run_progress / interval + _EPS) * interval, 0.0)


def _finite_or_zero(value: float) -> float:
    return value if math.isfinite(value) else 0.0
