"""The launch request of an attempt, built from the job's spec and its placement.

Rebuilt identically on every call for the same attempt, which is what makes a
relaunch after a crash idempotent: providers compare the request's hash with the one
the first launch was tagged with (`providers.base.request_hash`).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state import Attempt, Job
    from providers.base import LaunchRequest


def launch_request(
    job: Job, attempt: Attempt, spec: JobSpec, store: str | None, deadline_at: datetime | None
) -> LaunchRequest:
    """The request for `attempt` of `job`. `store`: the job's checkpoint store at the
    attempt's place when the provider keeps one (a resumed attempt resumes from it),
    else the manifest's checkpoint URI is resumed from. `deadline_at`: when the job's
    version must be done (its time limit: `time_limit`). ValueError when the job cannot
    be launched as it is (e.g. nothing to run)."""
    from providers.base import LaunchRequest

    placed = attempt.placed_on
    resume = ""
    if attempt.number > 1 and spec.checkpoint is not None:
        resume = store if store is not None else spec.checkpoint.uri
    return LaunchRequest(
        attempt_id=attempt.id,
        job_id=job.id,
        job_name=job.name,
        team=job.team,
        cloud=placed.cloud,
        region=placed.region,
        zone=placed.zone,
        instance_type=placed.instance_type,
        market=attempt.market,
        nodes=placed.nodes,
        accelerator=placed.accelerator,
        accelerator_count=placed.accelerator_count,
        command=spec.run.command,
        setup=spec.run.setup,
        workdir_uri=spec.run.workdir_archive,
        image=spec.run.image or "",
        env=spec.run.env,
        checkpoint_uri=spec.checkpoint.uri if spec.checkpoint else "",
        resume_from=str(resume),
        max_price_per_hour=spec.requirements.max_price_per_hour,
        time_limit_seconds=time_limit(spec, attempt, deadline_at),
        interconnect=spec.requirements.interconnect or "",
        pool=placed.pool,
    )


def time_limit(spec: JobSpec, attempt: Attempt, deadline_at: datetime | None) -> int:
    """Seconds the attempt may run before its engine stops it (a batch scheduler's
    `--time`, with its SIGTERM grace before): until the job's deadline, but never less
    than its own estimate and a restart, so a late attempt still gets its run; 0 (no
    limit) without a deadline. Counted from the attempt's recorded start, so the same
    attempt always asks the same (a relaunch after a crash is the same request)."""
    if deadline_at is None:
        return 0
    from broker.planner.cost import RESTART_HOURS

    until_deadline = (deadline_at - attempt.started_at).total_seconds()
    own = (spec.runtime.estimate_hours + RESTART_HOURS) * 3600
    return max(1, math.ceil(max(until_deadline, own)))
