"""The launch request of an attempt, built from the job's spec and its placement.

Rebuilt identically on every call for the same attempt, which is what makes a
relaunch after a crash idempotent: providers compare the request's hash with the one
the first launch was tagged with (`providers.base.request_hash`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state import Attempt, Job
    from providers.base import LaunchRequest


def launch_request(job: Job, attempt: Attempt, spec: JobSpec, store: str | None) -> LaunchRequest:
    """The request for `attempt` of `job`. `store`: the job's checkpoint store at the
    attempt's place when the provider keeps one (a resumed attempt resumes from it),
    else the manifest's checkpoint URI is resumed from. ValueError when the job cannot
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
    )
