"""The planner: (jobs, offers, now) -> Decisions, a pure function.

Step 1 (`filters.find_candidates`) keeps the (requirements, offer, market)
triples that satisfy each distinct Requirements of the batch. Step 2 (here)
prices every (job, candidate) pair with the cost model of `cost.py` in one
vectorised pass, drops the pairs that never finish, miss the deadline or the
budget, and ranks each job's pairs by expected total cost, then expected hours,
then a stable key (the manifest's order of GPU alternatives, the catalog row,
on-demand before spot), so that the same input always gives the same answer.
`plan` is `plan_many` of one job: there is one implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from broker.planner import cost
from broker.planner.decision import CostEstimate, Decision, Placement, Rejection
from broker.planner.filters import Candidates, Partitions, find_candidates
from broker.spec import JobSpec, Place

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
) -> list[Decision]:
    """Plan a batch; jobs with the same requirements share one candidate search.

    Jobs go through in chunks of about `chunk_pairs` (job, offer) pairs, so that
    memory stays bounded when some jobs (CPU-only ones, say) match very many offers.
    """
    if not jobs:
        return []
    with _collector_paused():
        partitions = Partitions(index)
        places = _Places(index, partitions)
        sizes = [partitions.size_of(job.requirements) for job in jobs]
        decisions: list[Decision] = []
        begin = 0
        while begin < len(jobs):
            end, pairs = begin, 0
            while end < len(jobs) and (end == begin or pairs + sizes[end] <= chunk_pairs):
                pairs += sizes[end]
                end += 1
            chunk = jobs[begin:end]
            reqs: dict = {}
            req_of_job = [reqs.setdefault(job.requirements, len(reqs)) for job in chunk]
            cands = find_candidates(list(reqs), index, partitions)
            decisions.extend(_plan_chunk(chunk, req_of_job, cands, index, places, now, top))
            begin = end
    return decisions


@contextmanager
def _collector_paused():
    """Planning a batch allocates many small objects (placements, rejections) and makes
    no reference cycles, yet the cyclic collector would scan them over and over: a
    third of the batch's time. It runs again, as before, once the batch is planned."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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

    def moves_id(self, job: JobSpec) -> int:
        key = (job.data, job.checkpoint)
        if key not in self._moves:
            self._moves[key] = len(self._tables)
            self._tables.append(self._move_figures(job))
        return self._moves[key]

    def _egress_place(self, location: Place):
        from pricing.egress import Place as EgressPlace

        country = self.index.extra_countries.get((location.cloud, location.region), "")
        return EgressPlace(location.cloud, location.region, country=country)

    def from_place(self, location: Place) -> tuple[np.ndarray, np.ndarray]:
        """USD per GB and copy hours per GB from `location` to every place."""
        import numpy as np

        from pricing.egress import Place as EgressPlace
        from pricing.egress import egress_price

        if location not in self._from:
            source = self._egress_place(location)
            moves = [egress_price(source, EgressPlace(c, r, country=k)) for c, r, k in self.places]
            self._from[location] = (
                np.array([m.price_per_gb for m in moves]),
                np.array([cost.copy_hours(1.0, m.scope) for m in moves]),
            )
        return self._from[location]

    def to_place(self, location: Place) -> np.ndarray:
        """USD per GB from every place to `location` (billed by the sending place)."""
        import numpy as np

        from pricing.egress import Place as EgressPlace
        from pricing.egress import egress_price

        if location not in self._to:
            target = self._egress_place(location)
            self._to[location] = np.array(
                [
                    egress_price(EgressPlace(c, r, country=k), target).price_per_gb
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
            price, hours = self.from_place(ckpt.location)
            figures[:, 2] = ckpt.size_gb * hours
            figures[:, 3] = ckpt.size_gb * price
            figures[:, 4] = ckpt.size_gb * self.to_place(ckpt.location)
        return figures

    def moves(self) -> np.ndarray:
        """All memoised figures: [moves id, place, MOVE_COLUMNS]."""
        import numpy as np

        return np.stack(self._tables)


def _plan_chunk(
    jobs: Sequence[JobSpec],
    req_of_job: Sequence[int],
    cands: Candidates,
    index: OfferIndex,
    places: _Places,
    now: datetime,
    top: int,
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
    begin, end = cands.group_start[group], cands.group_start[group + 1]

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
    egress = (
        egress_in + expected.interruptions * restore_egress + hours * writes_per_hour * write_egress
    )  # the same for every candidate of the group

    def totals(candidates: np.ndarray, pair: np.ndarray) -> np.ndarray:
        return cands.price_per_hour[candidates] * hours[pair] + egress[pair]

    size = end - begin
    rejected = [list(cands.rejected[r]) for r in req_of_job.tolist()]
    _count(rejected, job, size, ~finite, n, "spot interruptions too frequent to ever finish")
    alive = finite & (risky <= params.hours_left[job])
    _count(rejected, job, size, finite & ~alive, n, "misses the deadline (risk-adjusted)")
    # Within a group the cost grows with the price: the affordable candidates are a prefix.
    affordable = np.where(alive, size, 0)
    budget = params.budget[job]
    capped = np.flatnonzero(alive & np.isfinite(budget))
    if len(capped):
        all_fit = totals(end[capped] - 1, capped) <= budget[capped]
        none_fit = totals(begin[capped], capped) > budget[capped]
        affordable[capped[none_fit]] = 0
        for p in capped[~all_fit & ~none_fit].tolist():
            within = totals(np.arange(begin[p], end[p]), np.full(size[p], p)) <= budget[p]
            affordable[p] = int(within.sum())
    over = size - affordable
    _count(
        rejected,
        job,
        np.where(alive, over, 0),
        alive & (over > 0),
        n,
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
    figures = _Figures.take(
        index,
        cands.row[candidate],
        spot=spot[pair],
        price=price,
        run_hours=run_hours[pair],
        staging=staging[pair],
        hours=expected.total[pair],
        overhead=expected.overhead[pair],
        interruptions=expected.interruptions[pair],
        rate=rate[pair],
        from_catalog=cands.group_rate_from_catalog[group[pair]],
        compute=price * hours[pair],
        egress=egress[pair],
        total=total,
    )
    per_job: list[list[Placement]] = [[] for _ in range(n)]
    spot_notes: dict[tuple[float, str], str] = {}
    job_notes: dict[int, tuple] = {}
    for k, i in enumerate(job[pair].tolist()):
        if i not in job_notes:
            job_notes[i] = _job_notes(jobs[i])
        per_job[i].append(
            figures.placement(k, len(per_job[i]) + 1, jobs[i], job_notes[i], spot_notes)
        )
    return [
        Decision(jobs[i].name, tuple(per_job[i]), tuple(rejected[i]), cands.considered)
        for i in range(n)
    ]


@dataclass(frozen=True)
class _JobParams:
    """Per-job inputs of the cost model as arrays, gathered per pair by job index."""

    factor: np.ndarray  # [job, alternative]: estimate multiplier for that GPU
    estimate: np.ndarray
    interval: np.ndarray  # checkpoint interval, minutes; NaN = no checkpoints
    writes_ckpt: np.ndarray  # checkpoint writes are priced (bucket location known)
    moves_id: np.ndarray
    hours_left: np.ndarray  # until the deadline; inf = none
    budget: np.ndarray  # inf = none

    @classmethod
    def of(cls, jobs: Sequence[JobSpec], places: _Places, now: datetime) -> _JobParams:
        import numpy as np

        from pricing.gpus import find_gpu

        max_alts = max([len(j.requirements.accelerators) for j in jobs] + [1])
        factor = np.ones((len(jobs), max_alts))
        for i, j in enumerate(jobs):
            asks = j.requirements.accelerators
            if len(asks) > 1:  # the estimate is for the first-choice GPU
                speed = [_throughput(find_gpu(a.gpu)) for a in asks]
                factor[i, : len(asks)] = [speed[0] / s for s in speed]
        return cls(
            factor=factor,
            estimate=np.array([j.runtime.estimate_hours for j in jobs]),
            interval=np.array(
                [j.checkpoint.interval_minutes if j.checkpoint else np.nan for j in jobs]
            ),
            writes_ckpt=np.array(
                [j.checkpoint is not None and j.checkpoint.location is not None for j in jobs]
            ),
            moves_id=np.array([places.moves_id(j) for j in jobs], dtype=np.int64),
            hours_left=np.array([_hours_left(j, now) for j in jobs]),
            budget=np.array(
                [j.budget.max_cost if j.budget.max_cost is not None else np.inf for j in jobs]
            ),
        )


def _count(
    rejected: list[list[Rejection]],
    job: np.ndarray,
    size: np.ndarray,
    mask: np.ndarray,
    n: int,
    reason,
) -> None:
    """Record, per job, how many candidates the (job, group) pairs in `mask` remove;
    `size` is the number of candidates each pair stands for."""
    import numpy as np

    if not mask.any():
        return
    counts = np.bincount(job[mask], weights=size[mask], minlength=n)
    for i in np.flatnonzero(counts).tolist():
        text = reason(i) if callable(reason) else reason
        rejected[i].append(Rejection(text, int(counts[i])))


def _hours_left(job: JobSpec, now: datetime) -> float:
    deadline = job.runtime.deadline_at(now)
    return float("inf") if deadline is None else (deadline - now).total_seconds() / 3600.0


def _throughput(model) -> float:
    return model.relative_throughput if model is not None else 1.0


@dataclass(frozen=True)
class _Figures:
    """The chosen pairs' figures as Python lists, extracted once per chunk."""

    columns: dict

    @classmethod
    def take(cls, index: OfferIndex, rows: np.ndarray, **values: np.ndarray) -> _Figures:
        table = index.offers
        columns = {
            name: table.categories[name][table.codes[name][rows]].tolist()
            for name in (
                "cloud",
                "region",
                "zone",
                "instance_type",
                "accelerator",
                "source",
                "as_of",
            )
        }
        columns["accelerator_count"] = table.numbers["accelerator_count"][rows].tolist()
        for name, array in values.items():
            columns[name] = array.tolist()
        return cls(columns)

    def placement(
        self,
        k: int,
        rank: int,
        job: JobSpec,
        job_notes: tuple,
        spot_notes: dict[tuple[float, str], str],
    ) -> Placement:
        """Placement k of the chunk; `spot_notes` memoises the spot note per (rate, source)."""
        c = self.columns
        is_spot = c["spot"][k]
        head, spot_extra, tail = job_notes
        source = ""
        if is_spot:
            source = "catalog" if c["from_catalog"][k] else f"default:{c['cloud'][k]}"
            key = (c["rate"][k], source)
            if key not in spot_notes:
                spot_notes[key] = _spot_note(*key)
            notes = (*head, spot_notes[key], *spot_extra, *tail)
        else:
            notes = (*head, *tail)
        estimate = CostEstimate(
            compute=c["compute"][k],
            interruption_overhead=c["price"][k] * c["overhead"][k],
            egress=c["egress"][k],
            total=c["total"][k],
            run_hours=c["run_hours"][k],
            staging_hours=c["staging"][k],
            overhead_hours=c["overhead"][k],
            expected_interruptions=c["interruptions"][k],
            interruption_rate=c["rate"][k],
            interruption_rate_source=source,
            assumptions=notes,
        )
        return Placement(
            rank=rank,
            cloud=c["cloud"][k],
            region=c["region"][k],
            zone=c["zone"][k],
            instance_type=c["instance_type"][k],
            accelerator=c["accelerator"][k],
            accelerator_count=c["accelerator_count"][k],
            nodes=job.requirements.nodes,
            market="spot" if is_spot else "on-demand",
            price_per_hour=c["price"][k],
            expected_hours=c["hours"][k],
            expected_cost=c["total"][k],
            cost=estimate,
            price_source=c["source"][k],
            price_as_of=c["as_of"][k],
        )


def _job_notes(job: JobSpec) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The assumptions of a job's plan: (notes of every placement, extra notes of a spot
    placement but its rate, notes that close the list)."""
    gpu = job.requirements.accelerators[0].gpu if job.requirements.accelerators else "CPU"
    head = (
        f"runtime estimate {job.runtime.estimate_hours:g} h on {gpu}, scaled by relative "
        "GPU throughput",
    )
    spot = (
        ()
        if job.checkpoint is not None
        else ("no checkpoint: an interruption loses half the run on average",)
    )
    tail = []
    if any(item.location is None for item in job.data):
        tail.append("inputs without a location are not priced for egress")
    if job.checkpoint is not None and job.checkpoint.location is None and job.checkpoint.size_gb:
        tail.append("checkpoint location unknown: its transfers are not priced")
    return head, spot, tuple(tail)


def _spot_note(rate: float, source: str) -> str:
    return (
        f"spot: {rate:g} interruptions/hour ({source}), each costing "
        f"{cost.RESTART_HOURS:g} h restart + lost work + checkpoint restore"
    )
