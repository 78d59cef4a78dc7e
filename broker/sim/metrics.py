"""The figures of one simulated policy, read back from the state store and the ledger
(broker.reports.build_report: cost, egress, lost work), as plain data."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.sim.engine import Scenario
    from broker.sim.model import SimJob
    from broker.sim.policies import SimPolicy
    from broker.sim.provider import SimulatedProvider
    from broker.state import StateStore


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    parameters: dict[str, Any]
    jobs: int
    finished: int
    total_cost: float
    egress_cost: float
    deadline_jobs: int
    deadline_misses: int
    mean_completion_hours: float | None
    p95_completion_hours: float | None
    mean_queue_wait_hours: float | None
    preemptions: int
    lost_gpu_hours: float
    onprem_utilisation: float | None
    spot_share: float | None
    simulated_hours: float
    cost_vs_on_demand: float | None = None
    cumulative_cost: list[tuple[float, float]] = field(default_factory=list)

    def as_dict(self, series: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not series:
            data.pop("cumulative_cost")
        return data


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile by linear interpolation (numpy's default), without numpy."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def collect(
    store: StateStore,
    provider: SimulatedProvider,
    policy: SimPolicy,
    jobs: Mapping[str, SimJob],
    scenario: Scenario,
    now_hours: float,
) -> PolicyResult:
    from broker.reports.report import build_report
    from broker.state import JobState

    origin = provider.origin
    completions, waits = [], []
    deadline_jobs = misses = finished = 0
    for job in store.jobs():
        sim = jobs[job.id]
        submitted = store.version(job.id, job.version).submitted_at
        attempts = store.attempts(job.id)
        if attempts:
            waits.append((attempts[0].started_at - submitted).total_seconds() / 3600)
        end = None
        if job.state is JobState.SUCCEEDED:
            finished += 1
            end = max(a.ended_at for a in attempts if a.ended_at is not None)
            completions.append((end - submitted).total_seconds() / 3600)
        if sim.deadline_hours is not None:
            deadline_jobs += 1
            late = (
                end is None or (end - submitted).total_seconds() / 3600 > sim.deadline_hours + 1e-6
            )
            misses += int(late)
    report = build_report(store, ())
    totals = report.totals
    lines = sorted(report.lines, key=lambda line: (line.period_end, line.entry_id))
    running, series = 0.0, []
    for line in lines:
        running += float(line.amount)
        series.append((_round((line.period_end - origin).total_seconds() / 3600), _round(running)))
    onprem_gpu_hours = sum(float(line.gpu_hours) for line in lines if line.kind == "onprem")
    pool = sum(scenario.pool_gpus.values())
    span = max(now_hours, 1e-9)
    return PolicyResult(
        policy=policy.name,
        parameters=policy.describe(),
        jobs=len(jobs),
        finished=finished,
        total_cost=_round(float(totals.total)),
        egress_cost=_round(float(totals.egress)),
        deadline_jobs=deadline_jobs,
        deadline_misses=misses,
        mean_completion_hours=_round(sum(completions) / len(completions)) if completions else None,
        p95_completion_hours=_round(percentile(completions, 95)),
        mean_queue_wait_hours=_round(sum(waits) / len(waits)) if waits else None,
        preemptions=provider.preemptions,
        lost_gpu_hours=_round(float(totals.lost_gpu_hours)),
        onprem_utilisation=_round(onprem_gpu_hours / (pool * span)) if pool else None,
        spot_share=_round(float(totals.spot_share)) if totals.spot_share is not None else None,
        simulated_hours=_round(now_hours),
        cumulative_cost=series,
    )


def relative_to_on_demand(results: list[PolicyResult]) -> list[PolicyResult]:
    """Each result with `cost_vs_on_demand` = its cost / the on-demand policy's."""
    from dataclasses import replace

    base = next((r.total_cost for r in results if r.policy == "on-demand"), None)
    if not base:
        return results
    return [replace(r, cost_vs_on_demand=_round(r.total_cost / base)) for r in results]
