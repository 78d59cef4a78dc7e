"""Monthly budgets as hard caps on what runs, not only on what launches (docs/policy.md).

A team's projected spend this month is what the ledger holds since the first of the
month, plus what its running attempts have accrued (what stopping them now would be
charged), plus what they will burn until the controller's next pass. When that
projection is over the team's `monthly_budget`, running jobs are stopped, in the
order preemption uses (lowest priority, then the most recently started, then job
id), until it is not: each stop takes its burn out of the projection (what it has
accrued is spent). Pure: plain data in, the jobs to stop and why out; the controller
stops them gracefully and holds them in the queue, where the launch check keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from broker.queue.policy import Policy
from broker.queue.verdict import Why

_EPS = 1e-9  # dollars: a sum of floats within this of the cap is at the cap


@dataclass(frozen=True, slots=True)
class Burning:
    """A running attempt as a budget sees it, in USD."""

    job_id: str
    team: str
    priority: int
    started_at: datetime
    accrued: float  # its charges if it stopped now: time so far, data moved
    burn: float  # what it adds until the next pass


def projected(spent: float, burning: Sequence[Burning]) -> float:
    """A team's projected spend by the next pass: billed + accrued + burn."""
    return spent + sum(b.accrued + b.burn for b in burning)


def over_budget(
    policy: Policy, spent: Mapping[str, float], burning: Sequence[Burning]
) -> list[tuple[str, Why]]:
    """(job id, why) of the running jobs to stop now so that no team goes over its
    monthly budget before the next pass; `spent`: team -> the ledger's spend this
    month. Same input, same output, whatever the order of `burning`."""
    stops: list[tuple[str, Why]] = []
    for team in sorted({b.team for b in burning}):
        cap = policy.team(team).monthly_budget
        if cap is None:
            continue
        mine = sorted(
            (b for b in burning if b.team == team),
            key=lambda b: (b.priority, -b.started_at.timestamp(), b.job_id),
        )
        billed = float(spent.get(team, 0.0))
        accrued = sum(b.accrued for b in mine)
        ahead = sum(b.burn for b in mine)
        for victim in mine:
            if billed + accrued + ahead <= cap + _EPS:
                break
            detail = (
                f"team {team} would reach ${billed + accrued + ahead:,.2f} of ${cap:,.2f} "
                f"this month by the next pass (${billed:,.2f} billed, ${accrued:,.2f} "
                f"accrued by running jobs, ${ahead:,.2f} until the next pass)"
            )
            stops.append((victim.job_id, Why("budget", detail)))
            ahead -= victim.burn
    return stops
