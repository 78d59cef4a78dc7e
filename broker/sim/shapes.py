"""The fleet-scale engine's plans: the production planner asked once per job shape.

Jobs that share a GPU, a count, a duration and deadline bucket and a checkpoint
share one plan: their ranked placements, reduced to what the loop needs (`Option`).
Also the spot trace's steps as the loop reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.sim.model import SimJob

if TYPE_CHECKING:
    from broker.sim.engine import Scenario
    from broker.sim.policies import SimPolicy

_BUCKETS_PER_DOUBLING = 4  # job shapes: durations within ~19% share one plan


@dataclass(frozen=True, slots=True)
class Option:
    """One ranked placement of a shape, reduced to what the loop needs."""

    kind: str  # "pool" | "spot" | "on-demand"
    key: object  # pool name; a spot place's number in the trace (None: untraced, open); None
    price: float  # USD per hour, all nodes
    cost_per_work_hour: float  # the planner's expected cost / the shape's work hours
    gpus: float
    label: str  # cloud/region/instance type
    region: tuple[str, str] = ("", "")  # (cloud, region)


def _bucket(hours: float) -> int:
    return round(math.log2(max(hours, 1e-6)) * _BUCKETS_PER_DOUBLING)


def _unbucket(bucket: int) -> float:
    return 2 ** (bucket / _BUCKETS_PER_DOUBLING)


def _shape(job: SimJob) -> tuple:
    deadline = None if job.deadline_hours is None else _bucket(job.deadline_hours)
    return (job.gpu, job.gpus, _bucket(job.hours), deadline, job.checkpoint_minutes,
            job.checkpoint_gb)  # fmt: skip


def plan_shapes(scenario: Scenario, policy: SimPolicy, jobs: list[SimJob]) -> list[list[Option]]:
    """Each job's ranked options, from one `plan_many` call over one job per shape."""
    from dataclasses import replace

    from broker.manifest.load import parse_manifest_text
    from broker.planner.plan import plan_many
    from broker.sim.engine import ORIGIN, ranked_index
    from broker.sim.manifests import manifest_text
    from broker.sim.places import expand_zones, governing

    places = sorted(scenario.spot.places, key=str)
    table = expand_zones(scenario.offers, places)
    index = ranked_index(table, policy.price_only)
    shapes: dict[tuple, int] = {}
    reps: list[SimJob] = []
    of_job = []
    for job in jobs:
        key = _shape(job)
        if key not in shapes:
            shapes[key] = len(reps)
            hours = _unbucket(key[2])
            deadline = None if key[3] is None else max(_unbucket(key[3]), hours)
            reps.append(replace(job, name=f"shape-{len(reps)}", hours=hours,
                                deadline_hours=deadline, submit_hours=0.0))  # fmt: skip
        of_job.append(shapes[key])
    specs = []
    for rep in reps:
        spot = "prefer" if policy.spot == "only" else policy.spot  # rank both markets
        (manifest,) = parse_manifest_text(manifest_text(rep, spot, scenario.clouds))
        specs.append(manifest.spec)
    decisions = plan_many(specs, index, ORIGIN, top=10_000)
    by_key = {(p.cloud, p.location, p.kind): p for p in places}
    number = {p: k for k, p in enumerate(scenario.spot.places)}  # the loop's place ids
    pools = {name for (_c, name) in scenario.pool_gpus}
    per_shape = []
    for rep, decision in zip(reps, decisions, strict=True):
        options = []
        for p in decision.placements:
            gpus = float(p.accelerator_count) * p.nodes
            per_hour = p.expected_cost / max(rep.hours, 1e-9)
            label = f"{p.cloud}/{p.zone or p.region}/{p.instance_type}"
            region = (p.cloud, p.region)
            if p.cloud == "onprem":
                if p.zone in pools:
                    options.append(
                        Option("pool", p.zone, p.price_per_hour, per_hour, gpus, label, region)
                    )
                continue
            if p.market == "spot":
                place = governing(by_key, p.cloud, p.zone, p.region, p.instance_type, p.accelerator)
                if place is None and scenario.untraced_spot == "closed":
                    continue
                key = None if place is None else number[place]
                options.append(Option("spot", key, p.price_per_hour, per_hour, gpus, label, region))
            else:
                options.append(
                    Option("on-demand", None, p.price_per_hour, per_hour, gpus, label, region)
                )
        per_shape.append(options)
    return [per_shape[s] for s in of_job]


def changes(trace, horizon: float) -> dict[float, list[tuple[int, int]]]:
    """Trace step hour -> [(place number, new count)], for the steps that change a count."""
    out: dict[float, list[tuple[int, int]]] = {}
    for k, availability in enumerate(trace.places.values()):
        counts = availability.counts
        for t in availability.changes():
            if t > horizon:
                break
            out.setdefault(t, []).append((k, counts[availability.index(t)]))
    return dict(sorted(out.items()))
