"""What a user asks of the catalog (`OfferQuery`) and the answer (`OfferSelection`).

`pricing.query.OfferIndex.query` answers one; `broker offers` asks. They live apart
from the index, which the planner uses too: a plan asks no such query, and each
frozen dataclass costs ~1 ms to define (a cold `broker plan job.yaml`'s budget is
counted in milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

    from pricing.table import OfferTable

Market = Literal["any", "spot", "on-demand"]
SortKey = Literal["price", "price-per-gpu"]


@dataclass(frozen=True)
class OfferQuery:
    """What a user asks of the catalog. Counts are "at least" unless `exact`."""

    gpu: str | None = None
    gpu_count: float | None = None
    exact: bool = False
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()  # globs such as "us-*"
    countries: tuple[str, ...] = ()
    market: Market = "any"
    max_price: float | None = None  # USD/hour for the instance, in the chosen market
    min_gpu_memory: float | None = None  # GiB per GPU
    sort: SortKey = "price"
    limit: int | None = None


@dataclass(frozen=True)
class OfferSelection:
    """The answer to a query: chosen rows in order, with the price used for each."""

    offers: OfferTable  # the selected rows, sorted
    country: np.ndarray
    market: np.ndarray  # "spot" or "on-demand": the market `price` is for
    price: np.ndarray  # USD/hour for the instance
    price_per_gpu: np.ndarray

    def __len__(self) -> int:
        return len(self.price)

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts: every offers column plus country, market, price, price_per_gpu."""
        rows = self.offers.records()
        extra = zip(
            self.country.tolist(),
            self.market.tolist(),
            self.price.tolist(),
            self.price_per_gpu.tolist(),
            strict=True,
        )
        for row, (country, market, price, per_gpu) in zip(rows, extra, strict=True):
            row.update(country=country, market=market, price=price, price_per_gpu=per_gpu)
        return rows
