"""The baseline that savings are measured against: what the same GPUs cost on demand.

For each hourly ledger line (compute or on-prem) of an attempt that held `count`
GPUs of model `gpu` per node on `nodes` nodes:

    baseline rate = nodes x the lowest on-demand price, among the offers in force,
                    of an instance with `count` x `gpu` in any region of the job's
                    first-choice cloud
    baseline      = baseline rate x (billed hours - hours lost to interruptions)
    savings       = baseline - what the line cost

The job's first-choice cloud is the first public cloud its manifest lists under
`placement.clouds`; when it lists none, the cloud of the job's first attempt (where
the planner put it first); when that was an on-prem pool, the cheapest public cloud.
Lost work is left out of the baseline because an on-demand instance would not have
been interrupted; the lost work's cost stays in the actual cost, so interruptions
lower the savings. A line whose GPUs no offer in force sells on demand in that
cloud has no baseline ("unpriced") and is left out of both sides.

The baseline uses the offers in force when the report runs; the actual cost uses
the price in force when each attempt launched (the ledger never changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from broker.state.model import multiply, to_decimal

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state.placed import PlacedOn
    from pricing.table import OfferTable

ONPREM = "onprem"


@dataclass(frozen=True, slots=True)
class Quote:
    """The cheapest on-demand offer for some GPUs in one cloud."""

    cloud: str
    region: str
    instance_type: str
    price_per_hour: Decimal  # USD, one node
    source: str
    as_of: str


class OnDemandPrices:
    """The cheapest on-demand offer per (cloud, GPU model, GPUs per node)."""

    def __init__(self, quotes: Mapping[tuple[str, str, float], Quote]) -> None:
        self._quotes = dict(quotes)

    @classmethod
    def from_offers(cls, table: OfferTable) -> OnDemandPrices:
        """From the offers in force (on-prem pools are not an on-demand alternative)."""
        import numpy as np

        price = table.numbers["price_on_demand"]
        rows = np.flatnonzero(np.isfinite(price) & (price > 0))
        cloud, gpu = table.text("cloud")[rows], table.text("accelerator")[rows]
        region, kind = table.text("region")[rows], table.text("instance_type")[rows]
        source, as_of = table.text("source")[rows], table.text("as_of")[rows]
        count, price = table.numbers["accelerator_count"][rows], price[rows]
        quotes: dict[tuple[str, str, float], Quote] = {}
        # Cheapest first, then a stable key, so that ties always give the same quote.
        order = sorted(range(len(rows)), key=lambda i: (price[i], cloud[i], region[i], kind[i]))
        for i in order:
            if cloud[i] == ONPREM or not gpu[i]:
                continue
            key = (str(cloud[i]), str(gpu[i]), float(count[i]))
            if key not in quotes:
                quotes[key] = Quote(
                    key[0], str(region[i]), str(kind[i]), to_decimal(float(price[i])),
                    str(source[i]), str(as_of[i]),
                )  # fmt: skip
        return cls(quotes)

    def cheapest(self, cloud: str | None, gpu: str, count: float) -> Quote | None:
        """The cheapest quote in `cloud` (None: in any public cloud)."""
        found = [
            quote
            for (c, g, n), quote in self._quotes.items()
            if g == gpu and n == float(count) and (cloud is None or c == cloud)
        ]
        return min(found, key=lambda q: (q.price_per_hour, q.cloud, q.region), default=None)


def first_choice_cloud(spec: JobSpec | None, first_attempt_cloud: str) -> str | None:
    """The job's first-choice public cloud (module docstring); None: any public cloud."""
    listed = spec.requirements.clouds if spec is not None else ()
    for cloud in listed:
        if cloud != ONPREM:
            return str(cloud)
    if first_attempt_cloud and first_attempt_cloud != ONPREM:
        return first_attempt_cloud
    return None


def baseline_rate(
    prices: OnDemandPrices, placed: PlacedOn, first_cloud: str | None
) -> Decimal | None:
    """USD per hour for all nodes of `placed`'s GPUs on demand; None when unknown."""
    if not placed.accelerator or not placed.accelerator_count:
        return None
    quote = prices.cheapest(first_cloud, placed.accelerator, placed.accelerator_count)
    if quote is None:
        return None
    return multiply(quote.price_per_hour, to_decimal(placed.nodes))
