"""What the sandbox sells and how much room each place has: the catalog as an index for
launch checks, and the nodes free per (cloud, region).

Plain functions of the offers table, the nodes in use and the configured capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pricing.userio.suggest import hint
from providers.base import LaunchRequest
from providers.errors import InvalidRequest
from providers.sandbox.records import NAME

if TYPE_CHECKING:
    from pricing.table import OfferTable

DEFAULT_CAPACITY = 4  # nodes per (cloud, region) unless configured
# (cloud, region, instance type) -> (zone, on-demand price, spot price) of each row
Index = dict[tuple[str, str, str], list[tuple[str, float, float]]]
Place = tuple[str, str]  # (cloud, region)


def catalog_index(table: OfferTable) -> Index:
    """The rows of `table` by (cloud, region, instance type)."""
    index: Index = {}
    columns = (
        table.text("cloud").tolist(),
        table.text("region").tolist(),
        table.text("instance_type").tolist(),
        table.text("zone").tolist(),
        table.numbers["price_on_demand"].tolist(),
        table.numbers["price_spot"].tolist(),
    )
    for cloud, region, itype, zone, on_demand, spot in zip(*columns, strict=True):
        index.setdefault((cloud, region, itype), []).append((zone, on_demand, spot))
    return index


def zone_to_report(request: LaunchRequest, index: Index) -> str:
    """The zone the instance of `request` reports (its own, else its first row's);
    InvalidRequest, with a did-you-mean, when the catalog does not sell the request."""
    where = f"{request.cloud}/{request.region}"
    rows = index.get((request.cloud, request.region, request.instance_type))
    if not rows:
        regions = {f"{c}/{r}" for c, r, _ in index}
        if where not in regions:
            raise InvalidRequest(NAME, f"no region {where}{hint(where, regions)}")
        types = {t for c, r, t in index if (c, r) == (request.cloud, request.region)}
        wanted = request.instance_type
        raise InvalidRequest(NAME, f"{wanted} not sold in {where}{hint(wanted, types)}")
    if request.zone:
        rows = [row for row in rows if row[0] in ("", request.zone)]
        if not rows:
            raise InvalidRequest(NAME, f"{request.instance_type} not sold in {request.zone}")
    price = 2 if request.market == "spot" else 1
    if all(math.isnan(row[price]) for row in rows):
        raise InvalidRequest(
            NAME, f"{request.instance_type} in {where} has no {request.market} price"
        )
    return request.zone or rows[0][0]


def limit_of(capacity: Mapping[Place, int] | int, cloud: str, region: str) -> int:
    """Nodes that may run at once in (cloud, region): `capacity` for every place, or its
    entry for this one (DEFAULT_CAPACITY when it has none)."""
    if isinstance(capacity, int):
        return capacity
    return capacity.get((cloud, region), DEFAULT_CAPACITY)


def free_per_region(
    table: OfferTable, used: Mapping[Place, int], limit: Callable[[str, str], int]
) -> tuple[list[Place], Any, Any]:
    """(places, each row's place index, free nodes per place): one pass per region of
    the catalog rather than per offer."""
    import numpy as np

    names = table.categories["cloud"], table.categories["region"]
    n_regions = max(len(names[1]), 1)
    pair = table.codes["cloud"].astype(np.int64) * n_regions + table.codes["region"]
    distinct, inverse = np.unique(pair, return_inverse=True)
    places = [
        (str(names[0][code // n_regions]), str(names[1][code % n_regions]))
        for code in distinct.tolist()
    ]
    free = np.array(
        [max(0, limit(*where) - used.get(where, 0)) for where in places], dtype=np.int64
    )
    return places, inverse, free


def spot_prices(table: OfferTable, crunched: set[str]):
    """The table's spot prices, missing (not sold) on the `crunched` clouds."""
    import numpy as np

    prices = table.numbers["price_spot"]
    if not crunched:
        return prices
    clouds = [i for i, name in enumerate(table.categories["cloud"]) if name in crunched]
    return np.where(np.isin(table.codes["cloud"], clouds), np.nan, prices)
