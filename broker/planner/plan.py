"""The planner: (JobSpec, offers, now) -> Decision, a pure function.

Step 1 (`filters.find_candidates`) keeps the offer x market pairs that satisfy
the requirements. Step 2 (here) prices each candidate with the cost model of
`cost.py`, drops the ones that miss the deadline or the budget, and ranks the
rest by expected total cost, then expected hours, then a stable key (the
manifest's order of GPU alternatives, the catalog row, on-demand before spot),
so that the same input always gives the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from broker.planner import cost
from broker.planner.decision import CostEstimate, Decision, Placement, Rejection
from broker.planner.filters import Candidates, find_candidates
from broker.spec import JobSpec, Place

if TYPE_CHECKING:
    import numpy as np

    from pricing.query import OfferIndex

DEFAULT_TOP = 5


@dataclass(frozen=True)
class _Priced:
    """Per-candidate figures of step 2 (arrays aligned with Candidates)."""

    run_hours: np.ndarray
    staging_hours: np.ndarray
    total_hours: np.ndarray
    overhead_hours: np.ndarray
    interruptions: np.ndarray
    rate: np.ndarray
    rate_from_catalog: np.ndarray
    compute: np.ndarray
    overhead_cost: np.ndarray
    egress: np.ndarray
    total: np.ndarray
    risky_hours: np.ndarray  # hours with interruptions DEADLINE_RISK_FACTOR times likelier


def plan(
    job: JobSpec,
    index: OfferIndex,
    now: datetime,
    top: int = DEFAULT_TOP,
    candidates: Candidates | None = None,
) -> Decision:
    """Rank the feasible placements of `job` (see module docstring).

    `candidates` lets a batch reuse step 1 for jobs with the same requirements.
    """
    import numpy as np

    cands = candidates if candidates is not None else find_candidates(job.requirements, index)
    rejected = list(cands.rejected)
    priced = _price(job, index, cands)
    keep = np.isfinite(priced.total_hours)
    _drop(rejected, keep, "spot interruptions too frequent to ever finish")
    deadline = job.runtime.deadline_at(now)
    if deadline is not None:
        hours_left = (deadline - now).total_seconds() / 3600.0
        _drop(
            rejected, keep, "misses the deadline (risk-adjusted)", priced.risky_hours <= hours_left
        )
    if job.budget.max_cost is not None:
        _drop(
            rejected,
            keep,
            f"over budget {job.budget.max_cost:g} USD",
            priced.total <= job.budget.max_cost,
        )
    positions = np.flatnonzero(keep)
    order = np.lexsort(
        (
            cands.spot[positions],  # on-demand first on a tie
            cands.rows[positions],
            cands.alternative[positions],
            priced.total_hours[positions],
            priced.total[positions],
        )
    )
    chosen = positions[order[:top]]
    placements = tuple(
        _placement(rank, job, index, cands, priced, int(i))
        for rank, i in enumerate(chosen, start=1)
    )
    return Decision(job.name, placements, tuple(rejected), cands.considered)


def plan_many(
    jobs: Sequence[JobSpec], index: OfferIndex, now: datetime, top: int = DEFAULT_TOP
) -> list[Decision]:
    """Plan a batch: jobs with the same requirements share one candidate search."""
    shared: dict = {}
    decisions = []
    for job in jobs:
        cands = shared.get(job.requirements)
        if cands is None:
            cands = shared[job.requirements] = find_candidates(job.requirements, index)
        decisions.append(plan(job, index, now, top=top, candidates=cands))
    return decisions


def _drop(
    rejected: list[Rejection], keep: np.ndarray, reason: str, mask: np.ndarray | None = None
) -> None:
    """Clear `keep` where `mask` is False (or where keep already is), counting newly removed."""
    if mask is None:
        removed = int(len(keep) - keep.sum())
        if removed:
            rejected.append(Rejection(reason, removed))
        return
    newly = keep & ~mask
    removed = int(newly.sum())
    if removed:
        rejected.append(Rejection(reason, removed))
        keep &= mask


def _price(job: JobSpec, index: OfferIndex, cands: Candidates) -> _Priced:
    import numpy as np

    from pricing.gpus import find_gpu

    table = index.offers
    rows = cands.rows
    asks = job.requirements.accelerators
    if asks:
        speed = np.array([_throughput(find_gpu(a.gpu)) for a in asks])
        factor = speed[0] / speed  # the estimate is for the first-choice GPU
        run_hours = job.runtime.estimate_hours * factor[cands.alternative]
    else:
        run_hours = np.full(len(rows), job.runtime.estimate_hours)
    places = _PlaceCosts.build(job, index, rows)
    staging = places.staging_hours
    work = run_hours + staging
    catalog_rate = table.numbers["spot_interruption_rate"][rows]
    clouds = table.categories["cloud"][table.codes["cloud"][rows]]
    default_rate = np.array([cost.DEFAULT_INTERRUPTION_RATE.get(c, 0.05) for c in clouds.tolist()])
    from_catalog = ~np.isnan(catalog_rate)
    rate = np.where(cands.spot, np.where(from_catalog, catalog_rate, default_rate), 0.0)
    interval = job.checkpoint.interval_minutes if job.checkpoint else None
    per_interruption = cost.lost_hours_per_interruption(interval, run_hours, places.restore_hours)
    expected = cost.spot_hours(work, rate, per_interruption)
    risky = cost.spot_hours(work, rate * cost.DEADLINE_RISK_FACTOR, per_interruption)
    price = cands.price_per_hour
    with np.errstate(invalid="ignore"):  # inf x 0 on never-finishing spot; dropped later
        compute = price * expected.total
        egress = places.egress_in + expected.interruptions * places.restore_egress
        if job.checkpoint is not None and job.checkpoint.location is not None:
            writes = expected.total * 60.0 / job.checkpoint.interval_minutes
            egress = egress + writes * places.checkpoint_write_egress
    return _Priced(
        run_hours=run_hours,
        staging_hours=staging,
        total_hours=expected.total,
        overhead_hours=expected.overhead,
        interruptions=expected.interruptions,
        rate=rate,
        rate_from_catalog=from_catalog,
        compute=compute,
        overhead_cost=price * expected.overhead,
        egress=egress,
        total=compute + egress,
        risky_hours=risky.total,
    )


def _throughput(model) -> float:
    return model.relative_throughput if model is not None else 1.0


@dataclass(frozen=True)
class _PlaceCosts:
    """What the job's data and checkpoint cost to move, per candidate's region."""

    staging_hours: np.ndarray
    egress_in: np.ndarray  # USD to bring inputs in, once
    restore_hours: np.ndarray  # hours to bring the checkpoint in after an interruption
    restore_egress: np.ndarray  # USD per checkpoint restore
    checkpoint_write_egress: np.ndarray  # USD per checkpoint written to its bucket

    @classmethod
    def build(cls, job: JobSpec, index: OfferIndex, rows: np.ndarray) -> _PlaceCosts:
        """Compute per distinct (cloud, region) of the candidates, then spread to rows."""
        import numpy as np

        from pricing.egress import Place as EgressPlace
        from pricing.egress import egress_price

        table = index.offers
        cloud_codes, region_codes = table.codes["cloud"][rows], table.codes["region"][rows]
        n_regions = max(len(table.categories["region"]), 1)
        pair = cloud_codes.astype(np.int64) * n_regions + region_codes
        distinct, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
        countries = index.country_names()[index.country_codes()[rows[first]]] if len(rows) else []
        ckpt = job.checkpoint
        figures = np.zeros((len(distinct), 5))
        for i, (code, country) in enumerate(zip(distinct.tolist(), list(countries), strict=True)):
            here = EgressPlace(
                table.categories["cloud"][code // n_regions],
                table.categories["region"][code % n_regions],
                country=country,
            )
            staging = egress_in = 0.0
            for item in job.data:
                source = _egress_place(item.location, index)
                if source is None:
                    continue
                move = egress_price(source, here)
                staging += cost.copy_hours(item.size_gb, move.scope)
                egress_in += item.size_gb * move.price_per_gb
            restore_hours = restore_egress = write_egress = 0.0
            if ckpt is not None and ckpt.size_gb:
                bucket = _egress_place(ckpt.location, index)
                if bucket is not None:
                    restore = egress_price(bucket, here)
                    restore_hours = cost.copy_hours(ckpt.size_gb, restore.scope)
                    restore_egress = ckpt.size_gb * restore.price_per_gb
                    write_egress = ckpt.size_gb * egress_price(here, bucket).price_per_gb
            figures[i] = (staging, egress_in, restore_hours, restore_egress, write_egress)
        per_row = figures[inverse] if len(rows) else np.zeros((0, 5))
        return cls(*(per_row[:, k] for k in range(5)))


def _egress_place(location: Place | None, index: OfferIndex):
    """Where data lives for pricing: its declared location, else None (not priced)."""
    from pricing.egress import Place as EgressPlace

    if location is None:
        return None
    country = index.extra_countries.get((location.cloud, location.region), "")
    return EgressPlace(location.cloud, location.region, country=country)


def _placement(
    rank: int, job: JobSpec, index: OfferIndex, cands: Candidates, priced: _Priced, i: int
) -> Placement:
    table = index.offers
    row = int(cands.rows[i])
    text = {name: table.categories[name][table.codes[name][row]] for name in table.codes}
    is_spot = bool(cands.spot[i])
    source = "catalog" if priced.rate_from_catalog[i] else f"default:{text['cloud']}"
    assumptions = _assumptions(job, is_spot, float(priced.rate[i]), source)
    estimate = CostEstimate(
        compute=float(priced.compute[i]),
        interruption_overhead=float(priced.overhead_cost[i]),
        egress=float(priced.egress[i]),
        total=float(priced.total[i]),
        run_hours=float(priced.run_hours[i]),
        staging_hours=float(priced.staging_hours[i]),
        overhead_hours=float(priced.overhead_hours[i]),
        expected_interruptions=float(priced.interruptions[i]),
        interruption_rate=float(priced.rate[i]),
        interruption_rate_source=source if is_spot else "",
        assumptions=assumptions,
    )
    return Placement(
        rank=rank,
        cloud=text["cloud"],
        region=text["region"],
        zone=text["zone"],
        instance_type=text["instance_type"],
        accelerator=text["accelerator"],
        accelerator_count=float(table.numbers["accelerator_count"][row]),
        nodes=job.requirements.nodes,
        market="spot" if is_spot else "on-demand",
        price_per_hour=float(cands.price_per_hour[i]),
        expected_hours=float(priced.total_hours[i]),
        expected_cost=float(priced.total[i]),
        cost=estimate,
        price_source=text["source"],
        price_as_of=text["as_of"],
    )


def _assumptions(job: JobSpec, is_spot: bool, rate: float, source: str) -> tuple[str, ...]:
    notes = [
        f"runtime estimate {job.runtime.estimate_hours:g} h on "
        f"{job.requirements.accelerators[0].gpu if job.requirements.accelerators else 'CPU'}"
        ", scaled by relative GPU throughput"
    ]
    if is_spot:
        notes.append(
            f"spot: {rate:g} interruptions/hour ({source}), each costing "
            f"{cost.RESTART_HOURS:g} h restart + lost work + checkpoint restore"
        )
        if job.checkpoint is None:
            notes.append("no checkpoint: an interruption loses half the run on average")
    if any(item.location is None for item in job.data):
        notes.append("inputs without a location are not priced for egress")
    if job.checkpoint is not None and job.checkpoint.location is None and job.checkpoint.size_gb:
        notes.append("checkpoint location unknown: its transfers are not priced")
    return tuple(notes)
