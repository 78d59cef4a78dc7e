"""The fleet-scale engine's books and figures: what a run cost and how jobs fared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.sim.metrics import PolicyResult, percentile

if TYPE_CHECKING:
    from broker.sim.model import SimJob
    from broker.sim.policies import SimPolicy


@dataclass
class Totals:
    """Running sums of one run."""

    cost: float = 0.0
    spot_cost: float = 0.0
    pool_gpu_hours: float = 0.0
    preemptions: int = 0
    lost_gpu_hours: float = 0.0
    egress: float = 0.0  # USD of checkpoint copies between places
    daily: dict[int, float] = field(default_factory=dict)  # day -> USD


def scale_result(
    policy: SimPolicy,
    spot_scale: int,
    jobs: Sequence[SimJob],
    states: Sequence[Any],
    totals: Totals,
    pool_total: dict[str, float],
    now: float,
) -> PolicyResult:
    """The figures of a finished run: `states` hold each job's first start and end."""
    completions, waits = [], []
    deadline_jobs = misses = 0
    for job, st in zip(jobs, states, strict=True):
        if st.first_start is not None:
            waits.append(st.first_start - job.submit_hours)
        took = None if st.end is None else st.end - job.submit_hours
        if took is not None:
            completions.append(took)
        if job.deadline_hours is not None:
            deadline_jobs += 1
            misses += int(took is None or took > job.deadline_hours + 1e-6)
    span = max(now, 1e-9)
    pool = sum(pool_total.values())
    running, series = 0.0, []
    for day in sorted(totals.daily):
        running += totals.daily[day]
        series.append((float((day + 1) * 24), round(running, 4)))
    hourly = totals.cost
    return PolicyResult(
        policy=policy.name,
        parameters={
            **policy.describe(),
            "engine": "scale",
            "spot_scale": spot_scale,
        },
        jobs=len(jobs),
        finished=len(completions),
        total_cost=round(totals.cost, 4),
        egress_cost=round(totals.egress, 4),
        deadline_jobs=deadline_jobs,
        deadline_misses=misses,
        mean_completion_hours=_mean(completions),
        p95_completion_hours=_r(percentile(completions, 95)),
        mean_queue_wait_hours=_mean(waits),
        preemptions=totals.preemptions,
        lost_gpu_hours=round(totals.lost_gpu_hours, 4),
        onprem_utilisation=_r(totals.pool_gpu_hours / (pool * span)) if pool else None,
        spot_share=_r(totals.spot_cost / hourly) if hourly else None,
        simulated_hours=round(now, 4),
        cumulative_cost=series,
    )


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
