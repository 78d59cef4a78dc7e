"""The controller's side of wait-or-burst: a job whose best placement is a full pool,
as the question `broker.dispatch.pool` answers, from the plan and what runs there."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from broker.dispatch.pool import PoolWait, waits_for_pool

if TYPE_CHECKING:
    from broker.planner.decision import Decision, Placement
    from broker.queue import RunningJob, Verdict
    from broker.spec import JobSpec

ONPREM = "onprem"


def first_cloud(decision: Decision) -> Placement | None:
    """The best placement that is not an on-prem pool."""
    return next((p for p in decision.placements if p.cloud != ONPREM), None)


def pool_full(verdict: Verdict, best: Placement | None) -> bool:
    """The queue policy holds the job because its best placement, a pool, has no room for
    it now (too few GPUs free, taken by a job ranked ahead, or kept for one): not for its
    team's quota or budget, which a cloud would not lift."""
    if best is None or best.cloud != ONPREM:
        return False
    return verdict.category not in ("quota", "budget")


def bursts(
    decision: Decision,
    spec: JobSpec,
    *,
    now: datetime,
    submitted: datetime,
    queued_since: datetime,
    free_gpus: float,
    running: list[RunningJob],
    ahead_gpus: float,
    max_wait_factor: float,
) -> bool:
    """True when a job held for its full pool (`decision.placements[0]`) should take the
    best cloud placement now rather than wait. The pool is expected to have room once
    its running jobs' ends free this job's GPUs plus those of the jobs ahead of it still
    waiting for the pool (`ahead_gpus`)."""
    pool, cloud = decision.placements[0], first_cloud(decision)
    if cloud is None:
        return False
    place = (ONPREM, pool.zone)
    ends = [
        ((r.expected_end - now).total_seconds() / 3600, r.gpus)
        for r in running
        if (r.cloud, r.region) == place
    ]
    deadline_at = spec.runtime.deadline_at(submitted)
    work = spec.runtime.estimate_hours
    ask = PoolWait(
        now=0.0,
        free_gpus=free_gpus,
        need_gpus=pool.accelerator_count * pool.nodes + ahead_gpus,
        ends=ends,
        work_hours=work,
        restart_hours=max(0.0, pool.expected_hours - work),
        deadline=None if deadline_at is None else (deadline_at - now).total_seconds() / 3600,
        pool_cost=pool.expected_cost,
        cloud_cost=cloud.expected_cost,
        waited=max(0.0, (now - queued_since).total_seconds() / 3600),
    )
    return not waits_for_pool(ask, max_wait_factor)
