"""When an on-prem pool is full: wait for it, or burst to a cloud now?

Starburst (Luo et al., ATC'24) keeps a job waiting for the cluster it already pays
for while the wait stays within a budget proportional to the job's size, and sends it
to the cloud once it would wait longer. We add the two checks an experienced user
expects: the pool must free in time for the deadline, and waiting must actually be
cheaper than the cloud placement on offer. `burst-always` is `max_wait_factor = 0`.

Pure functions of hours (floats from any one origin), so the controller and the
simulators ask the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_EPS = 1e-9


def expected_pool_start(
    free_gpus: float, need: float, ends: Iterable[tuple[float, float]], now: float
) -> float | None:
    """When the pool first has `need` GPUs free, if the running jobs end as expected:
    `ends` are (expected end hour, GPUs released). None when they never free enough."""
    if need <= free_gpus + _EPS:
        return now
    free = free_gpus
    for end, gpus in sorted(ends):
        free += gpus
        if free + _EPS >= need:
            return max(end, now)
    return None


def wait_for_pool(
    *,
    now: float,
    pool_start: float | None,
    work_hours: float,
    restart_hours: float,
    deadline: float | None,
    pool_cost: float,
    cloud_cost: float,
    max_wait_factor: float = 1.0,
    waited: float = 0.0,
) -> bool:
    """True when the job should wait for the pool rather than burst.

    - `pool_start`: when the pool is expected to have room (expected_pool_start);
    - the wait, with the `waited` hours already spent queued, must be at most
      `max_wait_factor` x the job's own hours (Starburst's compute-proportional waiting
      budget: a long job may wait longer; once spent, the job bursts);
    - the job must still finish by `deadline` (absolute hours; None: no deadline)
      when it starts then and pays its restart;
    - the pool run must cost less than the cloud placement (`cloud_cost`, the best
      cloud's expected cost; inf when no cloud placement is feasible).
    """
    if pool_start is None or max_wait_factor <= 0:
        return False
    wait = max(0.0, pool_start - now)
    if waited + wait > max_wait_factor * work_hours + _EPS:
        return False
    if deadline is not None and pool_start + restart_hours + work_hours > deadline + _EPS:
        return False
    return pool_cost < cloud_cost


@dataclass(frozen=True, slots=True)
class PoolWait:
    """A job whose best placement is a full pool, and what it would wait for (hours
    from any one origin; `ends`: the running jobs' expected ends and GPUs there)."""

    now: float
    free_gpus: float
    need_gpus: float  # its own GPUs plus those of the jobs ahead of it waiting there
    ends: Sequence[tuple[float, float]]
    work_hours: float
    restart_hours: float
    deadline: float | None
    pool_cost: float
    cloud_cost: float
    waited: float  # hours since it last entered the queue


def waits_for_pool(ask: PoolWait, max_wait_factor: float) -> bool:
    """True when the job waits for the pool, False when it bursts to the best cloud."""
    if max_wait_factor <= 0:
        return False
    start = expected_pool_start(ask.free_gpus, ask.need_gpus, ask.ends, ask.now)
    return wait_for_pool(
        now=ask.now,
        pool_start=start,
        work_hours=ask.work_hours,
        restart_hours=ask.restart_hours,
        deadline=ask.deadline,
        pool_cost=ask.pool_cost,
        cloud_cost=ask.cloud_cost,
        max_wait_factor=max_wait_factor,
        waited=ask.waited,
    )


def give_up_at(
    queued_at: float, work_hours: float, restart_hours: float, deadline: float | None,
    max_wait_factor: float,
) -> float:
    """The hour a waiting job stops waiting: its budget spent, or the last start that
    still meets its deadline (an engine decides again there)."""  # fmt: skip
    latest = queued_at + max_wait_factor * work_hours
    if deadline is not None:
        latest = min(latest, deadline - work_hours - restart_hours)
    return latest
