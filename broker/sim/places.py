"""Which offer rows a spot trace governs: zones, regions and GPU names matched up.

A trace place names a zone or a region and a GPU model or instance type; a catalog
row has a region, maybe a zone, an instance type and an accelerator. A row belongs
to the place that names its zone, else its region. Rows without a zone are copied
once per traced zone of their region, so the planner can pick a zone and the
provider can count capacity per zone, as the traces do.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from broker.sim.model import TracePlace

if TYPE_CHECKING:
    from pricing.table import OfferTable

_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d)[a-z]$")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


def region_of(cloud: str, location: str) -> str:
    """The region of a zone ("us-east-1a" -> "us-east-1", "us-central1-a" -> "us-central1");
    a region is returned as it is."""
    for pattern in (_AWS_ZONE, _GCP_ZONE):
        match = pattern.match(location)
        if match:
            return match.group(1)
    return location


def is_zone(cloud: str, location: str) -> bool:
    return region_of(cloud, location) != location


def expand_zones(table: OfferTable, places: list[TracePlace]) -> OfferTable:
    """`table` with each zoneless row of a region that has traced zones copied once per
    traced zone whose kind matches the row (rows of other regions stay as they are)."""
    import numpy as np

    from pricing.table import OfferTable

    cloud, region, zone = (table.text(n) for n in ("cloud", "region", "zone"))
    itype, acc = table.text("instance_type"), table.text("accelerator")
    zones: dict[tuple[str, str], list[TracePlace]] = {}
    for p in places:
        if is_zone(p.cloud, p.location):
            zones.setdefault((p.cloud, region_of(p.cloud, p.location)), []).append(p)
    rows: list[int] = []
    new_zone: list[str] = []
    for i in range(len(table)):
        traced = [p for p in zones.get((cloud[i], region[i]), []) if p.kind in (acc[i], itype[i])]
        if zone[i] or not traced:
            rows.append(i)
            new_zone.append(zone[i])
            continue
        for p in sorted(traced, key=lambda p: p.location):
            rows.append(i)
            new_zone.append(p.location)
    if len(rows) == len(table) and new_zone == list(zone):
        return table
    taken = table.take(np.array(rows, dtype=np.int64))
    categories, codes = dict(taken.categories), dict(taken.codes)
    uniques = sorted(set(new_zone))
    position = {z: k for k, z in enumerate(uniques)}
    categories["zone"] = np.array(uniques, dtype=object)
    codes["zone"] = np.array([position[z] for z in new_zone], dtype=np.int32)
    return OfferTable(dict(taken.numbers), codes, categories)


def place_of_rows(table: OfferTable, places: list[TracePlace]) -> list[TracePlace | None]:
    """For each row, the trace place that governs its spot market (None: untraced)."""
    by_key = {(p.cloud, p.location, p.kind): p for p in places}
    cloud, region, zone = (table.text(n) for n in ("cloud", "region", "zone"))
    itype, acc = table.text("instance_type"), table.text("accelerator")
    return [
        governing(by_key, cloud[i], zone[i], region[i], itype[i], acc[i]) for i in range(len(table))
    ]


def governing(
    by_key: dict[tuple[str, str, str], TracePlace],
    cloud: str,
    zone: str,
    region: str,
    instance_type: str,
    accelerator: str,
) -> TracePlace | None:
    """The trace place (by (cloud, location, kind)) that governs an offer: the one naming
    its zone, else its region; its instance type, else its GPU. None: untraced."""
    for location in (zone, region):
        for kind in (instance_type, accelerator):
            if location and kind and (cloud, location, kind) in by_key:
                return by_key[(cloud, location, kind)]
    return None
