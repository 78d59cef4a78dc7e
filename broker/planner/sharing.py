"""Jobs that share one plan: a queue of jobs from one template asks the planner the
same question thousands of times, under different names. The planner reads neither a
job's name nor its team, so jobs whose specs differ only there are planned once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from operator import attrgetter

from broker.planner.decision import Decision
from broker.spec import JobSpec
from broker.spec_codec import PARTS


def shared_plans(jobs: Sequence[JobSpec]) -> list[int]:
    """For each job, the number of the distinct plan it gets: jobs whose specs differ
    only in name and team (which the planner never reads) share one. Specs decoded by
    broker.spec_codec share their parts' objects, so most are matched by identity and
    only the first of each set of parts is hashed in full."""
    distinct: dict[tuple, int] = {}
    by_identity: dict[tuple, int] = {}
    which = []
    for job in jobs:
        parts, plain = _parts(job), _plain(job)
        ids = (*map(id, parts), *plain)
        at = by_identity.get(ids)
        if at is None:
            at = by_identity[ids] = distinct.setdefault((*parts, *plain), len(distinct))
        which.append(at)
    return which


_parts = attrgetter(*PARTS)  # what decoding shares: matched by identity first
_plain = attrgetter(  # plain values (decoded afresh each time): matched by value
    *(f.name for f in fields(JobSpec) if f.name not in (*PARTS, "name", "team"))
)


def named(plan: Decision, name: str) -> Decision:
    """`plan`, as the decision of the job called `name`."""
    if plan.job == name:
        return plan
    return Decision(name, plan.placements, plan.rejected, plan.candidates, plan.hints)
