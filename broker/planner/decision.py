"""Decisions are values: ranked placements, each with its cost breakdown, plus
every rejected group of offers with its reason. `broker plan` prints them;
tests assert on them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from broker.planner.hints import Hint  # made only when nothing is feasible

MarketName = Literal["spot", "on-demand"]


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Expected cost of running a job on one placement, and the figures behind it.

    total = compute + egress. compute = price_per_hour (all nodes) x expected_hours;
    expected_hours = run hours on this GPU + staging + expected spot overhead.
    """

    compute: float
    interruption_overhead: float  # the part of `compute` spent redoing lost work (spot)
    egress: float
    total: float
    run_hours: float  # the job's work on this GPU type, throughput-normalised
    staging_hours: float  # moving inputs (and a checkpoint) in before work starts
    overhead_hours: float  # expected lost work + restarts on spot
    expected_interruptions: float
    interruption_rate: float  # per hour, as used
    interruption_rate_source: str  # "catalog" or "default:<cloud>"
    assumptions: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Every field (assumptions as a list); no deep copy, its fields are plain."""
        data = {name: getattr(self, name) for name in _COST_FIELDS}
        data["assumptions"] = list(self.assumptions)
        return data


_COST_FIELDS = tuple(f.name for f in fields(CostEstimate))


@dataclass(frozen=True, slots=True)
class Placement:
    """An offer chosen for a job: where, which market, how many nodes, what it costs."""

    rank: int
    cloud: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: float
    nodes: int
    market: MarketName
    price_per_hour: float  # USD, all nodes, in `market`
    expected_hours: float
    expected_cost: float
    cost: CostEstimate
    price_source: str = ""
    price_as_of: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract of `broker plan --output json`."""
        return {
            "rank": self.rank,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "accelerator": self.accelerator,
            "accelerator_count": self.accelerator_count,
            "nodes": self.nodes,
            "market": self.market,
            "price_per_hour": self.price_per_hour,
            "expected_hours": self.expected_hours,
            "expected_cost": self.expected_cost,
            "cost_breakdown": self.cost.as_dict(),
            "price_source": self.price_source,
            "price_as_of": self.price_as_of,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    """A group of candidate offers removed by one constraint."""

    reason: str
    count: int


class Rejections(dict):
    """Rejection values by (reason, count), each made once: `rejections[reason, count]`.
    A batch repeats the same few thousand, and sharing these immutable values spares
    most of their allocations (tens of thousands of objects per 10,000 jobs)."""

    def __missing__(self, key: tuple[str, int]) -> Rejection:
        made = self[key] = Rejection(*key)
        return made


@dataclass(frozen=True, slots=True)
class Decision:
    """The planner's answer for one job."""

    job: str
    placements: tuple[Placement, ...]
    rejected: tuple[Rejection, ...]
    candidates: int  # offer x market pairs considered
    hints: tuple[Hint, ...] = field(default=())

    @property
    def feasible(self) -> bool:
        return bool(self.placements)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "placements": [p.as_dict() for p in self.placements],
            "rejected": [{"reason": r.reason, "count": r.count} for r in self.rejected],
            "hints": [asdict(h) for h in self.hints],
        }
