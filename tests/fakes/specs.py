"""Small JobSpecs for tests that need a job in the store but not a manifest file."""

from __future__ import annotations

from collections.abc import Sequence

from broker.spec import JobSpec, Requirements


def job_spec(
    name: str = "llama",
    team: str = "ml",
    queue: str = "default",
    priority: int = 0,
    clouds: Sequence[str] = (),
) -> JobSpec:
    """A CPU-only spec named team/name, in `queue` at `priority`."""
    requirements = Requirements(clouds=tuple(clouds))
    return JobSpec(name=name, team=team, requirements=requirements, queue=queue, priority=priority)
