"""From the state store and a batch of plans to the queue policy's verdicts.

The policy (`broker.queue`) is pure; this module gathers what it reads: the
queued jobs with their chosen placements, the running jobs, each team's decayed
GPU usage and its spend this month. The controller launches what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.planner.decision import Decision, Placement
    from broker.queue import Policy, Verdict
    from broker.spec import JobSpec
    from broker.state import Attempt, Job, StateStore


def verdicts(
    store: StateStore,
    policy: Policy,
    queued: Sequence[Job],
    decisions: Sequence[Decision],
    spec_of: Callable[[Job], JobSpec],
    active: Sequence[Job],
    now: datetime,
    pool_gpus: dict[tuple[str, str], float],
    committed: Mapping[str, float] | None = None,
) -> dict[str, tuple[Verdict, Placement | None]]:
    """Job id -> (verdict, the placement to launch on). Jobs without any feasible
    placement wait with the planner's reason and never reach the policy. `committed`:
    job id -> USD a running job is counted for against its team's budget when that is
    more than its plan's expected cost (what it accrued and will burn by the next pass).

    Capacity-limited places, where the policy may preempt and backfill, are the
    on-prem pools: `pool_gpus` maps ("onprem", pool name) to the pool's GPUs, and a
    pool is the policy's place (cloud regions are unlimited for it)."""
    from broker.queue import QueuedJob, Verdict, decayed_usage, schedule

    out: dict[str, tuple[Verdict, Placement | None]] = {}
    candidates, chosen = [], {}
    for job, decision in zip(queued, decisions, strict=True):
        if not decision.placements:
            reason = decision.rejected[-1].reason if decision.rejected else "nothing matches"
            text = f"no feasible placement ({reason})"
            out[job.id] = (Verdict(job.id, "wait", text, category="infeasible"), None)
            continue
        best = decision.placements[0]
        chosen[job.id] = best
        candidates.append(
            QueuedJob(
                job_id=job.id,
                team=job.team,
                queue=job.queue,
                priority=job.priority,
                queued_at=job.queued_at,
                gpus=best.accelerator_count * best.nodes,
                gpu_model=best.accelerator,
                expected_cost=best.expected_cost,
                expected_hours=best.expected_hours,
                cloud=best.cloud,
                region=_place(best.cloud, best.region, best.zone),
                preemptible=spec_of(job).checkpoint is not None,
            )
        )
    every = store.attempts()  # one read: fair share's usage and the active jobs' attempts
    of_job: dict[str, list[Attempt]] = {job.id: [] for job in active}
    for attempt in every:
        if attempt.job_id in of_job:
            of_job[attempt.job_id].append(attempt)
    running = running_jobs(store, active, spec_of, of_job)
    teams = {job.id: job.team for job in (*queued, *active)}  # the others' read
    teams |= store.job_teams({a.job_id for a in every} - teams.keys())
    usage_records = []
    for attempt in every:
        usage_records.append(
            (teams.get(attempt.job_id, ""), attempt.placed_on.gpus, attempt.started_at,
             attempt.ended_at)
        )  # fmt: skip
    usage = decayed_usage(usage_records, now, policy.fair_share_half_life_hours)
    for verdict in schedule(
        candidates,
        running,
        policy=policy,
        usage=usage,
        spent_this_month=spent_this_month(store, active, now, committed, spec_of, of_job),
        free_gpus=free_pool_gpus(pool_gpus, running),
        now=now,
    ):
        out[verdict.job_id] = (verdict, chosen.get(verdict.job_id))
    return out


def running_jobs(
    store: StateStore,
    active: Sequence[Job],
    spec_of,
    attempts_of: Mapping[str, list[Attempt]] | None = None,
) -> list:
    """The active jobs as the queue policy sees them, each expected to end when its plan
    said, later when its runtime estimate has grown since (broker.learned_runtime).
    `attempts_of`: each active job's attempts, when the caller has read them; else they
    are read in one query (`StateStore.attempts_of`), not one per job."""
    from broker.learned_runtime import grown_hours
    from broker.queue import RunningJob

    if attempts_of is None:
        attempts_of = store.attempts_of(job.id for job in active)
    running = []
    for job in active:
        attempts = attempts_of.get(job.id, [])
        if not attempts:
            continue
        last = attempts[-1]
        p = last.placed_on
        hours = (p.expected_hours or 1.0) + grown_hours(p, spec_of(job))
        running.append(
            RunningJob(
                job_id=job.id,
                team=job.team,
                priority=job.priority,
                started_at=last.started_at,
                gpus=p.gpus,
                gpu_model=p.accelerator,
                cloud=p.cloud,
                region=_place(p.cloud, p.region, p.zone),
                preemptible=spec_of(job).checkpoint is not None,
                expected_end=last.started_at + timedelta(hours=hours),
            )
        )
    return running


def spent_this_month(
    store: StateStore,
    active: Sequence[Job],
    now: datetime,
    committed: Mapping[str, float] | None = None,
    spec_of: Callable[[Job], JobSpec] | None = None,
    attempts_of: Mapping[str, list[Attempt]] | None = None,
) -> dict[str, float]:
    """Per team: charges since the first of this month (UTC), plus, for each job still
    running, its plan's expected cost (with `spec_of`, plus what its runtime estimate
    has grown since: `broker.learned_runtime.grown_cost`) or what it is `committed` for
    by the next pass when that is more (a budget is hard: what is running is as good
    as spent). `attempts_of` as in `running_jobs`."""
    from broker.learned_runtime import grown_cost

    if attempts_of is None:
        attempts_of = store.attempts_of(job.id for job in active)

    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    spent: dict[str, float] = {}
    for entry in store.ledger(since=start):
        spent[entry.team] = spent.get(entry.team, 0.0) + float(entry.amount_usd)
    for job in active:
        attempts = attempts_of.get(job.id, [])
        if attempts:
            placed = attempts[-1].placed_on
            planned = placed.expected_cost
            if spec_of is not None:
                planned += grown_cost(placed, spec_of(job))
            cost = max(planned, (committed or {}).get(job.id, 0.0))
            spent[job.team] = spent.get(job.team, 0.0) + cost
    return spent


def _place(cloud: str, region: str, zone: str) -> str:
    """The policy's place: the pool (zone) on-prem, the region elsewhere."""
    return zone if cloud == "onprem" and zone else region


def pool_gpus_of(index) -> dict[tuple[str, str], float]:
    """("onprem", pool) -> the pool's GPUs, from the offers (capacity in free nodes,
    all free when the inventory is read). Only the on-prem rows are visited."""
    import numpy as np

    table = index.offers
    names, codes, numbers = table.categories, table.codes, table.numbers
    onprem = np.flatnonzero(names["cloud"] == "onprem")
    rows = np.flatnonzero(np.isin(codes["cloud"], onprem))
    nodes = np.nan_to_num(numbers["capacity"][rows], nan=1.0)
    gpus = numbers["accelerator_count"][rows] * nodes
    pools = names["zone"][codes["zone"][rows]]
    return {("onprem", str(pool)): float(g) for pool, g in zip(pools, gpus, strict=True)}


def with_whole_pools(index, pool_gpus: dict[tuple[str, str], float]):
    """`index` with every on-prem row offering its pool's nodes, busy or not: planned
    this way, a full pool still ranks, and the queue policy and bursting rule decide
    whether the job waits for it (broker.dispatch.pool) instead of the planner
    silently sending it elsewhere."""
    import numpy as np

    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    table = index.offers
    names, codes, numbers = table.categories, table.codes, table.numbers
    rows = np.flatnonzero(np.isin(codes["cloud"], np.flatnonzero(names["cloud"] == "onprem")))
    if not len(rows):
        return index
    capacity = numbers["capacity"].copy()
    pools = names["zone"][codes["zone"][rows]]
    per_node = numbers["accelerator_count"][rows]
    for row, pool, gpus in zip(rows, pools, per_node, strict=True):
        total = pool_gpus.get(("onprem", str(pool)))
        if total is not None and gpus > 0:
            capacity[row] = total / gpus
    return OfferIndex(OfferTable({**numbers, "capacity": capacity}, table.codes, table.categories))


def free_pool_gpus(pool_gpus: dict[tuple[str, str], float], running) -> dict:
    """GPUs free per pool: its GPUs minus those of the jobs running there."""
    free = dict(pool_gpus)
    for job in running:
        key = (job.cloud, job.region)
        if key in free:
            free[key] -= job.gpus
    return free
