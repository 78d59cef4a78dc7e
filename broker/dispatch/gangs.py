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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

GANG_COLUMN = "max_gang_nodes"  # per offer: the most nodes one gang may have there


def gang_interruption_rate(rate: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Expected reclaims per hour of an N-node gang: any node's reclaim stops it all, and
    nodes are reclaimed independently, so N x the rate of one node."""
    return rate * nodes


def gang_limits(index: OfferIndex, provider: object) -> np.ndarray:
    """Per offer row, the most nodes one gang may have there: the provider's
    `max_gang_nodes` per distinct (cloud, region, instance type), 1 everywhere for a
    provider without `Gangs`."""
    import numpy as np

    from providers.capabilities import Gangs

    table = index.offers
    if not isinstance(provider, Gangs):
        return np.ones(len(table))
    codes = [table.codes[name] for name in ("cloud", "region", "instance_type")]
    names = [table.categories[name] for name in ("cloud", "region", "instance_type")]
    if not len(table):
        return np.zeros(0)
    triples, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    limits = np.array(
        [
            provider.max_gang_nodes(str(names[0][c]), str(names[1][r]), str(names[2][t]))
            for c, r, t in triples.tolist()
        ],
        dtype=np.float64,
    )
    return limits[inverse.reshape(-1)]


def with_gang_limits(index: OfferIndex, provider: object, nodes: Sequence[int]) -> OfferIndex:
    """`index` with the `max_gang_nodes` column of `provider`, when any of the jobs
    being planned (`nodes`: their node counts) is a gang; else `index` as it is (a
    single node goes wherever the offer is sold)."""
    if all(n <= 1 for n in nodes):
        return index
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    table = index.offers
    numbers = {**table.numbers, GANG_COLUMN: gang_limits(index, provider)}
    return OfferIndex(
        OfferTable(numbers, table.codes, table.categories), extra_countries=index.extra_countries
    )
