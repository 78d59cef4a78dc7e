"""Vectorised queries over an offers table.

`OfferIndex` is built once per catalog from its `OfferTable`: numpy arrays of
the numbers, integer codes of the text columns, and the rows of each GPU
model, so that one query costs a few array operations on the rows of the asked
GPU instead of a scan of string columns. Every filter is a plain function of
the query, which keeps `broker offers` and the planner on one path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from pricing.gpus import canonical_gpu
from pricing.regions import REGION_COUNTRY
from pricing.schema import CLOUDS
from pricing.table import OfferTable
from pricing.userio.suggest import hint

if TYPE_CHECKING:
    import numpy as np

    from pricing.offer_query import Market, OfferQuery, OfferSelection


class QueryError(ValueError):
    """A query names something the catalog does not know (with a did-you-mean)."""


@dataclass(eq=False)
class OfferIndex:
    """Arrays over one offers table, built once, queried many times."""

    offers: OfferTable
    extra_countries: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        table = self.offers
        self._cloud_codes, self._clouds = table.codes["cloud"], table.categories["cloud"]
        self._region_codes, self._regions = table.codes["region"], table.categories["region"]
        self._gpus = table.categories["accelerator"]
        self._count = table.numbers["accelerator_count"]
        self._gpu_mem = table.numbers["accelerator_memory_gib"]
        self._od = table.numbers["price_on_demand"]
        self._spot = table.numbers["price_spot"]
        layout = _layout(table, self.extra_countries)
        self._country_names, self._country_codes = layout.country_names, layout.country_codes
        self._rows_of_gpu, self._all_rows = layout.rows_of_gpu, layout.all_rows
        self._masks = layout.masks

    # Building blocks for other vectorised consumers (the planner).
    def rows_of_gpu(self, gpu: str) -> np.ndarray:
        """Positions of the offers of one GPU model ("" = CPU-only offers)."""
        return self._rows_of_gpu.get(gpu, self._all_rows[:0])

    def category_mask(self, column: str, wanted: tuple[str, ...]) -> np.ndarray:
        """Per-code boolean of `column` (cloud, region: globs, or country) passing `wanted`."""
        return self._category_mask(column, wanted)

    def country_codes(self) -> np.ndarray:
        return self._country_codes

    def country_names(self) -> np.ndarray:
        return self._country_names

    # Names the catalog knows, for validation and hints.
    def gpus(self) -> list[str]:
        return [g for g in self._gpus if g]

    def regions(self) -> list[str]:
        return list(self._regions)

    def countries(self) -> list[str]:
        return [c for c in self._country_names if c]

    def validate(self, query: OfferQuery) -> OfferQuery:
        """Canonicalise names; raise QueryError for unknown GPU, cloud or region."""
        gpu = query.gpu
        if gpu is not None:
            try:
                gpu = canonical_gpu(gpu, known=self.gpus())
            except ValueError as exc:
                raise QueryError(str(exc)) from None
        for cloud in query.clouds:
            if cloud not in CLOUDS:
                raise QueryError(f"unknown cloud {cloud!r}{hint(cloud, CLOUDS)}")
        for pattern in query.regions:
            if not self._category_mask("region", (pattern,)).any():
                raise QueryError(
                    f"no region in the catalog matches {pattern!r}{hint(pattern, self.regions())}"
                )
        countries = tuple(c.upper() for c in query.countries)
        for country in countries:
            if country not in self.countries():
                raise QueryError(
                    f"no offer in the catalog is in country {country!r}"
                    f"{hint(country, self.countries())}"
                )
        return replace(query, gpu=gpu, countries=countries)

    def rows(self, query: OfferQuery) -> np.ndarray:
        """Positions of the offers that satisfy `query` (validated), unsorted."""
        import numpy as np

        rows = self._rows_of_gpu.get(query.gpu, self._all_rows[:0]) if query.gpu else self._all_rows
        mask = np.ones(len(rows), dtype=bool)
        if query.gpu_count is not None:
            count = self._count[rows]
            mask &= (count == query.gpu_count) if query.exact else (count >= query.gpu_count)
        if query.clouds:
            mask &= self._category_mask("cloud", query.clouds)[self._cloud_codes[rows]]
        if query.regions:
            mask &= self._category_mask("region", query.regions)[self._region_codes[rows]]
        if query.countries:
            mask &= self._category_mask("country", query.countries)[self._country_codes[rows]]
        if query.min_gpu_memory is not None:
            mask &= self._gpu_mem[rows] >= query.min_gpu_memory
        price = self.price(rows, query.market)
        mask &= ~np.isnan(price)
        if query.max_price is not None:
            mask &= price <= query.max_price
        return rows[mask]

    def _category_mask(self, column: str, wanted: tuple[str, ...]) -> np.ndarray:
        """Boolean per category code of `column`: does that value pass the filter?"""
        import numpy as np

        key = (column, wanted)
        if key not in self._masks:
            categories = {
                "cloud": self._clouds,
                "region": self._regions,
                "country": self._country_names,
            }[column]
            if column == "region":
                keep = [any(fnmatchcase(r, p) for p in wanted) for r in categories]
            else:
                keep = [c in wanted for c in categories]
            self._masks[key] = np.array(keep, dtype=bool)
        return self._masks[key]

    def price(self, rows: np.ndarray, market: Market) -> np.ndarray:
        """Hourly price of each row in `market` ("any": the cheaper known one)."""
        import numpy as np

        if market == "spot":
            return self._spot[rows]
        if market == "on-demand":
            return self._od[rows]
        return np.fmin(self._od[rows], self._spot[rows])

    def query(self, query: OfferQuery) -> OfferSelection:
        """Matching offers with `price`, `market` and `price_per_gpu`, sorted, limited."""
        import numpy as np

        from pricing.offer_query import OfferSelection

        query = self.validate(query)
        rows = self.rows(query)
        price = self.price(rows, query.market)
        if query.market == "any":
            market = np.where(self._spot[rows] == price, "spot", "on-demand")
        else:
            market = np.full(len(rows), query.market)
        count = self._count[rows]
        per_gpu = np.divide(price, count, out=np.full(len(rows), np.nan), where=count > 0)
        key = per_gpu if query.sort == "price-per-gpu" else price
        # Stable ordering: key, then price, then table position.
        order = np.lexsort((rows, price, np.nan_to_num(key, nan=np.inf)))
        if query.limit is not None:
            order = order[: query.limit]
        picked = rows[order]
        return OfferSelection(
            offers=self.offers.take(picked),
            country=self._country_names[self._country_codes[picked]],
            market=market[order],
            price=price[order],
            price_per_gpu=per_gpu[order],
        )


@dataclass(frozen=True)
class _Layout:
    """What an index derives from a table's text columns alone (countries, each GPU's
    rows, the filters' per-category masks): the same for every table sharing them."""

    country_names: np.ndarray
    country_codes: np.ndarray
    rows_of_gpu: dict[str, np.ndarray]
    all_rows: np.ndarray
    masks: dict[tuple, np.ndarray]  # per-category masks, cached per filter


_LAYOUTS_KEPT = 8
_LAID_OUT = ("cloud", "region", "accelerator")  # the text columns a layout reads
# (categories, those columns' codes as bytes, extra countries, layout), newest last: the
# tables a planner pass makes from one another (spot closed, learned rates, pools, the
# rows of cooling places) share their categories and mostly their codes, so their
# layout is derived once
_layouts: list[tuple[Mapping, tuple[bytes, ...], dict, _Layout]] = []


def _layout(table: OfferTable, extra_countries: dict[tuple[str, str], str]) -> _Layout:
    """The layout of `table`: one made for a table with the same categories (the same
    object), the same codes in its laid-out columns and the same extra countries, else
    a new one."""
    codes = tuple(table.codes[n].tobytes() + table.codes[n].dtype.str.encode() for n in _LAID_OUT)
    for categories, known, extra, layout in reversed(_layouts):
        if categories is table.categories and known == codes and extra == extra_countries:
            return layout
    layout = _new_layout(table, extra_countries)
    _layouts.append((table.categories, codes, dict(extra_countries), layout))
    del _layouts[:-_LAYOUTS_KEPT]
    return layout


def _new_layout(table: OfferTable, extra_countries: dict[tuple[str, str], str]) -> _Layout:
    import numpy as np

    clouds, regions = table.categories["cloud"], table.categories["region"]
    gpu_codes, gpus = table.codes["accelerator"], table.categories["accelerator"]
    # Country per (cloud, region) pair, looked up once per distinct pair.
    countries = extra_countries | REGION_COUNTRY
    n_regions = max(len(regions), 1)
    pair = table.codes["cloud"].astype(np.int64) * n_regions + table.codes["region"]
    distinct, inverse = np.unique(pair, return_inverse=True)
    names = [
        countries.get((clouds[p // n_regions], regions[p % n_regions]), "")
        for p in distinct.tolist()
    ]
    country_names = np.array(sorted(set(names)) or [""], dtype=object)
    name_code = {name: i for i, name in enumerate(country_names)}
    country_codes = np.array([name_code[n] for n in names], np.int32)[inverse]
    order = np.argsort(gpu_codes, kind="stable")
    bounds = np.searchsorted(gpu_codes[order], np.arange(len(gpus) + 1))
    rows_of_gpu = {name: order[bounds[i] : bounds[i + 1]] for i, name in enumerate(gpus)}
    return _Layout(country_names, country_codes, rows_of_gpu, np.arange(len(table)), {})
