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
in that order: the model and location ones here, the offer filters and the
price cap in `broker.planner.offer_filters`; what comes out is `Candidates`
(`broker.planner.candidates`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from broker.planner.candidates import Candidates, Tally
from broker.planner.decision import Rejection, Rejections
from broker.planner.host import HostAsk, host_ask
from broker.planner.offer_filters import SliceCandidates, count_offer_filters, cut_at_max_price
from broker.planner.partitions import Partitions
from broker.spec import GpuAsk, Requirements

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

MARKETS = {"never": (False,), "only": (True,), "prefer": (False, True)}  # False = on-demand
CPU_ONLY = (GpuAsk("", 0.0),)  # a CPU-only job asks for the offers without GPUs


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
        # The host (vCPUs, memory) is asked per GPU alternative: a GPU's default floor
        # applies where the manifest states none (broker.planner.host).
        numbered: dict[tuple, int] = {}
        hosts: dict = {}  # memo of host_ask
        self.host: list[HostAsk] = []  # per slice
        for req in reqs:
            rest = (
                (req.clouds, req.exclude_clouds, req.regions, req.countries),
                req.interconnect,
                req.nodes,
            )
            asked = numbered.setdefault(rest, len(numbered))
            markets = MARKETS[req.spot]
            for alt, ask in enumerate(req.accelerators or CPU_ONLY):
                host = host_ask(req, ask, hosts)
                for spot in markets:
                    key = (ask.gpu, ask.count, asked, host, spot)
                    slice_id = ids.get(key)
                    if slice_id is None:
                        slice_id = ids[key] = len(self.positions)
                        rows, dropped = partitions.rows(ask.gpu, ask.count, req, spot)
                        self.positions.append(rows)
                        self.spot.append(spot)
                        self.asker.append(req)
                        self.host.append(host)
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
        survivors = SliceCandidates([self.positions[s] for s in used], [self.spot[s] for s in used])
        survivors.filter(
            [self.asker[s] for s in used], [self.host[s] for s in used], self.partitions
        )
        tally = Tally(
            [self.reqs[r] for r in which.tolist()],
            [list(self.first_rejections[r]) for r in which.tolist()],
            self.rejections,
        )
        count_offer_filters(tally, survivors, use_req, use_slice, self.use_counted[use])
        return cut_at_max_price(
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
