"""Egress prices: what moving one GB out of a place costs, and where that figure comes from.

The sender's cloud bills egress. Within one cloud the price depends on how far
the data goes (same zone, same region, same continent, across continents);
leaving a cloud (to another cloud, on-prem or the internet) is billed at its
internet rate. Ingress is free on all three clouds. Within one region the
broker only moves data between instances and object storage (inputs,
checkpoints), which the clouds do not bill, so "same region" is free; traffic
between instances in different zones is not modelled. Rates are the first
published tier (list price); volume tiers are ignored, which overstates large
transfers slightly and never understates them.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path
from typing import NamedTuple

from pricing.regions import Place, continent_of_country

EGRESS_TABLE = Path(__file__).parent / "data" / "egress.csv"
SCOPES = ("same_zone", "same_region", "same_continent", "other_continent", "internet")


class EgressPrice(NamedTuple):
    """Price per GB for one move, with the rule that priced it."""

    price_per_gb: float
    scope: str
    source: str
    as_of: str


@cache
def _table() -> dict[tuple[str, str], EgressPrice]:
    with EGRESS_TABLE.open(newline="") as handle:
        return {
            (row["cloud"], row["scope"]): EgressPrice(
                float(row["price_per_gb"]), row["scope"], row["source"], row["as_of"]
            )
            for row in csv.DictReader(handle)
        }


def egress_scope(src: Place, dst: Place) -> str:
    """How far data travels from `src` to `dst`, as one of SCOPES."""
    if src.cloud != dst.cloud:
        return "internet"
    if src.region == dst.region:
        return "same_zone" if src.zone and src.zone == dst.zone else "same_region"
    src_continent = continent_of_country(src.resolved_country())
    dst_continent = continent_of_country(dst.resolved_country())
    if src_continent and src_continent == dst_continent:
        return "same_continent"
    return "other_continent"


def egress_price(src: Place, dst: Place) -> EgressPrice:
    """Price per GB to move data from `src` to `dst` (billed by the sender's cloud)."""
    scope = egress_scope(src, dst)
    try:
        return _table()[(src.cloud, scope)]
    except KeyError:
        raise ValueError(f"no egress price for cloud {src.cloud!r}") from None


def egress_cost(src: Place, dst: Place, size_gb: float) -> float:
    """USD to move `size_gb` from `src` to `dst`."""
    return egress_price(src, dst).price_per_gb * size_gb
