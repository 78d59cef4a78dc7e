"""Gangs (docs/distributed.md): where an N-node job may be placed, and what it risks.

A job of `nodes: N > 1` runs as one gang: N nodes in one gang domain, launched, ended
and migrated as a unit. Two rules follow, and every engine asks them here:

- **where**: an N-node placement is offered only where the provider's
  `Gangs.max_gang_nodes(cloud, region, instance_type)` is at least N; a provider
  without `Gangs` runs no gang (only N = 1). The limits travel with the offers, as the
  `max_gang_nodes` column (`with_gang_limits`), which the planner's gang filter reads;
  an index without the column (`broker plan` without a provider) is not limited.
- **risk**: a reclaim of any node interrupts the whole gang, so a spot gang's
  interruption rate is N times one node's (`gang_interruption_rate`).

`broker plan` has no provider: it limits on-prem gangs by their pools
(`with_pool_gang_limits`, the rule OnPremProvider applies) and leaves the clouds to
the provider that launches them (NaN: not limited here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from onprem.inventory import Pool
    from pricing.query import OfferIndex

Limit = Callable[[str, str, str], float]  # (cloud, region, instance type) -> most nodes

GANG_COLUMN = "max_gang_nodes"  # per offer: the most nodes one gang may have there


def gang_interruption_rate(rate: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Expected reclaims per hour of an N-node gang: any node's reclaim stops it all, and
    nodes are reclaimed independently, so N x the rate of one node."""
    return rate * nodes


def gang_limits(index: OfferIndex, limit: Limit) -> np.ndarray:
    """Per offer row, `limit` of its (cloud, region, instance type), asked once per
    distinct triple."""
    import numpy as np

    table = index.offers
    if not len(table):
        return np.zeros(0)
    columns = ("cloud", "region", "instance_type")
    codes = np.stack([table.codes[name] for name in columns], axis=1)
    names = [table.categories[name] for name in columns]
    triples, inverse = np.unique(codes, axis=0, return_inverse=True)
    limits = np.array(
        [
            limit(str(names[0][c]), str(names[1][r]), str(names[2][t]))
            for c, r, t in triples.tolist()
        ],
        dtype=np.float64,
    )
    return limits[inverse.reshape(-1)]


def provider_limit(provider: object) -> Limit:
    """The provider's `Gangs.max_gang_nodes`; 1 everywhere for a provider without Gangs."""
    from providers.capabilities import Gangs

    if isinstance(provider, Gangs):
        return provider.max_gang_nodes
    return lambda cloud, region, instance_type: 1


def with_gang_limits(index: OfferIndex, provider: object, nodes: Sequence[int]) -> OfferIndex:
    """`index` with the `max_gang_nodes` column of `provider`, when any of the jobs
    being planned (`nodes`: their node counts) is a gang; else `index` as it is (a
    single node goes wherever the offer is sold)."""
    if all(n <= 1 for n in nodes):
        return index  # the provider not asked (a Protocol check costs as much as a plan)
    return _with_limits(index, provider_limit(provider), nodes)


def with_pool_gang_limits(
    index: OfferIndex, pools: Iterable[Pool], nodes: Sequence[int]
) -> OfferIndex:
    """`index` with on-prem gangs limited to their pools' node counts, the clouds not
    limited (what `broker plan` knows without a provider)."""
    from onprem.shapes import pool_gang_nodes

    pools = list(pools)

    def limit(cloud: str, region: str, instance_type: str) -> float:
        if cloud != "onprem":
            return float("nan")
        return pool_gang_nodes(pools, region, instance_type)

    return _with_limits(index, limit, nodes)


def _with_limits(index: OfferIndex, limit: Limit, nodes: Sequence[int]) -> OfferIndex:
    if all(n <= 1 for n in nodes):
        return index
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    table = index.offers
    numbers = {**table.numbers, GANG_COLUMN: gang_limits(index, limit)}
    return OfferIndex(
        OfferTable(numbers, table.codes, table.categories), extra_countries=index.extra_countries
    )
