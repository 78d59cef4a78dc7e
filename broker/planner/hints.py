"""When nothing is feasible: which constraint to relax, and what that would cost.

Each hint re-plans the job with one constraint lifted (never two), so every
suggestion is a single change the user can make to the manifest; the relaxed
jobs are planned as one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from broker.planner.decision import Placement
from broker.planner.plan import plan_many
from broker.spec import Amount, Budget, JobSpec, RuntimeEstimate

if TYPE_CHECKING:
    from pricing.query import OfferIndex


@dataclass(frozen=True, slots=True)
class Hint:
    """What relaxing one constraint would buy when nothing is feasible (a `Decision`'s
    `hints`; defined here, not beside `Decision`: a plan with placements never makes one)."""

    constraint: str  # e.g. "placement.max_price_per_hour"
    suggestion: str  # e.g. "raise it to 32.78"
    cheapest_cost: float | None  # expected cost of the best placement once relaxed


def _relaxations(job: JobSpec) -> list[tuple[str, JobSpec]]:
    req = job.requirements
    out: list[tuple[str, JobSpec]] = []

    def with_req(**changes) -> JobSpec:
        return replace(job, requirements=replace(req, **changes))

    if req.max_price_per_hour is not None:
        out.append(("placement.max_price_per_hour", with_req(max_price_per_hour=None)))
    if job.budget.max_cost is not None:
        out.append(("budget.max_cost", replace(job, budget=Budget(max_cost=None))))
    if job.runtime.deadline is not None:
        out.append(
            (
                "runtime.deadline",
                replace(
                    job,
                    runtime=RuntimeEstimate(
                        estimate_hours=job.runtime.estimate_hours, deadline=None
                    ),
                ),
            )
        )
    if req.spot != "prefer":
        out.append(("placement.spot", with_req(spot="prefer")))
    if req.regions:
        out.append(("placement.regions", with_req(regions=())))
    if req.countries:
        out.append(("placement.countries", with_req(countries=())))
    if req.clouds or req.exclude_clouds:
        out.append(("placement.clouds", with_req(clouds=(), exclude_clouds=())))
    # A stated amount is dropped; an unstated one on a GPU job is the GPU's host floor
    # (broker.planner.host), which a small explicit amount lifts.
    floor = Amount(1, at_least=True) if req.accelerators else None
    if req.cpus is not None or floor is not None:
        out.append(("resources.cpus", with_req(cpus=None if req.cpus is not None else floor)))
    if req.memory_gib is not None or floor is not None:
        memory = None if req.memory_gib is not None else floor
        out.append(("resources.memory", with_req(memory_gib=memory)))
    if req.interconnect:
        out.append(("resources.interconnect", with_req(interconnect=None)))
    return out


def _suggestion(constraint: str, best: Placement, job: JobSpec, now: datetime) -> str:
    where = f"{best.cloud} {best.region} {best.instance_type} {best.market}"
    if constraint == "placement.max_price_per_hour":
        return f"raise it to {best.price_per_hour:.2f} ({where})"
    if constraint == "budget.max_cost":
        return f"raise it to {best.expected_cost:.2f} ({where})"
    if constraint == "runtime.deadline":
        return f"allow at least {best.expected_hours:.1f} h ({where})"
    if constraint == "placement.spot":
        return f"use spot: prefer ({where})"
    if constraint in ("placement.regions", "placement.countries"):
        return f"allow {best.region} ({best.cloud}; {where})"
    if constraint == "placement.clouds":
        return f"allow {best.cloud} ({where})"
    req = job.requirements
    if constraint == "resources.cpus" and req.cpus is None:
        return f"set a smaller host than the GPU's default, e.g. cpus: 1+ ({where})"
    if constraint == "resources.memory" and req.memory_gib is None:
        return f"set a smaller host than the GPU's default, e.g. memory: 1+ ({where})"
    return f"drop it ({where})"


def relaxation_hints(job: JobSpec, index: OfferIndex, now: datetime) -> tuple[Hint, ...]:
    """One hint per constraint whose removal alone makes the job feasible, cheapest first."""
    relaxations = _relaxations(job)
    decisions = plan_many([relaxed for _, relaxed in relaxations], index, now, top=1)
    hints = []
    for (constraint, _), decision in zip(relaxations, decisions, strict=True):
        if decision.placements:
            best = decision.placements[0]
            hints.append(
                Hint(constraint, _suggestion(constraint, best, job, now), best.expected_cost)
            )
    hints.sort(key=lambda h: (h.cheapest_cost is None, h.cheapest_cost or 0.0, h.constraint))
    return tuple(hints)
