"""The offers table laid out for the filters (`Partitions`), built once per batch.

The rows are partitioned by (GPU model, GPU count, cloud, region). Each market has
its own order of the rows, by partition and then (interruption rate, price, row),
and its own copy of the columns the filters read, laid out in that order (on demand,
then spot): the rows of a partition are then a run of consecutive positions, and
the rows passing a location constraint are a few runs, read in memory order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.dispatch.gangs import GANG_COLUMN
from broker.planner.cost import DEFAULT_INTERRUPTION_RATE

if TYPE_CHECKING:
    import numpy as np

    from broker.spec import Requirements
    from pricing.query import OfferIndex

# The location filters, in the order of Requirements (clouds, exclude_clouds, regions,
# countries): the column each one reads, and whether it excludes what it names.
LOCATION_FILTERS = (("cloud", False), ("cloud", True), ("region", False), ("country", False))


class Partitions:
    """The table's rows grouped by (GPU model, GPU count, cloud, region), each group in
    a per-market order by (rate, price, row), and laid out per market (see the module
    docstring). Built once per batch."""

    def __init__(self, index: OfferIndex) -> None:
        import numpy as np

        self.index = index
        table = index.offers
        numbers = table.numbers
        n = len(table)
        gpu, cloud, region = (table.codes[c] for c in ("accelerator", "cloud", "region"))
        self.from_catalog, self.spot_rate = _spot_rates(index)
        # One integer per partition, in (GPU, count, cloud, region) order, so that each
        # market's order is one sort of two to four keys (stable: ties keep the row order).
        counts, count = np.unique(numbers["accelerator_count"], return_inverse=True)
        key = gpu.astype(np.int64) * len(counts) + count.reshape(-1)
        key = key * len(table.categories["cloud"]) + cloud
        key = key * len(table.categories["region"]) + region
        self._key = key
        self.order = {
            False: np.lexsort((numbers["price_on_demand"], key)),
            True: self._spot_order(index, self.spot_rate),
        }
        ordered = self.order[False]
        change = np.ones(n, dtype=bool)
        change[1:] = key[ordered][1:] != key[ordered][:-1]
        self.start = np.flatnonzero(change)
        self.size = np.diff(np.append(self.start, n))
        first = ordered[self.start]
        self.cloud, self.region = cloud[first], region[first]
        self.country = index.country_codes()[first]
        # Each market's rows laid out in its order, on demand then spot, with the columns
        # the offer filters read: a slice's candidates are runs of consecutive positions
        # in this layout, so the filters read memory in order.
        spot_order = self.order[True]
        self.row_at = np.concatenate([ordered, spot_order])
        self.at = {name: numbers[name][self.row_at] for name in ("vcpus", "memory_gib", "capacity")}
        self.at["interconnect"] = table.codes["interconnect"][self.row_at]
        if GANG_COLUMN in numbers:  # the gang limits of the provider (broker.dispatch.gangs)
            self.at["gang"] = numbers[GANG_COLUMN][self.row_at]
        onprem = np.asarray(table.categories["cloud"]) == "onprem"
        self.at["onprem"] = onprem[cloud[self.row_at]] if n else np.zeros(0, dtype=bool)
        self.at["price"] = np.concatenate(
            [numbers["price_on_demand"][ordered], numbers["price_spot"][spot_order]]
        )
        # The cost group (see Candidates) of each position: on demand, its partition; on
        # spot, its run of equal (rate, whether from the catalog) in its partition.
        self._change = change
        runs = self._runs = self._spot_runs(self.spot_rate)
        self.group_at = np.concatenate([np.cumsum(change), n + np.cumsum(runs)])
        self.has_capacity = bool((~np.isnan(numbers["capacity"])).any())
        # The partitions of each (GPU, count): a range of partition numbers.
        gpu_names = table.categories["accelerator"]
        self._ranges: dict[tuple[str, float], tuple[int, int]] = {}
        pairs = zip(gpu[first].tolist(), counts[count.reshape(-1)[first]].tolist(), strict=True)
        for i, (g, c) in enumerate(pairs):
            begin, _ = self._ranges.get((gpu_names[g], c), (i, i))
            self._ranges[(gpu_names[g], c)] = (begin, i + 1)
        self._located: dict[tuple, np.ndarray] = {}  # location -> stage per partition
        self._memo: dict[tuple, tuple[np.ndarray, list[int]]] = {}
        # Places: distinct (cloud, region, country) of the table, and each row's place id.
        n_regions = max(len(table.categories["region"]), 1)
        pair = self.cloud.astype(np.int64) * n_regions + self.region
        distinct, first_partition, place = np.unique(pair, return_index=True, return_inverse=True)
        self.place_of_row = np.empty(n, dtype=np.int64)
        self.place_of_row[ordered] = np.repeat(place.reshape(-1), self.size)
        countries = index.country_names()[self.country[first_partition]].tolist()
        self.places = [
            (
                table.categories["cloud"][code // n_regions],
                table.categories["region"][code % n_regions],
                country,
            )
            for code, country in zip(distinct.tolist(), countries, strict=True)
        ]

    def rerated(self, index: OfferIndex) -> Partitions | None:
        """This layout over `index`, whose table must differ from this one's in its
        interruption rates alone (not checked here: broker.sim.plans keys by the rest):
        None unless its rates keep the spot order and its runs of equal rates, when every
        position, cost group and place is the same and only `spot_rate` differs."""
        import numpy as np

        from_catalog, spot_rate = _spot_rates(index)
        if not np.array_equal(from_catalog, self.from_catalog):
            return None
        if not np.array_equal(self._spot_order(index, spot_rate), self.order[True]):
            return None
        if not np.array_equal(self._spot_runs(spot_rate), self._runs):
            return None
        made = object.__new__(Partitions)  # a shallow copy; the memos (of locations) shared
        made.__dict__.update(self.__dict__, index=index, spot_rate=spot_rate)
        return made

    def _spot_order(self, index: OfferIndex, spot_rate: np.ndarray) -> np.ndarray:
        """The spot market's order: by partition, then (whether the rate is the catalog's,
        rate, price, row)."""
        import numpy as np

        price = index.offers.numbers["price_spot"]
        return np.lexsort((price, spot_rate, self.from_catalog, self._key))

    def _spot_runs(self, spot_rate: np.ndarray) -> np.ndarray:
        """Where a spot cost group starts, in the spot order: a partition's start, or a
        change of rate or of whether it is the catalog's."""
        runs = self._change.copy()  # the partitions start at the same places in both orders
        order = self.order[True]
        rate, known = spot_rate[order], self.from_catalog[order]
        runs[1:] |= (rate[1:] != rate[:-1]) | (known[1:] != known[:-1])
        return runs

    def rows(
        self,
        gpu: str,
        count: float,
        req: Requirements,
        spot: bool,
    ) -> tuple[np.ndarray, list[int]]:
        """Positions (in the layout) of the rows of (gpu, count) passing the location
        constraints of `req` in `spot`'s market, and how many rows each of the four
        location filters removed. Memoised: a batch repeats the same few location
        constraints many times."""
        location = (req.clouds, req.exclude_clouds, req.regions, req.countries)
        key = (gpu, count, location, spot)
        if key not in self._memo:
            if spot:  # the partitions are at the same places in both markets' layouts
                positions, dropped = self.rows(gpu, count, req, False)
                self._memo[key] = (positions + len(self.spot_rate), dropped)
            else:
                self._memo[key] = self._rows(gpu, count, location)
        return self._memo[key]

    def _rows(
        self, gpu: str, count: float, location: tuple[tuple[str, ...], ...]
    ) -> tuple[np.ndarray, list[int]]:
        import numpy as np

        begin, end = self._ranges.get((gpu, count), (0, 0))
        stage = self._stages(location)[begin:end]
        size = self.size[begin:end]
        dropped = np.bincount(stage, weights=size, minlength=5)[1:].astype(int).tolist()
        chosen = np.flatnonzero(stage == 0) + begin
        lengths = self.size[chosen]
        starts = np.repeat(self.start[chosen] - np.cumsum(lengths) + lengths, lengths)
        return starts + np.arange(int(lengths.sum())), dropped

    def _stages(self, location: tuple[tuple[str, ...], ...]) -> np.ndarray:
        """Per partition, the first of the four location filters that removes it (1-4),
        or 0 when it passes them all."""
        import numpy as np

        if location not in self._located:
            codes = {"cloud": self.cloud, "region": self.region, "country": self.country}
            stage = np.zeros(len(self.start), dtype=np.int64)
            filters = zip(location, LOCATION_FILTERS, strict=True)
            for k, (wanted, (column, excludes)) in enumerate(filters, start=1):
                if wanted:
                    passes = self.index.category_mask(column, wanted)[codes[column]]
                    stage[(stage == 0) & (passes == excludes)] = k
            self._located[location] = stage
        return self._located[location]


def _spot_rates(index: OfferIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether the catalog (or a learned rate) gives its interruption rate, and
    the rate (the cloud's default where not)."""
    import numpy as np

    table = index.offers
    catalog_rate = table.numbers["spot_interruption_rate"]
    from_catalog = ~np.isnan(catalog_rate)
    if from_catalog.all():  # every rate known (learned ones included): no default needed
        return from_catalog, catalog_rate.copy()
    default = np.array([DEFAULT_INTERRUPTION_RATE.get(c, 0.05) for c in table.categories["cloud"]])
    cloud = table.codes["cloud"]
    return from_catalog, np.where(from_catalog, catalog_rate, default[cloud] if len(table) else 0.0)
