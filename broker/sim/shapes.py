"""The fleet-scale engine's plans: the production planner asked once per job shape.

Jobs that share a GPU, a count, a duration and deadline bucket and a checkpoint
share one plan per place their checkpoint lies in: their ranked placements, reduced to
what the loop needs (`Option`).
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
    # the planner's figures, to re-cost a spot option at a learned rate (broker.sim.scale_rates)
    planned_cost: float = 0.0
    planned_hours: float = 0.0
    rate_key: tuple[str, str, str] | None = None  # (cloud, region, instance type)
    rate: float = 0.0  # the planner's rate (the catalog's, or the cloud's default)
    per_interruption: float = 0.0  # hours each interruption costs
    work: float = 0.0  # run + staging hours
    egress: float = 0.0
    hours_left: float = math.inf  # to the deadline, as the planner counts it


def _bucket(hours: float) -> int:
    return round(math.log2(max(hours, 1e-6)) * _BUCKETS_PER_DOUBLING)


def _unbucket(bucket: int) -> float:
    return 2 ** (bucket / _BUCKETS_PER_DOUBLING)


def _shape(job: SimJob) -> tuple:
    deadline = None if job.deadline_hours is None else _bucket(job.deadline_hours)
    return (job.gpu, job.gpus, _bucket(job.hours), deadline, job.checkpoint_minutes,
            job.checkpoint_gb)  # fmt: skip


class ShapePlans:
    """Each job's ranked options: the production planner asked once per job shape and
    place of its checkpoint (where the job last ran: a move from there is priced as the
    controller's plan prices it, one copy), lazily, each answer kept."""

    def __init__(self, scenario: Scenario, policy: SimPolicy, jobs: list[SimJob]) -> None:
        from dataclasses import replace

        from broker.manifest.load import parse_manifest_text
        from broker.sim.engine import ranked_index
        from broker.sim.manifests import manifest_text
        from broker.sim.places import expand_zones

        self.scenario = scenario
        self.places = sorted(scenario.spot.places, key=str)
        self.index = ranked_index(expand_zones(scenario.offers, self.places), policy.price_only)
        self.by_key = {(p.cloud, p.location, p.kind): p for p in self.places}
        self.number = {p: k for k, p in enumerate(scenario.spot.places)}  # the loop's place ids
        self.pools = {name for (_c, name) in scenario.pool_gpus}
        shapes: dict[tuple, int] = {}
        self.reps: list[SimJob] = []
        self.of_job: list[int] = []
        for job in jobs:
            key = _shape(job)
            if key not in shapes:
                shapes[key] = len(self.reps)
                hours = _unbucket(key[2])
                deadline = None if key[3] is None else max(_unbucket(key[3]), hours)
                self.reps.append(replace(job, name=f"shape-{len(self.reps)}", hours=hours,
                                         deadline_hours=deadline, submit_hours=0.0))  # fmt: skip
            self.of_job.append(shapes[key])
        spot = "prefer" if policy.spot == "only" else policy.spot  # rank both markets
        self.specs = []
        for rep in self.reps:
            (manifest,) = parse_manifest_text(manifest_text(rep, spot, scenario.clouds))
            self.specs.append(manifest.spec)
        self._plans: dict[tuple[int, tuple[str, str] | None], list[Option]] = {}
        firsts = self._plan([(s, None) for s in range(len(self.reps))])
        self._plans.update(firsts)

    def options(self, i: int, home: tuple[str, str] | None = None) -> list[Option]:
        """Job `i`'s ranked options with its checkpoint saved in `home` (cloud, region)."""
        shape = self.of_job[i]
        if not self.specs[shape].checkpoint or not self.reps[shape].checkpoint_gb:
            home = None  # nothing to move: the same plan everywhere
        key = (shape, home)
        if key not in self._plans:
            self._plans.update(self._plan([key]))
        return self._plans[key]

    def _plan(self, keys: list[tuple[int, tuple[str, str] | None]]) -> dict:
        from broker.planner.plan import plan_many
        from broker.recovery import with_checkpoint_at
        from broker.sim.engine import ORIGIN
        from pricing.regions import Place

        specs = [
            with_checkpoint_at(self.specs[s], None if home is None else Place(*home))
            for s, home in keys
        ]
        decisions = plan_many(specs, self.index, ORIGIN, top=10_000)
        return {
            key: self._options(self.reps[key[0]], spec, decision)
            for key, spec, decision in zip(keys, specs, decisions, strict=True)
        }

    def _options(self, rep: SimJob, spec, decision) -> list[Option]:
        from broker.dispatch.steered import steered
        from broker.planner.cost import copy_hours
        from broker.sim.engine import ORIGIN
        from broker.sim.places import governing

        ckpt = spec.checkpoint
        moves = ckpt is not None and ckpt.location is not None and ckpt.size_gb
        restore = copy_hours(ckpt.size_gb, "same_region") if moves else 0.0  # a store per place
        deadline = spec.runtime.deadline_at(ORIGIN)
        left = math.inf if deadline is None else (deadline - ORIGIN).total_seconds() / 3600.0
        if steered(spec.requirements.spot, deadline is not None):
            left = math.inf  # its spot policy owns the deadline (the planner's rule)
        options = []
        for p in decision.placements:
            gpus = float(p.accelerator_count) * p.nodes
            per_hour = p.expected_cost / max(rep.hours, 1e-9)
            label = f"{p.cloud}/{p.zone or p.region}/{p.instance_type}"
            region = (p.cloud, p.region)
            if p.cloud == "onprem":
                if p.zone in self.pools:
                    options.append(
                        Option("pool", p.zone, p.price_per_hour, per_hour, gpus, label, region,
                               planned_cost=p.expected_cost, planned_hours=p.expected_hours)
                    )  # fmt: skip
                continue
            if p.market == "spot":
                place = governing(
                    self.by_key, p.cloud, p.zone, p.region, p.instance_type, p.accelerator
                )
                if place is None and self.scenario.untraced_spot == "closed":
                    continue
                key = None if place is None else self.number[place]
                c = p.cost
                options.append(Option(
                    "spot", key, p.price_per_hour, per_hour, gpus, label, region,
                    planned_cost=p.expected_cost, planned_hours=p.expected_hours,
                    rate_key=(p.cloud, p.region, p.instance_type), rate=c.interruption_rate,
                    per_interruption=_per_interruption(spec, c.run_hours, restore),
                    work=c.run_hours + c.staging_hours, egress=c.egress, hours_left=left,
                ))  # fmt: skip
            else:
                options.append(
                    Option("on-demand", None, p.price_per_hour, per_hour, gpus, label, region,
                           planned_cost=p.expected_cost, planned_hours=p.expected_hours)
                )  # fmt: skip
        return options


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


def _per_interruption(spec, run_hours: float, restore_hours: float) -> float:
    """Hours one interruption costs, as the planner counts them (broker.planner.cost)."""
    import numpy as np

    from broker.planner.cost import lost_hours_per_interruption

    ckpt = spec.checkpoint
    interval = np.array([np.nan if ckpt is None else ckpt.interval_minutes])
    return float(
        lost_hours_per_interruption(interval, np.array([run_hours]), np.array([restore_hours]))[0]
    )
