"""The planner: (jobs, offers, now) -> Decisions, a pure function.

Step 1 (`filters.Slices`) keeps the (requirements, offer, market) triples that
satisfy each distinct Requirements of the batch. Step 2 (here) prices every (job,
cost group) pair with the cost model of `cost.py` in one vectorised pass, drops the
pairs that never finish, miss the deadline or the budget, and ranks each job's
candidates by expected total cost, then expected hours, then a stable key (the
manifest's order of GPU alternatives, the catalog row, on-demand before spot), so
that the same input always gives the same answer. Step 3 (`assemble`) turns the
top ones into Placements and Decisions. `plan` is `plan_many` of one job: there is
one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from broker.collector import collector_paused
from broker.planner import assemble, cost
from broker.planner.candidates import Candidates
from broker.planner.decision import Decision, Rejection, Rejections
from broker.planner.filters import Slices
from broker.planner.partitions import Partitions
from broker.planner.sharing import named, shared_plans
from broker.spec import JobSpec, Requirements
from pricing.regions import Place

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

DEFAULT_TOP = 5
MOVE_COLUMNS = ("staging_hours", "egress_in", "restore_hours", "restore_egress", "write_egress")


def plan(job: JobSpec, index: OfferIndex, now: datetime, top: int = DEFAULT_TOP) -> Decision:
    """The ranked placements of one job (see module docstring)."""
    return plan_many([job], index, now, top=top)[0]


def plan_many(
    jobs: Sequence[JobSpec],
    index: OfferIndex,
    now: datetime,
    top: int = DEFAULT_TOP,
    chunk_pairs: int = 2_000_000,
    search: Callable[[Sequence[JobSpec], OfferIndex, int], Search] | None = None,
) -> list[Decision]:
    """Plan a batch; jobs that ask the same of an offer share one candidate search, and
    jobs whose specs differ only in name and team (a queue of jobs from one template)
    share one plan: the planner reads neither, so each gets the same ranked placements,
    under its own name.

    Jobs go through in chunks whose candidate searches hold about `chunk_pairs`
    offers, so that memory stays bounded when some jobs (CPU-only ones, say) match
    very many offers. `search` makes the batch's `Search` (`Search.of` when None; the
    simulator's reuses one over tables that differ in their learned rates alone).
    """
    if not jobs:
        return []
    search = Search.of if search is None else search
    which = shared_plans(jobs)
    if len(set(which)) == len(jobs):
        return _plan_batch(jobs, index, now, top, search(jobs, index, chunk_pairs))
    firsts: dict[int, JobSpec] = {}
    for job, at in zip(jobs, which, strict=True):
        firsts.setdefault(at, job)
    distinct = [firsts[at] for at in range(len(firsts))]
    shared = _plan_batch(distinct, index, now, top, search(distinct, index, chunk_pairs))
    return [named(shared[at], job.name) for job, at in zip(jobs, which, strict=True)]


class Search(NamedTuple):
    """Step 1 of planning a batch of distinct jobs over one table, and their data
    movement's figures: all that the cost model reads but the clock and the rates. The
    table's interruption rates enter it only through their order (`Partitions`) and each
    cost group's rate (`Candidates.group_rate`), so a table that differs in its rates
    alone takes the same search, `rerated`, while they keep that order."""

    partitions: Partitions
    places: _Places
    slices: Slices
    chunks: tuple[tuple[int, int, list[int], Candidates], ...]  # begin, end, requirements

    @classmethod
    def of(cls, jobs: Sequence[JobSpec], index: OfferIndex, chunk_pairs: int) -> Search:
        with collector_paused():
            partitions = Partitions(index)
            places = _Places(index, partitions)
            ids: dict[Requirements, int] = {}
            req_of_job = [ids.setdefault(job.requirements, len(ids)) for job in jobs]
            slices = Slices(list(ids), partitions)
            chunks = []
            for begin, end in _chunks(req_of_job, slices, chunk_pairs):
                local: dict[int, int] = {}  # the batch's requirements id -> the chunk's
                req_of_chunk_job = [local.setdefault(r, len(local)) for r in req_of_job[begin:end]]
                chunks.append((begin, end, req_of_chunk_job, slices.candidates(local)))
        return cls(partitions, places, slices, tuple(chunks))

    def rerated(self, index: OfferIndex) -> Search | None:
        """This search over `index`, whose table differs from this one's in its
        interruption rates alone; None when they change the order (`Partitions.rerated`)."""
        partitions = self.partitions.rerated(index)
        if partitions is None:
            return None
        rate = partitions.spot_rate
        chunks = tuple((b, e, r, cands.rerated(rate)) for b, e, r, cands in self.chunks)
        return self._replace(partitions=partitions, chunks=chunks)


def _plan_batch(
    jobs: Sequence[JobSpec], index: OfferIndex, now: datetime, top: int, search: Search
) -> list[Decision]:
    """`plan_many` of distinct jobs, over their `search`."""
    with collector_paused():
        decisions: list[Decision] = []
        for begin, end, req_of_chunk_job, cands in search.chunks:
            decisions.extend(
                _plan_chunk(
                    jobs[begin:end],
                    req_of_chunk_job,
                    cands,
                    index,
                    search.places,
                    now,
                    top,
                    search.slices,
                )
            )
    return decisions


def _chunks(req_of_job: list[int], slices: Slices, limit: int):
    """(begin, end) of runs of jobs whose distinct slices hold about `limit` offers."""
    begin = 0
    while begin < len(req_of_job):
        end, held, reqs, seen = begin, 0, set(), set()
        while end < len(req_of_job):
            r = req_of_job[end]
            if r not in reqs:
                new = [s for s in slices.slices_of(r) if s not in seen]
                grow = sum(slices.size(s) for s in new)
                if end > begin and held + grow > limit:
                    break
                reqs.add(r)
                seen.update(new)
                held += grow
            end += 1
        yield begin, end
        begin = end


class _Places:
    """Data-movement figures per place (Partitions.places) for each distinct
    (inputs, checkpoint) of the batch, memoised."""

    def __init__(self, index: OfferIndex, partitions: Partitions) -> None:

        self.index = index
        self.places = partitions.places
        self._moves: dict[tuple, int] = {}
        self._tables: list[np.ndarray] = []
        self._from: dict[Place, tuple[np.ndarray, np.ndarray]] = {}
        self._to: dict[Place, np.ndarray] = {}
        self._stacked: np.ndarray | None = None  # `moves()`, until a new figure is added

    def moves_id(self, job: JobSpec) -> int:
        # Keyed by what _move_figures reads, as plain values (they hash faster).
        ckpt = job.checkpoint
        key = (
            tuple((d.size_gb, d.location.cloud, d.location.region) for d in job.data if d.location),
            None
            if ckpt is None or ckpt.location is None or not ckpt.size_gb
            else (
                ckpt.size_gb,
                ckpt.location.cloud,
                ckpt.location.region,
                ckpt.moves_with_job,
                ckpt.saved,
            ),
        )
        found = self._moves.get(key)
        if found is None:
            found = self._moves[key] = len(self._tables)
            self._tables.append(self._move_figures(job))
            self._stacked = None
        return found

    def _egress_place(self, location: Place) -> Place:
        country = self.index.extra_countries.get((location.cloud, location.region), "")
        return Place(location.cloud, location.region, country=country)

    def from_place(self, location: Place) -> tuple[np.ndarray, np.ndarray]:
        """USD per GB and copy hours per GB from `location` to every place."""
        import numpy as np

        from pricing.egress import egress_price

        if location not in self._from:
            source = self._egress_place(location)
            moves = [egress_price(source, Place(c, r, country=k)) for c, r, k in self.places]
            self._from[location] = (
                np.array([m.price_per_gb for m in moves]),
                np.array([cost.copy_hours(1.0, m.scope) for m in moves]),
            )
        return self._from[location]

    def to_place(self, location: Place) -> np.ndarray:
        """USD per GB from every place to `location` (billed by the sending place)."""
        import numpy as np

        from pricing.egress import egress_price

        if location not in self._to:
            target = self._egress_place(location)
            self._to[location] = np.array(
                [
                    egress_price(Place(c, r, country=k), target).price_per_gb
                    for c, r, k in self.places
                ]
            )
        return self._to[location]

    def _move_figures(self, job: JobSpec) -> np.ndarray:
        """What the job's inputs and checkpoint cost to move, per place, as the columns
        of MOVE_COLUMNS. Inputs or checkpoints without a location are not priced."""
        import numpy as np

        figures = np.zeros((len(self.places), len(MOVE_COLUMNS)))
        for item in job.data:
            if item.location is not None:
                price, hours = self.from_place(item.location)
                figures[:, 0] += item.size_gb * hours
                figures[:, 1] += item.size_gb * price
        ckpt = job.checkpoint
        if ckpt is not None and ckpt.location is not None and ckpt.size_gb:
            # docs/planner.md, "Checkpoint egress": a saved checkpoint is brought in once
            # (restored from its bucket, or copied from where it lies); then either the
            # job's own place keeps it (restores local, writes free) or every restore and
            # write crosses to the bucket.
            price, hours = self.from_place(ckpt.location)
            if ckpt.saved:
                figures[:, 0] += ckpt.size_gb * hours
                figures[:, 1] += ckpt.size_gb * price
            if ckpt.moves_with_job:
                figures[:, 2] = cost.copy_hours(ckpt.size_gb, "same_region")
            else:
                figures[:, 2] = ckpt.size_gb * hours
                figures[:, 3] = ckpt.size_gb * price
                figures[:, 4] = ckpt.size_gb * self.to_place(ckpt.location)
        return figures

    def moves(self) -> np.ndarray:
        """All memoised figures: [moves id, place, MOVE_COLUMNS]."""
        import numpy as np

        if self._stacked is None:
            self._stacked = np.stack(self._tables)
        return self._stacked


def _plan_chunk(
    jobs: Sequence[JobSpec],
    req_of_job: Sequence[int],
    cands: Candidates,
    index: OfferIndex,
    places: _Places,
    now: datetime,
    top: int,
    slices: Slices,
) -> list[Decision]:
    """Price every (job, cost group) pair at once, count what the deadline and the
    budget remove, then rank the few candidates that can be in each job's top."""
    import numpy as np

    n = len(jobs)
    req_of_job = np.asarray(req_of_job, dtype=np.int64)
    # (job, group) pairs: each job takes the groups of its requirements.
    first_group = cands.req_groups[req_of_job]
    lengths = cands.req_groups[req_of_job + 1] - first_group
    job = np.repeat(np.arange(n), lengths)
    offsets = np.cumsum(lengths) - lengths
    group = np.arange(int(lengths.sum())) - np.repeat(offsets - first_group, lengths)
    alt, spot = cands.group_alternative[group], cands.group_spot[group]
    rate, place = cands.group_rate[group], cands.group_place[group]
    begin, end = cands.group_start[group], cands.group_end[group]

    params = _JobParams.of(jobs, places, now)
    run_hours = params.estimate[job] * params.factor[job, alt]
    moves = places.moves()[params.moves_id[job], place]
    staging, egress_in, restore_hours, restore_egress, write_egress = moves.T
    work = run_hours + staging
    per_interruption = cost.lost_hours_per_interruption(
        params.interval[job], run_hours, restore_hours
    )
    expected = cost.spot_hours(work, rate, per_interruption)
    risky = cost.spot_hours(work, rate * cost.DEADLINE_RISK_FACTOR, per_interruption).total
    finite = np.isfinite(expected.total)
    hours = np.where(finite, expected.total, 0.0)
    writes_per_hour = 60.0 / np.where(params.writes_ckpt[job], params.interval[job], np.inf)
    egress = (  # each interruption restores, and writes one checkpoint on its notice
        egress_in
        + expected.interruptions * (restore_egress + write_egress)
        + hours * writes_per_hour * write_egress
    )  # the same for every candidate of the group

    def totals(candidates: np.ndarray, pair: np.ndarray) -> np.ndarray:
        return cands.price_per_hour[candidates] * hours[pair] + egress[pair]

    size = end - begin
    rejected = [list(cands.rejected[r]) for r in req_of_job.tolist()]
    rejection = slices.rejections
    _count(
        rejected, rejection, job, size, ~finite, "spot interruptions too frequent to ever finish"
    )
    # A spot policy owns a steered job's deadline (docs/planner.md, "Deadline"): its safety
    # net moves the job to on-demand in time, so its spot is not judged at twice the rate.
    alive = finite & ((risky <= params.hours_left[job]) | (spot & params.steered[job]))
    _count(rejected, rejection, job, size, finite & ~alive, "misses the deadline (risk-adjusted)")
    # Within a group the cost grows with the price: the affordable candidates are a prefix.
    affordable = np.where(alive, size, 0)
    budget = params.budget[job]
    capped = np.flatnonzero(alive & np.isfinite(budget))
    if len(capped):
        all_fit = totals(end[capped] - 1, capped) <= budget[capped]
        none_fit = totals(begin[capped], capped) > budget[capped]
        affordable[capped[none_fit]] = 0
        partial = capped[~all_fit & ~none_fit]
        if len(partial):  # count each group's prefix within the budget, all at once
            lengths = size[partial]
            first = np.repeat(begin[partial] - np.cumsum(lengths) + lengths, lengths)
            pair = np.repeat(partial, lengths)
            within = totals(first + np.arange(lengths.sum()), pair) <= budget[pair]
            affordable[partial] = np.bincount(
                np.repeat(np.arange(len(partial)), lengths), within, len(partial)
            )
    over = size - affordable
    _count(
        rejected,
        rejection,
        job,
        np.where(alive, over, 0),
        alive & (over > 0),
        lambda i: f"over budget {jobs[i].budget.max_cost:g} USD",
    )

    # A job's top k lie in the k groups with the cheapest first candidates (ties kept).
    usable = np.flatnonzero(affordable > 0)
    cheapest = totals(begin[usable], usable)
    by_job = np.lexsort((cheapest, job[usable]))
    usable, cheapest = usable[by_job], cheapest[by_job]
    starts = np.searchsorted(job[usable], np.arange(n + 1))
    kth = np.full(n, np.inf)
    has_k = (starts[1:] - starts[:-1]) >= top
    kth[has_k] = cheapest[starts[:-1][has_k] + top - 1]
    usable = usable[cheapest <= kth[job[usable]]]
    take = np.minimum(affordable[usable], top)
    pair = np.repeat(usable, take)
    within = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    candidate = begin[pair] + within
    total = totals(candidate, pair)
    order = np.lexsort(
        (spot[pair], cands.row[candidate], alt[pair], expected.total[pair], total, job[pair])
    )
    pair, candidate, total = pair[order], candidate[order], total[order]
    first = np.searchsorted(job[pair], np.arange(n))
    keep = (np.arange(len(pair)) - first[job[pair]]) < top
    pair, candidate, total = pair[keep], candidate[keep], total[keep]

    price = cands.price_per_hour[candidate]
    chosen = {
        "job": job[pair],
        "row": cands.row[candidate],
        "spot": spot[pair],
        "price": price,
        "run_hours": run_hours[pair],
        "staging_hours": staging[pair],
        "hours": expected.total[pair],
        "overhead_hours": expected.overhead[pair],
        "interruptions": expected.interruptions[pair],
        "rate": rate[pair],
        "from_catalog": cands.group_rate_from_catalog[group[pair]],
        "compute": price * hours[pair],
        "egress": egress[pair],
        "total": total,
    }
    return assemble.decisions(jobs, rejected, cands.considered, index.offers, chosen)


class _JobParams(NamedTuple):
    """Per-job inputs of the cost model as arrays, gathered per pair by job index."""

    factor: np.ndarray  # [job, alternative]: estimate multiplier for that GPU
    estimate: np.ndarray
    interval: np.ndarray  # checkpoint interval, minutes; NaN = no checkpoints
    writes_ckpt: np.ndarray  # checkpoint writes are priced (bucket location known)
    moves_id: np.ndarray
    hours_left: np.ndarray  # until the deadline; inf = none
    steered: np.ndarray  # a spot policy decides the job's market (broker.dispatch.market)
    budget: np.ndarray  # inf = none

    @classmethod
    def of(cls, jobs: Sequence[JobSpec], places: _Places, now: datetime) -> _JobParams:
        import numpy as np

        from broker.dispatch.steered import steered
        from pricing.gpus import find_gpu

        speed: dict[str, float] = {}  # relative throughput per GPU model
        factor = np.ones((len(jobs), max([len(j.requirements.accelerators) for j in jobs] + [1])))
        estimate, interval, writes_ckpt, moves_id, hours_left, budget = [], [], [], [], [], []
        policy_owned = []
        for i, j in enumerate(jobs):
            asks = j.requirements.accelerators
            if len(asks) > 1:  # the estimate is for the first-choice GPU
                for a in asks:
                    if a.gpu not in speed:
                        speed[a.gpu] = _throughput(find_gpu(a.gpu))
                factor[i, : len(asks)] = [speed[asks[0].gpu] / speed[a.gpu] for a in asks]
            ckpt = j.checkpoint
            estimate.append(j.runtime.estimate_hours)
            interval.append(np.nan if ckpt is None else ckpt.interval_minutes)
            writes_ckpt.append(ckpt is not None and ckpt.location is not None)
            moves_id.append(places.moves_id(j))
            hours_left.append(_hours_left(j, now))
            policy_owned.append(steered(j.requirements.spot, j.runtime.deadline is not None))
            budget.append(np.inf if j.budget.max_cost is None else j.budget.max_cost)
        return cls(
            factor=factor,
            estimate=np.array(estimate, dtype=np.float64),
            interval=np.array(interval, dtype=np.float64),
            writes_ckpt=np.array(writes_ckpt, dtype=bool),
            moves_id=np.array(moves_id, dtype=np.int64),
            hours_left=np.array(hours_left, dtype=np.float64),
            steered=np.array(policy_owned, dtype=bool),
            budget=np.array(budget, dtype=np.float64),
        )


def _count(
    rejected: list[list[Rejection]],
    rejection: Rejections,
    job: np.ndarray,
    size: np.ndarray,
    mask: np.ndarray,
    reason,
) -> None:
    """Record, per job, how many candidates the (job, group) pairs in `mask` remove;
    `size` is the number of candidates each pair stands for."""
    import numpy as np

    if not mask.any():
        return
    counts = np.bincount(job[mask], weights=size[mask], minlength=len(rejected))
    for i in np.flatnonzero(counts).tolist():
        text = reason(i) if callable(reason) else reason
        rejected[i].append(rejection[text, int(counts[i])])


def _hours_left(job: JobSpec, now: datetime) -> float:
    deadline = job.runtime.deadline_at(now)
    return float("inf") if deadline is None else (deadline - now).total_seconds() / 3600.0


def _throughput(model) -> float:
    return model.relative_throughput if model is not None else 1.0
