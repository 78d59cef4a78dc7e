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

from collections.abc import Iterable

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
