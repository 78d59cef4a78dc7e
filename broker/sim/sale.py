"""What the simulated provider sells at a moment: the scenario's catalog rows, each
traced zone a row of its own, with spot and on-prem room as the traces and the running
instances leave them.

A row's spot price is its trace's price when the trace has one; spot is missing (not
sold) while its place has no free spot instance, or when no trace governs the row and
`untraced_spot` is "closed". An on-prem row carries its pool's free nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.sim.instances import SimRun
from broker.sim.model import SpotTrace, TracePlace
from broker.sim.places import expand_zones, place_of_rows
from providers.base import LaunchRequest

if TYPE_CHECKING:
    from pricing.table import OfferTable

TEXT_COLUMNS = ("cloud", "region", "zone", "instance_type", "accelerator")


class Sale:
    """The catalog as the provider sells it (see the module docstring)."""

    def __init__(self, offers: OfferTable, spot: SpotTrace, untraced_spot: str) -> None:
        places = sorted(spot.places, key=str)
        self.table = expand_zones(offers, places)
        self.place = place_of_rows(self.table, places)  # per row: its trace place, if any
        self.spot = spot
        self.untraced_spot = untraced_spot
        self.text = {n: self.table.text(n).tolist() for n in TEXT_COLUMNS}
        self._rows: dict[tuple[str, str, str], list[int]] = {}
        for i in range(len(self.table)):
            key = (self.text["cloud"][i], self.text["region"][i], self.text["instance_type"][i])
            self._rows.setdefault(key, []).append(i)

    def table_at(self, now: float, alive: Iterable[SimRun]) -> OfferTable:
        """The offers at `now`, with `alive` (the running instances) taking their room."""
        import numpy as np

        from pricing.table import OfferTable

        alive = list(alive)
        numbers = dict(self.table.numbers)
        spot = numbers["price_spot"].copy()
        capacity = numbers["capacity"].copy()
        used = spot_used(alive)
        for i, place in enumerate(self.place):
            if place is None:
                if self.untraced_spot == "closed" and self.text["cloud"][i] != "onprem":
                    spot[i] = np.nan
                continue
            trace = self.spot.places[place]
            price = trace.price_at(now)
            if price is not None:
                spot[i] = price
            if trace.count_at(now) - used.get(place, 0) <= 0:
                spot[i] = np.nan
        for i, free in self.onprem_free(alive).items():
            capacity[i] = free
        numbers["price_spot"], numbers["capacity"] = spot, capacity
        return OfferTable(numbers, self.table.codes, self.table.categories)

    def onprem_free(self, alive: Iterable[SimRun]) -> dict[int, float]:
        """Free nodes per on-prem row: its pool's nodes (capacity) minus nodes running there."""
        busy: dict[int, int] = {}
        for run in alive:
            if self.text["cloud"][run.row] == "onprem":
                busy[run.row] = busy.get(run.row, 0) + run.request.nodes
        out = {}
        for i, cloud in enumerate(self.text["cloud"]):
            if cloud == "onprem":
                cap = self.table.numbers["capacity"][i]
                total = 1.0 if math.isnan(cap) else cap
                out[i] = max(0.0, total - busy.get(i, 0))
        return out

    def row_of(self, request: LaunchRequest) -> int | None:
        """The catalog row a launch asks for (its zone's, or the region's); None: not sold."""
        rows = self._rows.get((request.cloud, request.region, request.instance_type), [])
        if request.zone:
            rows = [i for i in rows if self.text["zone"][i] in ("", request.zone)]
        return rows[0] if rows else None


def spot_used(alive: Iterable[SimRun]) -> dict[TracePlace, int]:
    """Spot nodes running per trace place."""
    used: dict[TracePlace, int] = {}
    for run in alive:
        if run.request.market == "spot" and run.place is not None:
            used[run.place] = used.get(run.place, 0) + run.request.nodes
    return used


def sale_key(table: OfferTable) -> tuple[bytes, bytes]:
    """What a table of one `Sale` sells, as a key: only spot prices and free capacity
    change between two of its tables, so two with the same bits sell the same."""
    return table.numbers["price_spot"].tobytes(), table.numbers["capacity"].tobytes()
