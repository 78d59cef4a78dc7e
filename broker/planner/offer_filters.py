"""The offer filters of step 1 (see `broker.planner.filters`): vCPUs, memory, interconnect,
capacity, room for a gang (broker.dispatch.gangs) and a price in the market, as masks
over the flat array of the candidates of some slices; then the cut of each requirements'
groups at its max_price_per_hour.

Each filter counts per slice how many candidates it removed, and `count_offer_filters`
turns those counts into each requirements' rejections, so that `broker plan --explain`
can show where the offers went."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.planner.candidates import Candidates, Tally, group_rates
from broker.planner.partitions import Partitions
from broker.spec import Requirements

if TYPE_CHECKING:
    import numpy as np

    from broker.planner.host import HostAsk

# What the offer filters removed, in the order they run: a column of SliceCandidates.removed each.
OFFER_FILTERS = ("vcpus", "memory", "interconnect", "capacity", "gang", "price")


class SliceCandidates:
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

    def filter(
        self, askers: list[Requirements], hosts: list[HostAsk], partitions: Partitions
    ) -> None:
        """Apply the offer filters (each skipped when no slice asks for it), then cut the
        survivors into cost groups and price them for all nodes. `hosts`: each slice's
        vCPUs and memory (a GPU's default floor lets on-prem and unknown figures pass)."""
        import numpy as np

        column = partitions.at
        alive = np.ones(len(self.at), dtype=bool)
        self.hosts = hosts
        for name, values, amount_of in (
            ("vcpus", column["vcpus"], lambda h: (h.cpus, h.cpus_default)),
            ("memory", column["memory_gib"], lambda h: (h.memory, h.memory_default)),
        ):
            asked = [amount_of(h) for h in hosts]
            amounts = [a for a, _ in asked]
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
                default = np.array([d for _, d in asked])
                if default.any():  # a floor, not an ask: on-prem and unknown figures pass
                    exempt = column["onprem"][self.at] | np.isnan(have)
                    ok |= self.spread(default) & exempt
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
        if "gang" in column and (nodes > 1).any():
            gang = self.spread(nodes)
            most = column["gang"][self.at]  # NaN: not limited (broker plan, clouds)
            alive = self._keep("gang", alive, (gang <= 1) | np.isnan(most) | (most >= gang))
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
        self.group_nodes = nodes[slice_of_group]
        self.group_rate = group_rates(
            partitions.spot_rate, first, self.group_nodes, self.group_spot
        )
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


def count_offer_filters(
    tally: Tally,
    survivors: SliceCandidates,
    use_req: np.ndarray,
    use_slice: np.ndarray,
    counted: np.ndarray,
) -> None:
    """Add to each requirements what the offer filters removed from its slices: the
    filters that judge the offer once per offer, the market's price once per market."""
    import numpy as np

    n = len(tally.reqs)
    for column in (0, 1):  # vCPUs, memory: in each slice's words (a GPU default says so)
        removed = survivors.removed[use_slice[counted], column]
        hit = np.flatnonzero(removed)
        if len(hit):
            reqs, slices = use_req[counted][hit].tolist(), use_slice[counted][hit].tolist()
            texts = [survivors.hosts[s].reason(column) for s in slices]
            tally.add_each(reqs, texts, removed[hit].tolist())
    reasons = (
        lambda q: f"no {q.interconnect} interconnect",
        lambda q: f"not enough free capacity for {q.nodes} node(s)",
        lambda q: f"no gang of {q.nodes} nodes offered here",
    )
    for column, reason in enumerate(reasons, start=2):
        removed = survivors.removed[use_slice[counted], column]
        tally.add(np.bincount(use_req[counted], removed, minlength=n), reason)
    price = survivors.removed[use_slice, OFFER_FILTERS.index("price")]
    spot = survivors.slice_spot[use_slice]
    for market, label in ((False, "no on-demand price"), (True, "no spot price")):
        mine = spot == market
        tally.add(np.bincount(use_req[mine], price[mine], minlength=n), lambda q, t=label: t)


def cut_at_max_price(
    survivors: SliceCandidates,
    tally: Tally,
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
        group_nodes=s.group_nodes[group],
        req_groups=np.searchsorted(use_req[use], np.arange(len(reqs) + 1)),
        rejected=tally.rejected,
        considered=considered,
    )
