"""`PlacedOn`: where an attempt was launched and what its plan expected, as a typed record.

The store persists one for every attempt (`attempts.placement_json`) and for the
"planned" transition event, through `to_row`/`from_row` and a format number, so the
record can grow without breaking state files written before. Nothing reads a
placement by string key outside this module; the CLI's JSON for an attempt is
rendered from the record (`as_view`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.state.model import decimal_text, to_decimal

if TYPE_CHECKING:
    from broker.planner.decision import CostEstimate, Placement

# The `format` key of a row; rows without one are the first layout (plan JSON). Format 2
# adds `time_scale`; format 1 rows read it as None (not recorded).
FORMAT = 2
FORMATS = (1, 2)
ONPREM = "onprem"


@dataclass(frozen=True, slots=True)
class PlacedOn:
    """One placement an attempt runs on, with the plan's figures when it was chosen."""

    cloud: str
    region: str
    zone: str = ""
    instance_type: str = ""
    accelerator: str = ""
    accelerator_count: float = 0.0  # GPUs per node
    nodes: int = 1
    market: str = "on-demand"
    price_per_hour: Decimal = Decimal(0)  # USD for all nodes, in force at launch
    price_source: str = ""
    price_as_of: str = ""
    expected_hours: float = 0.0
    expected_cost: float = 0.0
    rank: int = 1
    steered: bool = False  # on demand by the spot policy's call, not by price
    cost: CostEstimate | None = None  # the plan's breakdown (None in old rows without it)
    # Billed seconds per wall second: 1 on a cloud, the sandbox's --sandbox-time-scale
    # there (3600 in the demo); None in rows written before it was recorded.
    time_scale: float | None = 1.0

    @classmethod
    def of(
        cls, placement: Placement, *, steered: bool = False, time_scale: float = 1.0
    ) -> PlacedOn:
        """The record of a planner placement chosen for an attempt, billed at
        `time_scale` billed seconds per wall second."""
        return cls(
            cloud=placement.cloud,
            region=placement.region,
            zone=placement.zone,
            instance_type=placement.instance_type,
            accelerator=placement.accelerator,
            accelerator_count=placement.accelerator_count,
            nodes=placement.nodes,
            market=placement.market,
            price_per_hour=to_decimal(placement.price_per_hour),
            price_source=placement.price_source,
            price_as_of=placement.price_as_of,
            expected_hours=placement.expected_hours,
            expected_cost=placement.expected_cost,
            rank=placement.rank,
            steered=steered,
            cost=placement.cost,
            time_scale=time_scale,
        )

    @property
    def pool(self) -> str:
        """The on-prem pool it runs in ("" on a cloud): pools are offered as zones."""
        return self.zone if self.cloud == ONPREM else ""

    @property
    def where(self) -> str:
        """`cloud/region/instance_type`, as messages and tables show it."""
        return f"{self.cloud}/{self.region}/{self.instance_type}"

    @property
    def gpus(self) -> float:
        """GPUs over all nodes."""
        return self.accelerator_count * self.nodes

    @property
    def gpu_label(self) -> str:
        """`A100:8`, or "" for a CPU-only placement."""
        return f"{self.accelerator}:{self.accelerator_count:g}" if self.accelerator else ""

    def to_row(self) -> dict[str, Any]:
        """Plain JSON for the store (money as decimal text)."""
        row: dict[str, Any] = {"format": FORMAT}
        for f in fields(self):
            row[f.name] = getattr(self, f.name)
        row["price_per_hour"] = decimal_text(self.price_per_hour)
        row["cost"] = None if self.cost is None else self.cost.as_dict()
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PlacedOn:
        """The record of a stored row, in this layout or the first one (the plan's JSON
        with a `cost_breakdown` and an optional `steered: "on-demand"`)."""
        if row.get("format") in FORMATS:
            cost = planned_cost(row)
            values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
            values["price_per_hour"] = Decimal(str(row.get("price_per_hour", "0")))
            values["cost"] = None if cost is None else _cost(cost)
            values["time_scale"] = row.get("time_scale")  # None: format 1, not recorded
            return cls(**values)
        return _first_layout(row)

    def as_view(self) -> dict[str, Any]:
        """The attempt's placement for `--output json`: the plan's keys, exact price."""
        view = self.to_row()
        del view["format"]
        return view


def planned_cost(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The plan's cost breakdown in a stored row of either layout (None: not recorded)."""
    return row.get("cost") if row.get("format") in FORMATS else row.get("cost_breakdown")


def _cost(data: Mapping[str, Any]) -> CostEstimate:
    from broker.planner.decision import CostEstimate

    values = dict(data)
    values["assumptions"] = tuple(values.get("assumptions", ()))
    return CostEstimate(**values)


def _first_layout(row: Mapping[str, Any]) -> PlacedOn:
    """A row written before `format` 1: `broker plan --output json`'s placement dict."""
    breakdown = planned_cost(row)
    return PlacedOn(
        cloud=str(row.get("cloud", "")),
        region=str(row.get("region", "")),
        zone=str(row.get("zone", "") or ""),
        instance_type=str(row.get("instance_type", "")),
        accelerator=str(row.get("accelerator", "") or ""),
        accelerator_count=float(row.get("accelerator_count", 0) or 0),
        nodes=int(row.get("nodes", 1) or 1),
        market=str(row.get("market", "on-demand")),
        price_per_hour=to_decimal(row.get("price_per_hour", 0) or 0),
        price_source=str(row.get("price_source", "")),
        price_as_of=str(row.get("price_as_of", "")),
        expected_hours=float(row.get("expected_hours", 0) or 0),
        expected_cost=float(row.get("expected_cost", 0) or 0),
        rank=int(row.get("rank", 1) or 1),
        steered=row.get("steered") == "on-demand",
        cost=None if breakdown is None else _cost(breakdown),
        time_scale=None,
    )
