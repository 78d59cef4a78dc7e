"""One simulated instance: the work it makes, the checkpoints it takes, and how the
Provider protocol shows it.

A run pays its overhead (boot, image pull, restore) and then makes progress on its
job's true work at `rate` work hours per hour, from where its job last checkpointed
(`start_progress`); it checkpoints every `checkpoint_hours` of progress-making time.
All times are hours from the scenario's origin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from broker.sim.model import TracePlace
from providers.base import Instance, LaunchRequest, instance_tags

NAME = "sim"  # the provider's name, on every instance and notice
ID_PREFIX = "sim-"  # an instance's id: the prefix and its attempt id
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Work:
    """A job's true work (hours on its own GPU type) and checkpoint interval (None: never)."""

    hours: float
    gpu: str = ""
    checkpoint_hours: float | None = None


@dataclass
class SimRun:
    """One simulated instance, from its launch to its end."""

    request: LaunchRequest
    row: int  # the catalog row it runs on (`broker.sim.sale.Sale`)
    place: TracePlace | None
    zone: str
    launched: float
    overhead: float
    rate: float  # work hours per hour
    start_progress: float
    work: Work
    finish: float  # when it would end succeeded
    ended: float | None = None
    state: str = "running"
    progress_at_end: float = 0.0
    saved_at_end: float = 0.0
    last_checkpoint: float | None = None
    view: Instance | None = None  # the last Instance made of it (`instance_of`)

    def progress(self, t: float) -> float:
        run = max(0.0, t - self.launched - self.overhead)
        return min(self.work.hours, self.start_progress + run * self.rate)

    def saved(self, t: float) -> tuple[float, float | None]:
        """(progress at the last checkpoint by time t, when it was taken)."""
        every = self.work.checkpoint_hours
        run = max(0.0, t - self.launched - self.overhead)
        if every is None or every <= 0 or run <= 0:
            return self.start_progress, None
        done = math.floor(run / every + EPS) * every
        if done <= 0:
            return self.start_progress, None
        return self.start_progress + done * self.rate, self.launched + self.overhead + done


def instance_of(run: SimRun, origin: datetime) -> Instance:
    """The run as an Instance; made once per state (a pass lists every run)."""
    if run.view is None or run.view.state != run.state:
        run.view = _make_instance(run, origin)
    return run.view


def _make_instance(run: SimRun, origin: datetime) -> Instance:
    r = run.request
    return Instance(
        id=ID_PREFIX + r.attempt_id,
        provider=NAME,
        cloud=r.cloud,
        region=r.region,
        zone=run.zone,
        instance_type=r.instance_type,
        market=r.market,
        state=run.state,  # type: ignore[arg-type]
        exit_code=0 if run.state == "succeeded" else None,
        tags=instance_tags(r),
        launched_at=origin + timedelta(hours=run.launched),
        ended_at=origin + timedelta(hours=run.ended) if run.ended is not None else None,
        nodes=r.nodes,
    )
