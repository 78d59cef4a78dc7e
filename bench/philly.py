"""Benchmark: Philly at scale (issue 8, reference scenario 3) through broker.sim.scale.

The 82,247-job Philly list (../shared/traces/philly) mapped onto A100 (the one GPU all
three clouds sell in 1- and 8-GPU shapes), a 64-GPU on-prem pool (bench/philly_pools.yaml),
and AWS, GCP and Azure spot capacity from the traces, replayed end to end over the
trace's 108 days:
- AWS: Can't Be Late's 2023-02-15 V100 availability of 9 zones, read as A100 capacity
  in the same zones (the catalog sells A100 in us-east-1 and us-west-2);
- GCP: SpotHedge's A100 traces of 6 zones (32 h, repeated);
- Azure (no public trace): Can't Be Late's 2022-10-26 us-west-2a/2b V100 traces,
  replayed onto eastus and westus2.
Every trace is repeated to cover the run; a count of 1 stands for `--spot-scale` runs.
Jobs get a deadline of `--deadline-factor` x their duration + 1 h (Philly has none).
Prints JSON per policy and the wall time. Usage: python bench/philly.py [--limit N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POLICIES = "on-demand,spot-failover,uniform-progress,broker,burst-always"


def scenario(shared: Path, limit: int | None, deadline_factor: float):
    from dataclasses import replace

    from broker.offers import load_offers
    from broker.scheduling import pool_gpus_of
    from broker.sim.engine import Scenario
    from broker.sim.model import SpotTrace, TracePlace
    from broker.sim.traces.jobs import read_philly
    from broker.sim.traces.spotjson import read_spot

    traces = shared / "traces"
    jobs = read_philly(traces / "philly/philly_jobs.csv.gz", gpu="A100", limit=limit).jobs
    # a deadline of factor x the duration, plus an hour: a job of minutes still has to start
    jobs = [replace(j, deadline_hours=j.hours * deadline_factor + 1.0) for j in jobs]
    span = max(j.submit_hours + j.hours for j in jobs) * 1.5 + 24
    aws = read_spot([traces / "cant-be-late-spot/availability/1-node/aws-02-15-2023"])
    gcp = read_spot([traces / "spothedge-spot/data/GCP1"])
    old = read_spot([traces / "cant-be-late-spot/availability/1-node/aws-10-26-2022"])
    places = {TracePlace("aws", p.location, "A100"): a for p, a in aws.places.items()}
    places.update(gcp.places)
    azure = {"us-west-2a": "eastus", "us-west-2b": "westus2"}
    for p, a in sorted(old.places.items(), key=lambda kv: str(kv[0])):
        if p.kind == "V100" and p.location in azure:
            places.setdefault(TracePlace("azure", azure[p.location], "A100"), a)
    spot = SpotTrace(places, "philly bench").cycled(span)
    view = load_offers(None, Path(__file__).with_name("philly_pools.yaml"))
    return Scenario(
        offers=view.index.offers, spot=spot, jobs=jobs, restart_hours=0.1,
        reconcile_hours=0.25, horizon_hours=span, pool_gpus=pool_gpus_of(view.index),
        name="philly at scale",
    )  # fmt: skip


_SCENARIO = None  # built once in the parent; forked workers inherit it


def run_one(args: tuple) -> dict:
    from broker.sim import policies
    from broker.sim.scale import simulate_at_scale

    name, scale = args
    started = time.perf_counter()
    (policy,) = policies.parse(name)
    result = simulate_at_scale(_SCENARIO, policy, spot_scale=scale).as_dict(series=False)
    result["wall_seconds"] = round(time.perf_counter() - started, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    default = os.environ.get("BROKER_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--shared", type=Path, default=Path(default))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--policy", default=POLICIES)
    parser.add_argument("--deadline-factor", type=float, default=3.0)
    parser.add_argument("--spot-scale", type=int, default=8)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    global _SCENARIO
    names = [n for n in args.policy.split(",") if n]
    started = time.perf_counter()
    _SCENARIO = scenario(args.shared, args.limit, args.deadline_factor)
    setup = time.perf_counter() - started
    work = [(n, args.spot_scale) for n in names]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=max(1, args.workers), mp_context=context) as pool:
        results = list(pool.map(run_one, work))
    wall = time.perf_counter() - started
    base = next((r["total_cost"] for r in results if r["policy"] == "on-demand"), None)
    for r in results:
        r["cost_vs_on_demand"] = round(r["total_cost"] / base, 4) if base else None
    print(json.dumps({
        "scenario": "Philly at scale: 64 A100 on-prem + AWS/GCP/Azure spot from traces",
        "jobs": results[0]["jobs"] if results else 0,
        "deadline_factor": args.deadline_factor,
        "spot_scale": args.spot_scale,
        "results": results,
        "setup_seconds": round(setup, 1),
        "wall_seconds_total": round(wall, 1),
        "workers": args.workers,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
