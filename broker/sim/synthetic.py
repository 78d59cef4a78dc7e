"""A seeded synthetic scenario (jobs, catalog rows, spot availability) for the tests and
demos: no file from ../shared is needed. Same seed, same scenario."""

from __future__ import annotations

import random

from broker.sim.model import Availability, SimJob, SpotTrace, TracePlace

# (cloud, region, zone, instance type, GPU, on-demand, spot, catalog interruption rate/h)
ZONES = (
    ("aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 3.06, 0.92, 0.05),
    ("aws", "us-east-2", "us-east-2a", "p3.2xlarge", "V100", 3.06, 0.95, 0.05),
    ("aws", "us-west-2", "us-west-2a", "p3.2xlarge", "V100", 3.06, 1.10, 0.05),
)


def synthetic_offers(zones=ZONES):
    """Catalog rows for `zones` (one row each; a ninth field, when given, is the GPU
    count of the instance, else 1). Each host has 8 vCPUs and 61 GiB per GPU (p3's), or
    the GPU's host floor where that is more, so a job stating no host fits it."""
    from pricing.gpus import host_floor
    from pricing.table import OfferTable

    columns: dict[str, list] = {name: [] for name in (
        "cloud", "region", "zone", "instance_type", "accelerator", "accelerator_count",
        "accelerator_memory_gib", "vcpus", "memory_gib", "interconnect", "price_on_demand",
        "price_spot", "spot_interruption_rate", "capacity", "source", "as_of")}  # fmt: skip
    for cloud, region, zone, itype, gpu, on_demand, spot, rate, *count in zones:
        gpus = float(count[0]) if count else 1.0
        floor = host_floor(gpu)
        vcpus = max(8.0, floor.vcpus_per_gpu if floor else 0.0)
        memory = max(61.0, floor.memory_gib_per_gpu if floor else 0.0)
        row = dict(cloud=cloud, region=region, zone=zone, instance_type=itype, accelerator=gpu,
                   accelerator_count=gpus, accelerator_memory_gib=16.0,
                   vcpus=vcpus * gpus, memory_gib=memory * gpus,
                   interconnect="", price_on_demand=on_demand, price_spot=spot,
                   spot_interruption_rate=rate, capacity=float("nan"), source="synthetic",
                   as_of="2026-01-01")  # fmt: skip
        for key, value in row.items():
            columns[key].append(value)
    return OfferTable.from_columns(columns)


def synthetic_availability(
    seed: int, hours: float = 96.0, step_hours: float = 0.25, zones=ZONES, capacity: int = 2
) -> SpotTrace:
    """On/off spot capacity per zone: runs of available and scarce steps of random
    lengths (a two-state Markov chain), each zone with its own steadiness."""
    rng = random.Random(seed)
    places = {}
    for k, (cloud, _region, zone, _itype, gpu, *_rest) in enumerate(zones):
        up_mean, down_mean = 6.0 + 4.0 * k, 1.5 + k  # hours
        counts, up = [], True
        while len(counts) * step_hours < hours:
            length = rng.expovariate(1.0 / (up_mean if up else down_mean))
            steps = max(1, round(length / step_hours))
            counts += [capacity if up else 0] * steps
            up = not up
        places[TracePlace(cloud, zone, gpu)] = Availability(
            step_hours, tuple(counts[: round(hours / step_hours)])
        )
    return SpotTrace(places, f"synthetic(seed={seed})")


def synthetic_jobs(
    seed: int, count: int = 6, gpu: str = "V100", spread_hours: float = 24.0
) -> list[SimJob]:
    """Single-GPU jobs of 2-12 h, half with deadlines of 1.3-2x their length."""
    rng = random.Random(seed + 1)
    jobs = []
    for i in range(count):
        hours = round(rng.uniform(2.0, 12.0), 2)
        deadline = round(hours * rng.uniform(1.3, 2.0), 2) if i % 2 == 0 else None
        jobs.append(
            SimJob(
                name=f"syn-{i}",
                team=("nlp", "vision")[i % 2],
                submit_hours=round(rng.uniform(0.0, spread_hours), 2),
                gpu=gpu,
                gpus=1,
                hours=hours,
                deadline_hours=deadline,
                checkpoint_minutes=30.0,
                checkpoint_gb=5.0,
            )
        )
    return jobs


def synthetic_scenario(seed: int = 0, jobs: int = 6):
    from broker.sim.engine import Scenario

    return Scenario(
        offers=synthetic_offers(),
        spot=synthetic_availability(seed),
        jobs=synthetic_jobs(seed, jobs),
        restart_hours=0.1,
        name=f"synthetic-{seed}",
    )
