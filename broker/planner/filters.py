"""Step 1 of planning: the (offer, market) candidates that satisfy each Requirements.

Vectorised across a whole batch. The table is partitioned once by (GPU model,
GPU count, cloud, region), and within each partition its rows are kept in two
precomputed orders, one per market, by (interruption rate, price, row). So:
- location constraints (cloud, region, country) are decided once per partition,
  whatever the number of offers in it;
- the remaining constraints (vCPUs, memory, interconnect, capacity, a price in
  the market, max price) are masks over one flat array of (requirements, offer,
  market) candidates of the whole batch, which keep that order;
- the survivors come out already in cost groups (see Candidates) with no sort.
Each filter counts, per requirements, how many offers it removed and why, so
that `broker plan --explain` can show where the offers went. The filters run
in the order they appear below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.planner.cost import DEFAULT_INTERRUPTION_RATE
from broker.planner.decision import Rejection
from broker.spec import Amount, GpuAsk, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

MARKETS = (False, True)  # on-demand, spot


@dataclass(frozen=True)
class Candidates:
    """Feasible (requirements, offer, market) triples of a batch, in cost groups.

    A cost group is the candidates of one requirements that share every input of
    the cost model but the price: GPU alternative, place (cloud region), market
    and interruption rate. Within a group the expected hours are the same and the
    expected cost grows with the price, so candidates are sorted by (price, row)
    and a group can be priced once. Group g holds candidates
    `group_start[g]:group_start[g+1]`; the groups of requirements r are
    `req_groups[r]:req_groups[r+1]`.
    """

    row: np.ndarray  # per candidate: position in the offers table
    price_per_hour: np.ndarray  # per candidate: USD for all nodes, in its market
    group_start: np.ndarray  # per group (+1 sentinel): first candidate
    group_alternative: np.ndarray  # per group: index into the accelerators (0 for CPU-only)
    group_place: np.ndarray  # per group: place id (Partitions.places)
    group_spot: np.ndarray  # per group: bool
    group_rate: np.ndarray  # per group: interruptions per hour (0 on-demand)
    group_rate_from_catalog: np.ndarray  # per group: bool
    req_groups: np.ndarray  # len(reqs) + 1 offsets into the groups
    rejected: list[list[Rejection]]  # per requirements, in filter order
    considered: int  # offers in the table


class Partitions:
    """The table's rows grouped by (GPU model, GPU count, cloud, region), each group in
    a per-market order by (rate, price, row). Built once per batch."""

    def __init__(self, index: OfferIndex) -> None:
        import numpy as np

        self.index = index
        table = index.offers
        numbers = table.numbers
        gpu, count = table.codes["accelerator"], numbers["accelerator_count"]
        cloud, region = table.codes["cloud"], table.codes["region"]
        rows = np.arange(len(table))
        default = np.array(
            [DEFAULT_INTERRUPTION_RATE.get(c, 0.05) for c in table.categories["cloud"]]
        )
        catalog_rate = numbers["spot_interruption_rate"]
        self.from_catalog = ~np.isnan(catalog_rate)
        self.spot_rate = np.where(
            self.from_catalog, catalog_rate, default[cloud] if len(table) else 0.0
        )
        leading = (region, cloud, count, gpu)
        self.order = {
            False: np.lexsort((rows, numbers["price_on_demand"], *leading)),
            True: np.lexsort(
                (rows, numbers["price_spot"], self.spot_rate, self.from_catalog, *leading)
            ),
        }
        ordered = self.order[False]
        change = np.ones(len(table), dtype=bool)
        if len(table) > 1:
            keys = np.stack([gpu[ordered], count[ordered], cloud[ordered], region[ordered]])
            change[1:] = (keys[:, 1:] != keys[:, :-1]).any(axis=0)
        self.start = np.flatnonzero(change)
        self.size = np.diff(np.append(self.start, len(table)))
        first = ordered[self.start]
        self.cloud, self.region = cloud[first], region[first]
        self.country = index.country_codes()[first]
        gpu_names = table.categories["accelerator"]
        self._groups: dict[tuple[str, float], tuple[int, int]] = {}
        for i, (g, c) in enumerate(zip(gpu[first].tolist(), count[first].tolist(), strict=True)):
            begin, _ = self._groups.get((gpu_names[g], c), (i, i))
            self._groups[(gpu_names[g], c)] = (begin, i + 1)
        self._memo: dict[tuple, tuple[np.ndarray, list[int]]] = {}
        # Places: distinct (cloud, region, country) of the table, and each row's place id.
        n_regions = max(len(table.categories["region"]), 1)
        distinct, first_row, self.place_of_row = np.unique(
            cloud.astype(np.int64) * n_regions + region, return_index=True, return_inverse=True
        )
        countries = index.country_names()[index.country_codes()[first_row]].tolist()
        self.places = [
            (
                table.categories["cloud"][code // n_regions],
                table.categories["region"][code % n_regions],
                country,
            )
            for code, country in zip(distinct.tolist(), countries, strict=True)
        ]

    def size_of(self, req: Requirements) -> int:
        """Offers that pass the location constraints of `req` (before the other filters),
        times its markets: an upper bound of its candidates, for sizing batches."""
        asks = req.accelerators or (GpuAsk("", 0.0),)
        markets = 2 if req.spot == "prefer" else 1
        return markets * sum(len(self.rows(a.gpu, a.count, req, False)[0]) for a in asks)

    def rows(
        self,
        gpu: str,
        count: float,
        req: Requirements,
        spot: bool,
    ) -> tuple[np.ndarray, list[int]]:
        """Rows of (gpu, count) passing the location constraints of `req`, in `spot`'s
        order, and how many rows each of the four location filters removed. Memoised:
        a batch repeats the same few location constraints many times."""
        key = (gpu, count, req.clouds, req.exclude_clouds, req.regions, req.countries, spot)
        if key not in self._memo:
            self._memo[key] = self._rows(gpu, count, req, spot)
        return self._memo[key]

    def _rows(
        self,
        gpu: str,
        count: float,
        req: Requirements,
        spot: bool,
    ) -> tuple[np.ndarray, list[int]]:
        import numpy as np

        begin, end = self._groups.get((gpu, count), (0, 0))
        size = self.size[begin:end]
        ok = np.ones(end - begin, dtype=bool)
        dropped = []
        for wanted, column, codes, invert in (
            (req.clouds, "cloud", self.cloud, False),
            (req.exclude_clouds, "cloud", self.cloud, True),
            (req.regions, "region", self.region, False),
            (req.countries, "country", self.country, False),
        ):
            if not wanted:
                dropped.append(0)
                continue
            passes = self.index.category_mask(column, wanted)[codes[begin:end]]
            passes = ~passes if invert else passes
            dropped.append(int(size[ok & ~passes].sum()))
            ok &= passes
        chosen = np.flatnonzero(ok) + begin
        lengths = self.size[chosen]
        starts = np.repeat(self.start[chosen] - np.cumsum(lengths) + lengths, lengths)
        return self.order[spot][starts + np.arange(int(lengths.sum()))], dropped


def find_candidates(
    reqs: Sequence[Requirements], index: OfferIndex, partitions: Partitions | None = None
) -> Candidates:
    """Every satisfying (requirements, offer, market) triple, with rejected counts."""
    import numpy as np

    table = index.offers
    numbers = table.numbers
    total = len(table)
    partitions = partitions or Partitions(index)
    pairs = _Pairs(len(reqs))
    memo: dict = {}
    for r, req in enumerate(reqs):
        markets = {"never": (False,), "only": (True,), "prefer": MARKETS}[req.spot]
        asks = req.accelerators or (GpuAsk("", 0.0),)
        found, removed = 0, [0, 0, 0, 0]
        for alt, ask in enumerate(asks):
            for m, spot in enumerate(markets):
                rows, dropped = partitions.rows(ask.gpu, ask.count, req, spot)
                pairs.add(r, alt, spot, rows, counted=m == 0)
            found += len(rows) + sum(dropped)
            removed = [a + b for a, b in zip(removed, dropped, strict=True)]
        pairs.rejected[r].extend(_model_rejections(req.accelerators, index, total, found, memo))
        if any(removed):
            for count, reason in zip(removed, _location_reasons(req), strict=True):
                if count:
                    pairs.rejected[r].append(Rejection(reason, count))
    pairs.freeze()
    pairs.by_amount(
        numbers["vcpus"], reqs, lambda q: q.cpus, lambda q: f"vCPUs not {_amount_text(q.cpus)}"
    )
    pairs.by_amount(
        numbers["memory_gib"],
        reqs,
        lambda q: q.memory_gib,
        lambda q: f"memory not {_amount_text(q.memory_gib)} GiB",
    )
    pairs.by_interconnect(table, reqs)
    nodes = np.array([q.nodes for q in reqs], dtype=np.float64)
    capacity = numbers["capacity"][pairs.row]
    pairs.keep(
        np.isnan(capacity) | (capacity >= nodes[pairs.req]),
        lambda q: f"not enough free capacity for {q.nodes} node(s)",
        reqs,
    )
    pairs.compress()  # the market filters below read prices of the survivors only
    unit = np.where(
        pairs.spot, numbers["price_spot"][pairs.row], numbers["price_on_demand"][pairs.row]
    )
    for spot, label in ((False, "no on-demand price"), (True, "no spot price")):
        pairs.keep(
            ~(np.isnan(unit) & (pairs.spot == spot)), lambda q, t=label: t, reqs, every_market=True
        )
    price = unit * nodes[pairs.req]
    max_price = np.array(
        [np.inf if q.max_price_per_hour is None else q.max_price_per_hour for q in reqs]
    )
    with np.errstate(invalid="ignore"):  # NaN prices are retired already
        affordable = ~(price > max_price[pairs.req])
    pairs.keep(
        affordable,
        lambda q: f"over max_price_per_hour {q.max_price_per_hour:g} USD",
        reqs,
        every_market=True,
    )
    (price,) = pairs.compress(price)
    return _group(partitions, pairs, price, len(reqs), total)


def _model_rejections(
    asks: tuple[GpuAsk, ...], index: OfferIndex, total: int, found: int, memo: dict
) -> list[Rejection]:
    """Offers of another GPU model, or of the model with another count."""
    if not asks:
        return (
            [Rejection("has GPUs (the job asks for none)", total - found)] if total > found else []
        )
    if asks not in memo:
        wanted = " or ".join(f"{a.gpu}:{a.count:g}" for a in asks)
        of_model = sum(len(index.rows_of_gpu(g)) for g in {a.gpu for a in asks})
        memo[asks] = (wanted, of_model)
    wanted, of_model = memo[asks]
    out = []
    if total > of_model:
        out.append(Rejection(f"GPU model is not {wanted}", total - of_model))
    if of_model > found:
        out.append(Rejection(f"GPU count per node is not {wanted}", of_model - found))
    return out


def _location_reasons(req: Requirements) -> tuple[str, str, str, str]:
    return (
        f"cloud not in {', '.join(req.clouds)}",
        f"cloud excluded ({', '.join(req.exclude_clouds)})",
        f"region not in {', '.join(req.regions)}",
        f"country not in {', '.join(req.countries)} (data residency)",
    )


def _amount_text(amount: Amount | None) -> str:
    return "" if amount is None else f"{amount.value:g}{'+' if amount.at_least else ''}"


class _Pairs:
    """The batch's candidates as flat arrays, and what each filter removed.

    With `spot: prefer` an offer is a candidate twice (once per market); filters
    that judge the offer, not the market, count only its first copy (`counted`).
    """

    def __init__(self, n_reqs: int) -> None:
        self.rejected: list[list[Rejection]] = [[] for _ in range(n_reqs)]
        self._parts: list[tuple] = []

    def add(self, req: int, alt: int, spot: bool, rows: np.ndarray, counted: bool) -> None:
        self._parts.append((req, alt, spot, counted, rows))

    def freeze(self) -> None:
        import numpy as np

        lengths = [len(part[4]) for part in self._parts]
        self.req = np.repeat(np.array([p[0] for p in self._parts], dtype=np.int32), lengths)
        self.alternative = np.repeat(np.array([p[1] for p in self._parts], dtype=np.int16), lengths)
        self.spot = np.repeat(np.array([p[2] for p in self._parts], dtype=bool), lengths)
        self.counted = np.repeat(np.array([p[3] for p in self._parts], dtype=bool), lengths)
        self.row = (
            np.concatenate([p[4] for p in self._parts])
            if self._parts
            else np.zeros(0, dtype=np.int64)
        )
        self.alive = np.ones(len(self.row), dtype=bool)
        del self._parts

    def keep(
        self,
        mask: np.ndarray,
        reason: Callable[[Requirements], str],
        reqs: Sequence[Requirements],
        every_market: bool = False,
    ) -> None:
        """Retire the live candidates where `mask` is False, counting them per requirements.
        Arrays are compressed once, in `compress`, not after every filter."""
        import numpy as np

        dropped = self.alive & ~mask
        if not every_market:
            dropped &= self.counted
        if dropped.any():
            removed = np.bincount(self.req[dropped], minlength=len(reqs))
            for r in np.flatnonzero(removed).tolist():
                self.rejected[r].append(Rejection(reason(reqs[r]), int(removed[r])))
        self.alive &= mask

    def compress(self, *extra: np.ndarray) -> tuple[np.ndarray, ...]:
        """Drop retired candidates from every array (and from `extra` ones, returned)."""
        alive = self.alive
        for name in ("req", "alternative", "spot", "counted", "row"):
            setattr(self, name, getattr(self, name)[alive])
        self.alive = alive[alive]
        return tuple(array[alive] for array in extra)

    def by_amount(
        self, values: np.ndarray, reqs: Sequence[Requirements], amount_of, reason
    ) -> None:
        """Filter on "N" (exactly) or "N+" (at least) against a numeric column."""
        import numpy as np

        amounts = [amount_of(q) for q in reqs]
        if all(a is None for a in amounts):
            return
        target = np.array([a.value if a else np.nan for a in amounts])[self.req]
        at_least = np.array([a.at_least if a else True for a in amounts])[self.req]
        have = values[self.row]
        ok = np.isnan(target) | np.where(at_least, have >= target, have == target)
        self.keep(ok, reason, reqs)

    def by_interconnect(self, table, reqs: Sequence[Requirements]) -> None:
        import numpy as np

        wanted = sorted({q.interconnect for q in reqs if q.interconnect})
        if not wanted:
            return
        ids = {None: 0, **{w: i + 1 for i, w in enumerate(wanted)}}
        lookup = np.ones((len(ids), len(table.categories["interconnect"])), dtype=bool)
        for name, i in ids.items():
            if name:
                lookup[i] = [name in v.split("+") for v in table.categories["interconnect"]]
        req_id = np.array([ids[q.interconnect or None] for q in reqs], dtype=np.int64)
        ok = lookup[req_id[self.req], table.codes["interconnect"][self.row]]
        self.keep(ok, lambda q: f"no {q.interconnect} interconnect", reqs)


def _group(
    partitions: Partitions, pairs: _Pairs, price: np.ndarray, n: int, total: int
) -> Candidates:
    """Cut the (already ordered) candidates into cost groups (see Candidates)."""
    import numpy as np

    row, spot = pairs.row, pairs.spot
    place = partitions.place_of_row[row]
    from_catalog = spot & partitions.from_catalog[row]
    rate = np.where(spot, partitions.spot_rate[row], 0.0)
    change = np.ones(len(row), dtype=bool)
    if len(row) > 1:
        change[1:] = (
            (pairs.req[1:] != pairs.req[:-1])
            | (pairs.alternative[1:] != pairs.alternative[:-1])
            | (spot[1:] != spot[:-1])
            | (place[1:] != place[:-1])
            | (rate[1:] != rate[:-1])
            | (from_catalog[1:] != from_catalog[:-1])
        )
    first = np.flatnonzero(change)
    return Candidates(
        row=row,
        price_per_hour=price,
        group_start=np.append(first, len(row)),
        group_alternative=pairs.alternative[first],
        group_place=place[first],
        group_spot=spot[first],
        group_rate=rate[first],
        group_rate_from_catalog=from_catalog[first],
        req_groups=np.searchsorted(pairs.req[first], np.arange(n + 1)),
        rejected=pairs.rejected,
        considered=total,
    )
