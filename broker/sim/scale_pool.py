"""The fleet-scale engine's on-prem pools: a full pool waited for or burst from, as
`broker.dispatch.pool` (Starburst) says, first come first served."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from broker.dispatch.pool import PoolWait, give_up_at, waits_for_pool

if TYPE_CHECKING:
    from broker.sim.shapes import Option

_EPS = 1e-9
_MIN_RETRY = 1 / 60  # hours: a pool waiter is never re-decided twice in one instant


class PoolSide:
    """A part of the fleet-scale engine (`broker.sim.scale._Fleet`), which provides the
    attributes and the `_launch`, `_options` and `_retry` used here."""

    def _init_pool_side(self) -> None:
        self.pool_total = {name: gpus for (_c, name), gpus in self.scenario.pool_gpus.items()}
        self.pool_free = dict(self.pool_total)
        self.pool_runs: dict[str, dict[int, object]] = {name: {} for name in self.pool_total}
        self.pool_queue: dict[str, list[int]] = {name: [] for name in self.pool_total}
        self.pool_queued_gpus = dict.fromkeys(self.pool_total, 0.0)

    def _pool_has_room(self, option: Option) -> bool:
        """Free GPUs for `option`, and nobody queued there before it."""
        return self.pool_free[option.key] + _EPS >= option.gpus and not self.pool_queue[option.key]

    def _wait_for_pool(self, i: int, option: Option, cloud: Option | None) -> bool:
        """Whether job `i` waits in the full pool of `option` rather than take `cloud`
        (queued there, decided again when its budget is spent)."""
        job, name = self.jobs[i], option.key
        queued_at = self.state[i].queued_at
        if queued_at is None:
            queued_at = job.submit_hours
        work = job.hours - self.state[i].saved
        limit = self.deadline[i]
        deadline = None if limit is None else job.submit_hours + limit
        ask = PoolWait(
            now=self.now,
            free_gpus=self.pool_free[name],
            need_gpus=option.gpus + self.pool_queued_gpus[name],  # first come, first served
            ends=[(r.finish, r.option.gpus) for r in self.pool_runs[name].values()],
            work_hours=work,
            restart_hours=self.restart,
            deadline=deadline,
            pool_cost=option.cost_per_work_hour * work,
            cloud_cost=math.inf if cloud is None else cloud.cost_per_work_hour * work,
            waited=self.now - queued_at,
        )
        if not waits_for_pool(ask, self.wait_factor):
            return False
        self.pool_queue[name].append(i)
        self.pool_queued_gpus[name] += option.gpus
        self.state[i].pool = name
        # decide again once the budget is spent or the deadline needs the cloud
        latest = give_up_at(queued_at, work, self.restart, deadline, self.wait_factor)
        self._retry(i, max(latest, self.now + _MIN_RETRY))
        return True

    def _unqueue(self, i: int) -> None:
        name = self.state[i].pool
        if name is not None:
            self.pool_queue[name].remove(i)
            self.pool_queued_gpus[name] -= self._pool_option(i, name).gpus
            self.state[i].pool = None

    def _pool_option(self, j: int, name: str) -> Option:
        return next(o for o in self._options(j) if o.kind == "pool" and o.key == name)

    def _pool_started(self, run) -> None:
        option = run.option
        self.pool_free[option.key] -= option.gpus
        self.pool_runs[option.key][run.job] = run

    def _pool_stopped(self, run, hours: float) -> None:
        option = run.option
        self.totals.pool_gpu_hours += option.gpus * hours
        self.pool_free[option.key] += option.gpus
        del self.pool_runs[option.key][run.job]
        self._serve_pool(option.key)

    def _serve_pool(self, name: str) -> None:
        """First come, first served: start the waiting jobs the freed GPUs now fit."""
        queue = self.pool_queue[name]
        while queue:
            j = queue[0]
            option = self._pool_option(j, name)
            if option.gpus > self.pool_free[name] + _EPS:
                return
            self._launch(j, option)  # takes it off the queue
