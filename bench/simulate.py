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
    parser.add_argument("--cbl-traces", type=int, default=None,
                        help="Can't Be Late: first N trace files; 0 skips")  # fmt: skip
    args = parser.parse_args()
    traces = args.shared / "traces"
    rows = skynomad.read_results(traces / "skynomad-spot/results/v100.csv.gz")
    windows = skynomad.scenario_windows(rows)[: args.windows]
    spot = read_spot([traces / "cant-be-late-spot/availability/1-node/aws-02-15-2023"])
    prices = skynomad.read_v100_prices(traces / "skynomad-spot/aws_v100_spot_prices.json.gz")
    spot = skynomad.with_prices(spot, prices)
    costs: dict[str, list[float]] = {}
    misses: dict[str, int] = {}
    optima: list[float] = []
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
        optima.append(_optimum(part, w, 3.06))
        for policy in policies.parse(args.policy):
            result = simulate(scenario, policy)
            runs += 1
            costs.setdefault(policy.name, []).append(result.total_cost)
            misses[policy.name] = misses.get(policy.name, 0) + result.deadline_misses
    wall = time.perf_counter() - started
    published = skynomad.published_means(rows)
    ours = {name: round(sum(v) / len(v), 2) for name, v in costs.items()}
    optimum = published.get("multi_region_oracle_dp")
    ours_optimum = sum(optima) / len(optima)
    gap = {k: round(100 * (v / ours_optimum - 1), 1) for k, v in ours.items()}
    print(json.dumps({
        "scenario": "V100 3 AWS zones, 39.94 h job, deadline 1.5x, restart 0.2 h, 50 GB",
        "windows": len(windows),
        "mean_cost_usd": ours,
        "deadline_misses": misses,
        "published_mean_cost_usd": published,
        "hindsight_optimum_usd": round(ours_optimum, 2),
        "optimum_per_window_usd": [round(o, 2) for o in optima],
        "cost_per_window_usd": {k: [round(c, 2) for c in v] for k, v in costs.items()},
        "gap_to_our_optimum_percent": gap,
        "gap_to_published_optimum_usd": {k: round(v - optimum, 2) for k, v in ours.items()}
        if optimum else None,
        "simulated_jobs_per_wall_second": round(runs / wall, 3),
        "wall_seconds": round(wall, 1),
    }, indent=2))  # fmt: skip
    if args.cbl_traces != 0:
        print(json.dumps(cant_be_late(traces, args.policy, args.cbl_traces), indent=2))


def cant_be_late(traces: Path, policy_text: str, limit: int | None) -> dict:
    """Scenario 2: every Can't Be Late trace file, one zone each, a 48 h one-GPU job from
    the trace's start, deadlines 52 h and 70 h, restart 0.05 h and 0.2 h (the paper's
    public benchmark). Prices: V100 spot 0.918 and on-demand 3.06 USD/h for every file
    (the CPU files are priced as V100 too: only the ratio matters to the comparison)."""
    from broker.sim import policies
    from broker.sim.engine import Scenario, simulate
    from broker.sim.model import SimJob
    from broker.sim.synthetic import synthetic_offers
    from broker.sim.traces.spotjson import read_spot

    files = sorted((traces / "cant-be-late-spot").rglob("*.json"))[:limit]
    costs: dict[str, list[float]] = {}
    misses: dict[str, int] = {}
    started, runs = time.perf_counter(), 0
    for file in files:
        trace = read_spot([file])
        ((place, avail),) = trace.places.items()
        zone = place.location
        row = ("aws", zone[:-1], zone, "p3.2xlarge", place.kind, 3.06, 0.918, 0.05)
        for deadline in (52.0, 70.0):
            for restart in (0.05, 0.2):
                job = SimJob("cbl-job", "bench", 0.0, place.kind, 1, 48.0, deadline,
                             checkpoint_minutes=10.0, checkpoint_gb=0.0)  # fmt: skip
                scenario = Scenario(
                    synthetic_offers((row,)), trace.window(0.0, deadline + 5), [job],
                    restart_hours=restart, reconcile_hours=avail.step_hours,
                    horizon_hours=deadline * 3,
                )  # fmt: skip
                for policy in policies.parse(policy_text):
                    result = simulate(scenario, policy)
                    runs += 1
                    costs.setdefault(policy.name, []).append(result.total_cost)
                    misses[policy.name] = misses.get(policy.name, 0) + result.deadline_misses
    return {
        "scenario": "Can't Be Late traces: 48 h job, deadlines 52/70 h, restart 0.05/0.2 h",
        "trace_files": len(files),
        "runs_per_policy": len(files) * 4,
        "mean_cost_usd": {k: round(sum(v) / len(v), 2) for k, v in costs.items()},
        "deadline_misses": misses,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "simulated_jobs_per_wall_second": round(runs / max(1e-9, time.perf_counter() - started), 3),
    }


def _optimum(trace, window, on_demand_price: float) -> float:
    """Our hindsight optimum for the window (broker.sim.optimum), same model as the run."""
    from broker.sim.optimum import Market, hindsight_optimum
    from pricing.egress import Place, egress_cost

    markets, regions = [], set()
    for place, avail in sorted(trace.places.items(), key=lambda kv: str(kv[0])):
        region = place.location[:-1]
        regions.add(region)
        markets.append(Market(region, avail.prices or [0.918], [c > 0 for c in avail.counts]))
    markets += [Market(r, [on_demand_price]) for r in sorted(regions)]
    step = next(iter(trace.places.values())).step_hours
    gb = window["checkpoint_gb"]
    return hindsight_optimum(
        markets, step_hours=step, work_hours=window["task_hours"],
        deadline_hours=window["deadline_hours"], restart_hours=window["restart_hours"],
        egress=lambda a, b: egress_cost(Place("aws", a), Place("aws", b), gb),
    ).cost  # fmt: skip


if __name__ == "__main__":
    main()
