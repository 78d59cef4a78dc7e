"""Step 1 of planning: the offer x market pairs that satisfy each Requirements.

Vectorised across a whole batch: every (requirements, offer) pair of the batch
sits in one set of numpy arrays, and each constraint is one masked pass over
all of them, whatever the number of jobs. Per-requirements parameters (allowed
clouds, region globs, vCPUs, ...) are encoded as small lookup tables indexed by
(requirements id, category code). Each filter counts, per requirements, how
many candidates it removed and why, so that `broker plan --explain` can show
where the offers went. Filters run in a fixed, documented order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.planner.decision import Rejection
from broker.spec import Amount, GpuAsk, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex


@dataclass(frozen=True)
class Candidates:
    """Feasible (requirements, offer, market) triples of a batch, grouped by requirements.

    Arrays are aligned; the triples of requirements `r` are `start[r]:start[r+1]`.
    """

    req: np.ndarray  # requirements id (position in the batch's distinct list)
    alternative: np.ndarray  # index into that requirements' accelerators (0 for CPU-only)
    row: np.ndarray  # position in the offers table
    spot: np.ndarray  # bool: True = spot, False = on-demand
    price_per_hour: np.ndarray  # USD for all nodes, in that market
    start: np.ndarray  # len(reqs) + 1 offsets
    rejected: list[list[Rejection]]  # per requirements, in filter order
    considered: int  # offers in the table


def find_candidates(
    reqs: Sequence[Requirements], index: OfferIndex, partitions: Partitions | None = None
) -> Candidates:
    """Every satisfying (requirements, offer, market) triple, with rejected counts.

    Location constraints (cloud, region, country) are decided per partition of
    the table (one GPU model and count in one cloud region), so their cost does
    not grow with the number of offers; the rest are vectorised over pairs.
    """
    import numpy as np

    table = index.offers
    numbers, codes = table.numbers, table.codes
    total = len(table)
    partitions = partitions or Partitions(index)
    rejected: list[list[Rejection]] = [[] for _ in reqs]
    parts_req, parts_alt, parts_row = [], [], []
    for r, req in enumerate(reqs):
        asks = req.accelerators or (GpuAsk("", 0.0),)
        found, removed = 0, [0, 0, 0, 0]
        for alt, ask in enumerate(asks):
            rows, dropped = partitions.rows(ask.gpu, ask.count, req)
            found += len(rows) + sum(dropped)
            removed = [a + b for a, b in zip(removed, dropped, strict=True)]
            parts_row.append(rows)
            parts_alt.append(np.full(len(rows), alt, dtype=np.int64))
            parts_req.append(np.full(len(rows), r, dtype=np.int64))
        if req.accelerators:
            wanted = " or ".join(f"{a.gpu}:{a.count:g}" for a in req.accelerators)
            of_model = sum(len(index.rows_of_gpu(g)) for g in {a.gpu for a in req.accelerators})
            if total > of_model:
                rejected[r].append(Rejection(f"GPU model is not {wanted}", total - of_model))
            if of_model > found:
                rejected[r].append(
                    Rejection(f"GPU count per node is not {wanted}", of_model - found)
                )
        elif total > found:
            rejected[r].append(Rejection("has GPUs (the job asks for none)", total - found))
        for count, reason in zip(removed, _location_reasons(req), strict=True):
            if count:
                rejected[r].append(Rejection(reason, count))
    empty = np.zeros(0, dtype=np.int64)
    pairs = _Pairs(
        np.concatenate(parts_req) if parts_req else empty,
        np.concatenate(parts_alt) if parts_alt else empty,
        np.concatenate(parts_row) if parts_row else empty,
        rejected,
    )
    n = len(reqs)
    pairs.by_amount(
        numbers["vcpus"], reqs, lambda q: q.cpus, lambda q: f"vCPUs not {_amount_text(q.cpus)}"
    )
    pairs.by_amount(
        numbers["memory_gib"],
        reqs,
        lambda q: q.memory_gib,
        lambda q: f"memory not {_amount_text(q.memory_gib)} GiB",
    )
    pairs.by_category(
        index,
        "interconnect",
        codes["interconnect"],
        reqs,
        lambda q: (q.interconnect,) if q.interconnect else (),
        lambda wanted, value: wanted[0] in value.split("+"),
        lambda q: f"no {q.interconnect} interconnect",
    )
    nodes = np.array([q.nodes for q in reqs], dtype=np.float64)
    capacity = numbers["capacity"][pairs.row]
    pairs.keep(
        np.isnan(capacity) | (capacity >= nodes[pairs.req]),
        lambda q: f"not enough free capacity for {q.nodes} node(s)",
        reqs,
    )
    return _split_markets(reqs, index, pairs, nodes, n, total)


def _location_reasons(req: Requirements) -> tuple[str, str, str, str]:
    return (
        f"cloud not in {', '.join(req.clouds)}",
        f"cloud excluded ({', '.join(req.exclude_clouds)})",
        f"region not in {', '.join(req.regions)}",
        f"country not in {', '.join(req.countries)} (data residency)",
    )


class Partitions:
    """The table's rows grouped by (GPU model, GPU count, cloud, region), built once
    per batch, so that location filters test each group once instead of each row."""

    def __init__(self, index: OfferIndex) -> None:
        import numpy as np

        self.index = index
        table = index.offers
        gpu, count = table.codes["accelerator"], table.numbers["accelerator_count"]
        cloud, region = table.codes["cloud"], table.codes["region"]
        self.order = np.lexsort((region, cloud, count, gpu))
        keys = (
            np.stack([gpu[self.order], count[self.order], cloud[self.order], region[self.order]])
            if len(table)
            else np.zeros((4, 0))
        )
        change = np.ones(len(table), dtype=bool)
        if len(table) > 1:
            change[1:] = (keys[:, 1:] != keys[:, :-1]).any(axis=0)
        self.start = np.flatnonzero(change)
        self.stop = np.append(self.start[1:], len(table))
        first = self.order[self.start]
        self.cloud, self.region = cloud[first], region[first]
        self.country = index.country_codes()[first]
        self.size = self.stop - self.start
        # Partitions of one (GPU, count): a contiguous range of the partition arrays.
        gpu_names = table.categories["accelerator"]
        self._groups: dict[tuple[str, float], tuple[int, int]] = {}
        for i, (g, c) in enumerate(zip(gpu[first].tolist(), count[first].tolist(), strict=True)):
            key = (gpu_names[g], c)
            begin, _ = self._groups.get(key, (i, i))
            self._groups[key] = (begin, i + 1)
        self._memo: dict[tuple, tuple[np.ndarray, list[int]]] = {}

    def rows(self, gpu: str, count: float, req: Requirements) -> tuple[np.ndarray, list[int]]:
        """Rows of (gpu, count) that pass the location constraints of `req`, and how many
        rows each of the four location filters removed (in their order). Memoised: a
        batch repeats the same few location constraints many times."""
        key = (gpu, count, req.clouds, req.exclude_clouds, req.regions, req.countries)
        if key not in self._memo:
            self._memo[key] = self._rows(gpu, count, req)
        return self._memo[key]

    def _rows(self, gpu: str, count: float, req: Requirements) -> tuple[np.ndarray, list[int]]:
        import numpy as np

        begin, end = self._groups.get((gpu, count), (0, 0))
        size = self.size[begin:end]
        ok = np.ones(end - begin, dtype=bool)
        dropped = []
        index = self.index
        for wanted, column, codes, invert in (
            (req.clouds, "cloud", self.cloud, False),
            (req.exclude_clouds, "cloud", self.cloud, True),
            (req.regions, "region", self.region, False),
            (req.countries, "country", self.country, False),
        ):
            if not wanted:
                dropped.append(0)
                continue
            passes = index.category_mask(column, wanted)[codes[begin:end]]
            if invert:
                passes = ~passes
            fails = ok & ~passes
            dropped.append(int(size[fails].sum()))
            ok &= passes
        chosen = np.flatnonzero(ok) + begin
        if len(chosen) == end - begin:
            rows = self.order[
                self.start[begin] if end > begin else 0 : self.stop[end - 1] if end > begin else 0
            ]
        else:
            lengths = self.size[chosen]
            starts = np.repeat(self.start[chosen] - np.cumsum(lengths) + lengths, lengths)
            rows = self.order[starts + np.arange(int(lengths.sum()))]
        return rows, dropped


class _Pairs:
    """Surviving (requirements, alternative, row) pairs and the counts of what went."""

    def __init__(self, req, alternative, row, rejected: list[list[Rejection]]) -> None:
        self.req, self.alternative, self.row = req, alternative, row
        self.rejected = rejected

    def keep(
        self, mask: np.ndarray, reason: Callable[[Requirements], str], reqs: Sequence[Requirements]
    ) -> None:
        import numpy as np

        if mask.all():
            return
        removed = np.bincount(self.req[~mask], minlength=len(reqs))
        for r in np.flatnonzero(removed).tolist():
            self.rejected[r].append(Rejection(reason(reqs[r]), int(removed[r])))
        self.req, self.alternative, self.row = (
            self.req[mask],
            self.alternative[mask],
            self.row[mask],
        )

    def by_category(
        self,
        index: OfferIndex,
        column: str,
        row_codes: np.ndarray,
        reqs: Sequence[Requirements],
        wanted_of,
        passes,
        reason,
    ) -> None:
        """Filter on a text column: a table of pass/fail per (distinct wanted, category)."""
        import numpy as np

        wanted = [wanted_of(q) for q in reqs]
        if not any(wanted):
            return
        categories = (
            index.country_names() if column == "country" else index.offers.categories[column]
        )
        ids: dict[tuple, int] = {(): 0}
        for value in wanted:
            ids.setdefault(value, len(ids))
        lookup = np.ones((len(ids), len(categories)), dtype=bool)
        for value, i in ids.items():
            if value:
                lookup[i] = [passes(value, c) for c in categories]
        req_id = np.array([ids[value] for value in wanted], dtype=np.int64)
        self.keep(lookup[req_id[self.req], row_codes[self.row]], reason, reqs)

    def by_amount(
        self, values: np.ndarray, reqs: Sequence[Requirements], amount_of, reason
    ) -> None:
        """Filter on "N" (exactly) or "N+" (at least) against a numeric column."""
        import numpy as np

        amounts = [amount_of(q) for q in reqs]
        if not any(a is not None for a in amounts):
            return
        target = np.array([a.value if a else np.nan for a in amounts])
        at_least = np.array([a.at_least if a else True for a in amounts])
        want, least = target[self.req], at_least[self.req]
        have = values[self.row]
        with np.errstate(invalid="ignore"):
            ok = np.isnan(want) | np.where(least, have >= want, have == want)
        self.keep(ok, reason, reqs)


def _amount_text(amount: Amount | None) -> str:
    return "" if amount is None else f"{amount.value:g}{'+' if amount.at_least else ''}"


def _split_markets(
    reqs: Sequence[Requirements],
    index: OfferIndex,
    pairs: _Pairs,
    nodes: np.ndarray,
    n: int,
    total: int,
) -> Candidates:
    """One candidate per allowed market with a price, then the max-price filter,
    then grouped by requirements (stable, on-demand before spot within a group)."""
    import numpy as np

    numbers = index.offers.numbers
    allow = {
        False: np.array([q.spot != "only" for q in reqs]),
        True: np.array([q.spot != "never" for q in reqs]),
    }
    max_price = np.array(
        [q.max_price_per_hour if q.max_price_per_hour is not None else np.inf for q in reqs]
    )
    parts = []
    for is_spot in (False, True):
        allowed = allow[is_spot][pairs.req]
        unit = numbers["price_spot" if is_spot else "price_on_demand"][pairs.row]
        missing = allowed & np.isnan(unit)
        if missing.any():
            counts = np.bincount(pairs.req[missing], minlength=n)
            label = "no spot price" if is_spot else "no on-demand price"
            for r in np.flatnonzero(counts).tolist():
                pairs.rejected[r].append(Rejection(label, int(counts[r])))
        take = allowed & ~missing
        parts.append(
            (
                pairs.req[take],
                pairs.alternative[take],
                pairs.row[take],
                np.full(int(take.sum()), is_spot),
                unit[take] * nodes[pairs.req[take]],
            )
        )
    req, alternative, row, spot, price = (
        np.concatenate(column) for column in zip(*parts, strict=True)
    )
    over = price > max_price[req]
    if over.any():
        counts = np.bincount(req[over], minlength=n)
        for r in np.flatnonzero(counts).tolist():
            pairs.rejected[r].append(
                Rejection(
                    f"over max_price_per_hour {reqs[r].max_price_per_hour:g} USD", int(counts[r])
                )
            )
        keep = ~over
        req, alternative, row, spot, price = (
            req[keep],
            alternative[keep],
            row[keep],
            spot[keep],
            price[keep],
        )
    order = np.argsort(req, kind="stable")
    req = req[order]
    start = np.searchsorted(req, np.arange(n + 1))
    return Candidates(
        req, alternative[order], row[order], spot[order], price[order], start, pairs.rejected, total
    )
