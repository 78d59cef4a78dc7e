"""What one pass may still launch (`Room`), read once per pass from the provider's
capacity and pool shares, and taken from as the pass launches: so a pass never plans
more launches into a place than it has nodes or GPUs free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.planner.decision import Placement


@dataclass(slots=True)
class Room:
    """What one pass may still launch: whole nodes per (cloud, region) (`Capacity`) and,
    for pools that sell shares of a node, GPUs per (cloud, pool) (`PoolShares`: the
    pool is the placement's zone). A place in neither is not limited."""

    nodes: dict[tuple[str, str], int]
    gpus: dict[tuple[str, str], int]
    # placements found with no room (by identity, kept alive here): room only shrinks, so
    # they stay without; jobs that share a plan share its placements (broker.planner.sharing)
    _full: dict[int, tuple[Placement, ...]] = field(default_factory=dict, init=False, repr=False)

    def first_free(self, placements: tuple[Placement, ...]) -> Placement | None:
        """The first of `placements` whose place has room."""
        if id(placements) in self._full:
            return None
        found = next((p for p in placements if self.fits(p)), None)
        if found is None:
            self._full[id(placements)] = placements
        return found

    def fits(self, placement: Placement) -> bool:
        gpus = self.gpus.get((placement.cloud, placement.zone))
        if gpus is not None:
            return gpus >= placement.accelerator_count * placement.nodes
        left = self.nodes.get((placement.cloud, placement.region))
        return left is None or left >= placement.nodes

    def take(self, placement: Placement) -> None:
        shares = (placement.cloud, placement.zone)
        if shares in self.gpus:
            self.gpus[shares] -= int(placement.accelerator_count * placement.nodes)
            return
        place = (placement.cloud, placement.region)
        if place in self.nodes:
            self.nodes[place] -= placement.nodes
