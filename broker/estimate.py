"""What manifests are expected to cost: the planner's best placement of each job, as data.

`broker estimate` prints these rows and `broker ci` compares them between two
revisions. The figures are the planner's own (`broker plan`): an estimate is the
rank-1 placement of the same batch plan, so the two commands never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.planner.decision import Placement
    from broker.spec import JobSpec
    from pricing.query import OfferIndex


@dataclass(frozen=True)
class JobEstimate:
    """One job's cheapest compliant placement (None: no feasible placement) and its origin."""

    spec: JobSpec
    path: Path
    line: int
    digest: str  # the manifest's content digest: equal digests, equal plans
    placement: Placement | None

    @property
    def key(self) -> tuple[str, str]:
        """(team, name): how a job is known across files and revisions."""
        return (self.spec.team, self.spec.name)

    @property
    def feasible(self) -> bool:
        return self.placement is not None

    @property
    def cost(self) -> float:
        """Expected USD; 0 when nothing is feasible (such a job is reported, never summed)."""
        return self.placement.expected_cost if self.placement is not None else 0.0

    @property
    def where(self) -> str:
        """`cloud/region/instance (market)`, or "no feasible placement"."""
        p = self.placement
        if p is None:
            return "no feasible placement"
        return f"{p.cloud}/{p.region}/{p.instance_type} ({p.market})"

    def row(self) -> dict[str, Any]:
        """A flat row: the placement's fields as `broker plan` names them, plus the job's."""
        row: dict[str, Any] = {
            "job": self.spec.name,
            "team": self.spec.team,
            "file": f"{self.path}:{self.line}",
            "feasible": self.feasible,
            "runtime_hours": self.spec.runtime.estimate_hours,
            "expected_cost": None,
            "assumptions": [],
        }
        p = self.placement
        if p is not None:
            row.update(p.as_dict())
            row.pop("cost_breakdown")
            row.update(
                gpus=f"{p.accelerator}:{p.accelerator_count:g}" if p.accelerator else "CPU",
                compute=p.cost.compute,
                interruption_overhead=p.cost.interruption_overhead,
                egress=p.cost.egress,
                assumptions=list(p.cost.assumptions),
            )
        return row


def estimate(
    manifests: Sequence[Manifest],
    index: OfferIndex,
    now: datetime,
    specs: Sequence[JobSpec] | None = None,
) -> list[JobEstimate]:
    """Plan `manifests` in one batch; one estimate per manifest, in order. `specs`: the
    manifests' jobs as planned, when they differ from the files (an `auto` runtime
    learned from history, as `broker plan` learns it); by default the files' own."""
    from broker.planner.plan import plan_many

    jobs = [m.spec for m in manifests] if specs is None else list(specs)
    decisions = plan_many(jobs, index, now, top=1)
    return [
        JobEstimate(
            spec=spec,
            path=m.path,
            line=m.line,
            digest=m.digest,
            placement=d.placements[0] if d.placements else None,
        )
        for m, spec, d in zip(manifests, jobs, decisions, strict=True)
    ]


def total(estimates: Sequence[JobEstimate]) -> float:
    """The expected cost of the feasible jobs (infeasible ones have no cost to add)."""
    return sum(e.cost for e in estimates)
