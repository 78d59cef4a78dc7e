"""Step 1 of planning: the (offer, market) candidates that satisfy each Requirements.

Vectorised across a whole batch, over the table as `Partitions` lays it out: its
rows partitioned by (GPU model, GPU count, cloud, region), and within each
partition kept in two precomputed orders, one per market, by (interruption rate,
price, row). Then:
- location constraints (cloud, region, country) are decided once per partition,
  whatever the number of offers in it;
- requirements that ask the same of an offer (one GPU alternative, the location,
  vCPUs, memory, interconnect, nodes and market: a *slice*) share one set of
  candidates. A batch repeats the same few asks, so each slice is filtered once,
  however many requirements use it;
- the offer filters (vCPUs, memory, interconnect, capacity, a price in the market)
  are masks over one flat array of the candidates of every slice, which keep that
  order, so the survivors come out already in cost groups (see Candidates) with no
  sort;
- max_price_per_hour, the one filter that differs between requirements sharing a
  slice, keeps a prefix of each of their groups (prices rise within a group).
Each filter counts, per requirements, how many offers it removed and why, so
that `broker plan --explain` can show where the offers went. The filters run
in the order they appear below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.planner.decision import Rejection, Rejections
from broker.planner.partitions import Partitions
from broker.spec import Amount, GpuAsk, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

MARKETS = {"never": (False,), "only": (True,), "prefer": (False, True)}  # False = on-demand
CPU_ONLY = (GpuAsk("", 0.0),)  # a CPU-only job asks for the offers without GPUs
# What the offer filters removed, in the order they run: a column of Slices.removed each.
OFFER_FILTERS = ("vcpus", "memory", "interconnect", "capacity", "price")


@dataclass(frozen=True)
class Candidates:
    """Feasible (requirements, offer, market) triples of a batch, in cost groups.

    A cost group is the candidates of one requirements that share every input of
    the cost model but the price: GPU alternative, place (cloud region), market
    and interruption rate. Within a group the expected hours are the same and the
    expected cost grows with the price, so candidates are sorted by (price, row)
    and a group can be priced once. Group g holds candidates
    `group_start[g]:group_end[g]` (requirements sharing a slice share its
    candidates); the groups of requirements r are `req_groups[r]:req_groups[r+1]`.
    """

    row: np.ndarray  # per candidate: position in the offers table
    price_per_hour: np.ndarray  # per candidate: USD for all nodes, in its market
    group_start: np.ndarray  # per group: first candidate
    group_end: np.ndarray  # per group: one past its last candidate
    group_alternative: np.ndarray  # per group: index into the accelerators (0 for CPU-only)
    group_place: np.ndarray  # per group: place id (Partitions.places)
    group_spot: np.ndarray  # per group: bool
    group_rate: np.ndarray  # per group: interruptions per hour (0 on-demand)
    group_rate_from_catalog: np.ndarray  # per group: bool
    req_groups: np.ndarray  # len(reqs) + 1 offsets into the groups
    rejected: list[list[Rejection]]  # per requirements, in filter order
    considered: int  # offers in the table


class Slices:
    """The slices (see module docstring) of a batch's distinct requirements.

    Registering them costs little (Partitions memoises the location rows);
    `candidates` filters the slices of some of the requirements, as one flat array.
    Each requirements *uses* one slice per GPU alternative and market; with `spot:
    prefer` each offer is a candidate twice, once per market, and the filters that
    judge the offer, not the market, count only the first copy (`counted`).
    """

    def __init__(self, reqs: Sequence[Requirements], partitions: Partitions) -> None:
        import numpy as np

        self.reqs = reqs
        self.partitions = partitions
        self.rejections = Rejections()
        ids: dict[tuple, int] = {}
        self.positions: list[np.ndarray] = []  # per slice: its location rows (Partitions.rows)
        self.spot: list[bool] = []  # per slice
        self.asker: list[Requirements] = []  # per slice: one requirements that uses it
        located: list[list[int]] = []  # per slice: its rows, then what each location filter drops
        # Uses, requirements after requirements: those of r are req_uses[r]:req_uses[r+1].
        use_alt: list[int] = []
        use_slice: list[int] = []
        use_counted: list[bool] = []
        req_uses = [0]
        # What each requirements asks of an offer besides its GPU (location, vCPUs, memory,
        # interconnect, nodes), numbered, so that a slice's key hashes fast.
        numbered: dict[tuple, int] = {}
        for req in reqs:
            cpus, memory = req.cpus, req.memory_gib
            rest = (
                (req.clouds, req.exclude_clouds, req.regions, req.countries),
                None if cpus is None else (cpus.value, cpus.at_least),
                None if memory is None else (memory.value, memory.at_least),
                req.interconnect,
                req.nodes,
            )
            asked = numbered.setdefault(rest, len(numbered))
            markets = MARKETS[req.spot]
            for alt, ask in enumerate(req.accelerators or CPU_ONLY):
                for spot in markets:
                    key = (ask.gpu, ask.count, asked, spot)
                    slice_id = ids.get(key)
                    if slice_id is None:
                        slice_id = ids[key] = len(self.positions)
                        rows, dropped = partitions.rows(ask.gpu, ask.count, req, spot)
                        self.positions.append(rows)
                        self.spot.append(spot)
                        self.asker.append(req)
                        located.append([len(rows), *dropped])
                    use_alt.append(alt)
                    use_slice.append(slice_id)
                    use_counted.append(spot == markets[0])
            req_uses.append(len(use_slice))
        self.use_alt = np.array(use_alt, dtype=np.int64)
        self.use_slice = np.array(use_slice, dtype=np.int64)
        self.use_counted = np.array(use_counted, dtype=bool)
        self.req_uses = np.array(req_uses, dtype=np.int64)
        self._slices_of_req = use_slice  # as a list, for `slices_of`
        self.first_rejections = self._first_rejections(np.array(located, dtype=np.int64))

    def _first_rejections(self, located: np.ndarray) -> list[list[Rejection]]:
        """Per requirements, the offers of other GPU models or counts, and of other places."""
        import numpy as np

        n = len(self.reqs)
        counted = self.use_counted
        req = np.repeat(np.arange(n), np.diff(self.req_uses))[counted]
        at = located.reshape(-1, 5)[self.use_slice[counted]]
        removed = np.stack([np.bincount(req, at[:, k], minlength=n) for k in range(1, 5)], 1)
        removed = removed.astype(np.int64)
        found = (np.bincount(req, at[:, 0], minlength=n) + removed.sum(axis=1)).astype(int).tolist()
        index = self.partitions.index
        total = len(index.offers)
        names: dict[tuple[str, float], str] = {}
        of_gpu: dict[str, int] = {}
        places: dict[tuple, tuple[str, str, str, str]] = {}  # location -> its reasons
        rejection = self.rejections
        out = []
        for req, found_here, removed_here in zip(self.reqs, found, removed.tolist(), strict=True):
            first = _model_rejections(req.accelerators, index, total, found_here, names, of_gpu)
            first = [rejection[key] for key in first]
            if any(removed_here):
                location = (req.clouds, req.exclude_clouds, req.regions, req.countries)
                if location not in places:
                    places[location] = _location_reasons(req)
                for count, reason in zip(removed_here, places[location], strict=True):
                    if count:
                        first.append(rejection[reason, count])
            out.append(first)
        return out

    def slices_of(self, r: int) -> list[int]:
        """The slices requirements `r` uses."""
        return self._slices_of_req[self.req_uses[r] : self.req_uses[r + 1]]

    def size(self, slice_id: int) -> int:
        """Location rows of a slice: what filtering it holds in memory at most."""
        return len(self.positions[slice_id])

    def candidates(self, which: Iterable[int]) -> Candidates:
        """The Candidates of the requirements `which` (indices into `reqs`), in that order."""
        import numpy as np

        which = np.fromiter(which, dtype=np.int64)
        first, lengths = self.req_uses[which], self.req_uses[which + 1] - self.req_uses[which]
        use = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        use_req = np.repeat(np.arange(len(which)), lengths)
        # The slices used here, renumbered from 0 in the order of their ids.
        used, use_slice = np.unique(self.use_slice[use], return_inverse=True)
        used = used.tolist()
        survivors = _SliceCandidates(
            [self.positions[s] for s in used], [self.spot[s] for s in used]
        )
        survivors.filter([self.asker[s] for s in used], self.partitions)
        tally = _Tally(
            [self.reqs[r] for r in which.tolist()],
            [list(self.first_rejections[r]) for r in which.tolist()],
            self.rejections,
        )
        _count_offer_filters(tally, survivors, use_req, use_slice, self.use_counted[use])
        return _cut_at_max_price(
            survivors,
            tally,
            (use_req, self.use_alt[use], use_slice),
            considered=len(self.partitions.index.offers),
        )


def find_candidates(
    reqs: Sequence[Requirements], index: OfferIndex, partitions: Partitions | None = None
) -> Candidates:
    """Every satisfying (requirements, offer, market) triple, with rejected counts."""
    slices = Slices(reqs, partitions or Partitions(index))
    return slices.candidates(range(len(reqs)))


def _model_rejections(
    asks: tuple[GpuAsk, ...],
    index: OfferIndex,
    total: int,
    found: int,
    names: dict[tuple[str, float], str],
    of_gpu: dict[str, int],
) -> list[tuple[str, int]]:
    """(reason, count) of the offers of another GPU model, or of the model with another
    count (`names` and `of_gpu` memoise each ask's text and each model's offers)."""
    if not asks:
        return [("has GPUs (the job asks for none)", total - found)] if total > found else []
    texts, of_model, models = [], 0, set()
    for ask in asks:
        key = (ask.gpu, ask.count)
        if key not in names:
            names[key] = f"{ask.gpu}:{ask.count:g}"
            of_gpu.setdefault(ask.gpu, len(index.rows_of_gpu(ask.gpu)))
        texts.append(names[key])
        if ask.gpu not in models:
            models.add(ask.gpu)
            of_model += of_gpu[ask.gpu]
    wanted = " or ".join(texts)
    out = []
    if total > of_model:
        out.append((f"GPU model is not {wanted}", total - of_model))
    if of_model > found:
        out.append((f"GPU count per node is not {wanted}", of_model - found))
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


class _SliceCandidates:
    """The candidates of some slices as flat arrays (slice after slice, each a run of
    positions in Partitions' layout), and how many of each slice every offer filter
    removed. A per-slice figure is spread over its candidates with np.repeat, which
    costs a fraction of an indexed gather on arrays this long."""

    def __init__(self, positions: list[np.ndarray], spot: list[bool]) -> None:
        import numpy as np

        self.n = len(positions)
        self.lengths = np.array([len(p) for p in positions], dtype=np.int64)
        self.at = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
        self.slice_spot = np.array(spot, dtype=bool)
        self.removed = np.zeros((self.n, len(OFFER_FILTERS)), dtype=np.int64)

    def spread(self, per_slice: np.ndarray) -> np.ndarray:
        """A per-slice array, one entry per candidate."""
        import numpy as np

        return np.repeat(per_slice, self.lengths)

    def filter(self, askers: list[Requirements], partitions: Partitions) -> None:
        """Apply the offer filters (each skipped when no slice asks for it), then cut the
        survivors into cost groups and price them for all nodes."""
        import numpy as np

        column = partitions.at
        alive = np.ones(len(self.at), dtype=bool)
        for name, values, amount_of in (
            ("vcpus", column["vcpus"], lambda q: q.cpus),
            ("memory", column["memory_gib"], lambda q: q.memory_gib),
        ):
            amounts = [amount_of(q) for q in askers]
            if any(a is not None for a in amounts):
                have = values[self.at]
                target = self.spread(np.array([a.value if a else np.nan for a in amounts]))
                ok = have >= target
                exact = np.array([a is not None and not a.at_least for a in amounts])
                if exact.any():
                    ok = np.where(self.spread(exact), have == target, ok)
                free = np.array([a is None for a in amounts])
                if free.any():
                    ok |= self.spread(free)
                alive = self._keep(name, alive, ok)
        wanted = [q.interconnect for q in askers]
        if any(wanted):
            codes = column["interconnect"][self.at]
            lookup = _interconnects(partitions.index.offers, wanted)
            ok = lookup[self.spread(np.arange(self.n)), codes]
            alive = self._keep("interconnect", alive, ok)
        nodes = np.array([q.nodes for q in askers], dtype=np.float64)
        if partitions.has_capacity:
            capacity = column["capacity"][self.at]
            alive = self._keep(
                "capacity", alive, np.isnan(capacity) | (capacity >= self.spread(nodes))
            )
        unit = column["price"][self.at]  # in the slice's market
        alive = self._keep("price", alive, ~np.isnan(unit))
        at = self.at[alive]
        self.lengths = self.lengths - self.removed.sum(axis=1)
        self.price = unit[alive] * self.spread(nodes)
        self.row = partitions.row_at[at]
        # Cost groups: runs of one slice and one group of Partitions.group_at.
        group = partitions.group_at[at]
        change = np.ones(len(at), dtype=bool)
        change[1:] = group[1:] != group[:-1]
        starts = np.cumsum(self.lengths) - self.lengths
        change[starts[self.lengths > 0]] = True
        self.group_start = np.flatnonzero(change)
        self.group_end = np.append(self.group_start[1:], len(at))
        slice_of_group = self.spread(np.arange(self.n))[self.group_start]
        first = self.row[self.group_start]
        self.group_spot = self.slice_spot[slice_of_group]
        self.group_place = partitions.place_of_row[first]
        self.group_rate = np.where(self.group_spot, partitions.spot_rate[first], 0.0)
        self.group_from_catalog = self.group_spot & partitions.from_catalog[first]
        self.slice_groups = np.searchsorted(slice_of_group, np.arange(self.n + 1))
        del self.at

    def _keep(self, name: str, alive: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """`alive & ok`, counting per slice the candidates `ok` retires."""
        import numpy as np

        dropped = alive & ~ok
        if dropped.any():
            # Slices are runs of candidates: sum each nonempty run.
            starts = np.cumsum(self.lengths) - self.lengths
            runs = np.flatnonzero(self.lengths > 0)
            counts = np.add.reduceat(dropped, starts[runs], dtype=np.int64)
            self.removed[runs, OFFER_FILTERS.index(name)] = counts
        return alive & ok


def _interconnects(table, wanted: list[str | None]) -> np.ndarray:
    """[slice, interconnect code]: whether an offer has what the slice asks for (or none)."""
    import numpy as np

    categories = table.categories["interconnect"]
    has = {name: [name in v.split("+") for v in categories] for name in set(wanted) if name}
    lookup = np.ones((len(wanted), len(categories)), dtype=bool)
    for i, name in enumerate(wanted):
        if name:
            lookup[i] = has[name]
    return lookup


def _count_offer_filters(
    tally: _Tally,
    survivors: _SliceCandidates,
    use_req: np.ndarray,
    use_slice: np.ndarray,
    counted: np.ndarray,
) -> None:
    """Add to each requirements what the offer filters removed from its slices: the
    filters that judge the offer once per offer, the market's price once per market."""
    import numpy as np

    n = len(tally.reqs)
    reasons = (
        lambda q: f"vCPUs not {_amount_text(q.cpus)}",
        lambda q: f"memory not {_amount_text(q.memory_gib)} GiB",
        lambda q: f"no {q.interconnect} interconnect",
        lambda q: f"not enough free capacity for {q.nodes} node(s)",
    )
    for column, reason in enumerate(reasons):
        removed = survivors.removed[use_slice[counted], column]
        tally.add(np.bincount(use_req[counted], removed, minlength=n), reason)
    price = survivors.removed[use_slice, OFFER_FILTERS.index("price")]
    spot = survivors.slice_spot[use_slice]
    for market, label in ((False, "no on-demand price"), (True, "no spot price")):
        mine = spot == market
        tally.add(np.bincount(use_req[mine], price[mine], minlength=n), lambda q, t=label: t)


def _cut_at_max_price(
    survivors: _SliceCandidates,
    tally: _Tally,
    uses: tuple[np.ndarray, np.ndarray, np.ndarray],
    considered: int,
) -> Candidates:
    """The groups of every use of a slice, each cut to the candidates under its
    requirements' max_price_per_hour (a prefix: prices rise within a group)."""
    import numpy as np

    s = survivors
    use_req, use_alt, use_slice = uses
    first = s.slice_groups[use_slice]
    lengths = s.slice_groups[use_slice + 1] - first
    use = np.repeat(np.arange(len(use_slice)), lengths)
    group = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths - first, lengths)
    begin, end = s.group_start[group], s.group_end[group]
    reqs = tally.reqs
    cap = np.array([np.inf if q.max_price_per_hour is None else q.max_price_per_hour for q in reqs])
    cap = cap[use_req[use]]
    kept = end - begin
    capped = np.flatnonzero(np.isfinite(cap))
    if len(capped):
        none_fit = s.price[begin[capped]] > cap[capped]
        some_fit = ~none_fit & (s.price[end[capped] - 1] > cap[capped])
        kept[capped[none_fit]] = 0
        partial = capped[some_fit]
        if len(partial):  # count each group's prefix within the cap, all groups at once
            size = end[partial] - begin[partial]
            at = np.repeat(begin[partial] - np.cumsum(size) + size, size) + np.arange(size.sum())
            fits = s.price[at] <= np.repeat(cap[partial], size)
            kept[partial] = np.bincount(
                np.repeat(np.arange(len(partial)), size), fits, len(partial)
            )
        over = np.bincount(use_req[use], (end - begin) - kept, minlength=len(reqs))
        tally.add(over, lambda q: f"over max_price_per_hour {q.max_price_per_hour:g} USD")
    live = np.flatnonzero(kept > 0)
    use, group = use[live], group[live]
    return Candidates(
        row=s.row,
        price_per_hour=s.price,
        group_start=begin[live],
        group_end=begin[live] + kept[live],
        group_alternative=use_alt[use],
        group_place=s.group_place[group],
        group_spot=s.group_spot[group],
        group_rate=s.group_rate[group],
        group_rate_from_catalog=s.group_from_catalog[group],
        req_groups=np.searchsorted(use_req[use], np.arange(len(reqs) + 1)),
        rejected=tally.rejected,
        considered=considered,
    )


class _Tally:
    """What the filters removed from each requirements, in filter order."""

    def __init__(
        self, reqs: list[Requirements], rejected: list[list[Rejection]], rejections: Rejections
    ) -> None:
        self.reqs, self.rejected, self.rejections = reqs, rejected, rejections

    def add(self, counts: np.ndarray, reason: Callable[[Requirements], str]) -> None:
        """A Rejection for each requirements with a nonzero count."""
        import numpy as np

        for r in np.flatnonzero(counts).tolist():
            self.rejected[r].append(self.rejections[reason(self.reqs[r]), int(counts[r])])
