"""Benchmark: the SkyNomad / Can't Be Late multi-region V100 scenario through `broker.sim`.

3 AWS zones (us-east-1c, us-east-2b, us-west-2a: SkyNomad's results/v100.csv), the Can't
Be Late 2023-02-15 availability (195 s ticks) with SkyNomad's per-tick spot prices, a
39.94 h job, deadline 1.5x, restart 0.2 h, 50 GB checkpoint, over the windows of the
published table. Prints JSON: mean cost per policy beside the published means, deadline
misses, and simulator speed. Usage: python bench/simulate.py [--windows N] [--shared DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from broker.sim import policies
    from broker.sim.engine import Scenario, simulate
    from broker.sim.model import SimJob
    from broker.sim.synthetic import synthetic_offers
    from broker.sim.traces import skynomad
    from broker.sim.traces.spotjson import read_spot

    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument("--policy", default="broker,spot-failover,uniform-progress,on-demand")
    default = os.environ.get("BROKER_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--shared", type=Path, default=Path(default))
    args = parser.parse_args()
    traces = args.shared / "traces"
    rows = skynomad.read_results(traces / "skynomad-spot/results/v100.csv.gz")
    windows = skynomad.scenario_windows(rows)[: args.windows]
    spot = read_spot([traces / "cant-be-late-spot/availability/1-node/aws-02-15-2023"])
    prices = skynomad.read_v100_prices(traces / "skynomad-spot/aws_v100_spot_prices.json.gz")
    spot = skynomad.with_prices(spot, prices)
    costs: dict[str, list[float]] = {}
    misses: dict[str, int] = {}
    started, runs = time.perf_counter(), 0
    for w in windows:
        part = skynomad.places_for(spot, w["regions"]).window(
            w["start_hours"], w["deadline_hours"] + 5
        )
        zones = tuple(
            ("aws", p.location[:-1], p.location, "p3.2xlarge", "V100", 3.06, 0.918, 0.05)
            for p in sorted(part.places, key=str)
        )
        job = SimJob(
            "v100-job", "bench", 0.0, "V100", 1, w["task_hours"], w["deadline_hours"],
            checkpoint_minutes=10.0, checkpoint_gb=w["checkpoint_gb"],
        )  # fmt: skip
        scenario = Scenario(
            synthetic_offers(zones), part, [job], restart_hours=w["restart_hours"],
            reconcile_hours=195 / 3600, horizon_hours=w["deadline_hours"] * 3,
        )  # fmt: skip
        for policy in policies.parse(args.policy):
            result = simulate(scenario, policy)
            runs += 1
            costs.setdefault(policy.name, []).append(result.total_cost)
            misses[policy.name] = misses.get(policy.name, 0) + result.deadline_misses
    wall = time.perf_counter() - started
    published = skynomad.published_means(rows)
    ours = {name: round(sum(v) / len(v), 2) for name, v in costs.items()}
    optimum = published.get("multi_region_oracle_dp")
    print(json.dumps({
        "scenario": "V100 3 AWS zones, 39.94 h job, deadline 1.5x, restart 0.2 h, 50 GB",
        "windows": len(windows),
        "mean_cost_usd": ours,
        "deadline_misses": misses,
        "published_mean_cost_usd": published,
        "gap_to_published_optimum_usd": {k: round(v - optimum, 2) for k, v in ours.items()}
        if optimum else None,
        "simulated_jobs_per_wall_second": round(runs / wall, 3),
        "wall_seconds": round(wall, 1),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
