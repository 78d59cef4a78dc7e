"""Benchmark: the SkyNomad / Can't Be Late multi-region V100 scenario through `broker.sim`.

3 AWS zones (us-east-1c, us-east-2b, us-west-2a: SkyNomad's results/v100.csv), the Can't
Be Late 2023-02-15 availability (195 s ticks) with SkyNomad's per-tick spot prices, a
39.94 h job, deadline 1.5x, restart 0.2 h, 50 GB checkpoint, over the windows of the
published table. Prints JSON: mean cost per policy beside the published means, deadline
misses, and simulator speed. Usage: python bench/simulate.py [--windows N] [--shared DIR].
`--suite cant-be-late` runs only the Can't Be Late traces (34 files x 4 starts x 2
deadlines x 2 restarts per policy), with the runs' CPU seconds beside the wall time.
"""

from __future__ import annotations

import argparse
import functools
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
    parser.add_argument("--cbl-starts", type=int, default=4,
                        help="Can't Be Late: start offsets per trace file")  # fmt: skip
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="processes for the Can't Be Late runs")  # fmt: skip
    parser.add_argument("--cbl-detail", type=Path, default=None,
                        help="Can't Be Late: write every run's cost here (JSON)")  # fmt: skip
    parser.add_argument("--suite", choices=["skynomad", "cant-be-late"], default=None,
                        help="only every SkyNomad scenario the simulator replays, or only "
                             "the Can't Be Late runs")  # fmt: skip
    parser.add_argument("--suite-limit", type=int, default=None, help="first N scenarios")
    parser.add_argument("--suite-detail", type=Path, default=None,
                        help="suite: write every run's cost here (JSON)")  # fmt: skip
    args = parser.parse_args()
    traces = args.shared / "traces"
    if args.suite == "skynomad":
        from skynomad_suite import run_suite

        print(json.dumps(run_suite(traces, args.policy, workers=_workers(args.workers),
                                   limit=args.suite_limit, detail=args.suite_detail),
                         indent=2))  # fmt: skip
        return
    if args.suite == "cant-be-late":
        summary = cant_be_late(traces, args.policy, args.cbl_traces, starts=args.cbl_starts,
                               workers=args.workers, detail=args.cbl_detail)  # fmt: skip
        print(json.dumps(summary, indent=2))
        return
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
        summary = cant_be_late(traces, args.policy, args.cbl_traces, starts=args.cbl_starts,
                               workers=args.workers, detail=args.cbl_detail)  # fmt: skip
        print(json.dumps(summary, indent=2))


CBL_DEADLINES = (52.0, 70.0)  # hours; the paper's public benchmark
CBL_RESTARTS = (0.05, 0.2)  # hours
CBL_JOB_HOURS, CBL_TAIL_HOURS = 48.0, 5.0  # the job; trace kept past the deadline
CBL_GPU = ("p3.2xlarge", "V100", 3.06, 0.918)  # instance, GPU, on-demand, spot USD/h


def cant_be_late(
    traces: Path,
    policy_text: str,
    limit: int | None,
    *,
    starts: int = 4,
    workers: int | None = None,
    detail: Path | None = None,
) -> dict:
    """Scenario 2: every Can't Be Late trace file, one zone each, a 48 h one-GPU job,
    deadlines 52 h and 70 h, restart 0.05 h and 0.2 h (the paper's public benchmark),
    from `starts` start offsets per file (the paper replays many start times). Every
    file is priced and named as V100 p3.2xlarge, spot 0.918 and on-demand 3.06 USD/h,
    trace prices dropped (the K80 and CPU files too: only the ratio matters to the
    comparison). Runs go to a process pool; results keep the task order."""
    files = sorted((traces / "cant-be-late-spot").rglob("*.json"))[:limit]
    items = [part.strip() for part in policy_text.split(",") if part.strip()]
    tasks = cbl_tasks(files, items, starts)
    started = time.perf_counter()
    results = _run_pool(tasks, workers)
    wall = time.perf_counter() - started
    root = traces / "cant-be-late-spot"
    rows = [
        {"file": str(Path(t[0]).relative_to(root)), "start_hours": t[1], "deadline_hours": t[2],
         "restart_hours": t[3], "policy": t[4], "cost_usd": r[0], "deadline_misses": r[1]}
        for t, r in zip(tasks, results, strict=True)
    ]  # fmt: skip
    if detail is not None:
        detail.write_text(json.dumps(rows, indent=1))
    out = cbl_summary(rows)
    return {
        "scenario": "Can't Be Late traces: 48 h job, deadlines 52/70 h, restart 0.05/0.2 h, "
        "every file as V100 (spot 0.918, on-demand 3.06 USD/h)",
        "trace_files": len(files),
        "start_offsets_per_file": starts,
        "windows": len({(r["file"], r["start_hours"], r["deadline_hours"]) for r in rows}),
        **out,
        "workers": _workers(workers),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(sum(r[2] for r in results), 1),  # the runs', in every worker
        "simulated_jobs_per_wall_second": round(len(rows) / max(1e-9, wall), 3),
    }


def cbl_starts(trace_hours: float, span_hours: float, step_hours: float, n: int) -> list[float]:
    """Up to `n` start offsets (whole ticks), evenly spaced so [start, start + span] fits
    in the trace; fewer when the file is short, offset 0 always (a file shorter than the
    span runs once, its last tick holding)."""
    room = trace_hours - span_hours
    if n <= 1 or room < step_hours:
        return [0.0]
    ticks = sorted({int(room * i / (n - 1) / step_hours + 1e-9) for i in range(n)})
    return [t * step_hours for t in ticks]


def cbl_tasks(files: list[Path], items: list[str], starts: int) -> list[tuple]:
    """(file, start, deadline, restart, policy) for every run, in report order."""
    tasks = []
    for file in files:
        avail = _cbl_trace(str(file))[1]
        for deadline in CBL_DEADLINES:
            span = deadline + CBL_TAIL_HOURS
            for start in cbl_starts(avail.hours, span, avail.step_hours, starts):
                for restart in CBL_RESTARTS:
                    tasks += [(str(file), start, deadline, restart, item) for item in items]
    return tasks


def cbl_summary(rows: list[dict]) -> dict:
    """Per policy mean cost, misses and runs; mean cost per (deadline, restart); and
    where broker costs more than uniform-progress or misses (worst 10 by difference)."""
    costs: dict[str, list[float]] = {}
    misses: dict[str, int] = {}
    by_setting: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        costs.setdefault(r["policy"], []).append(r["cost_usd"])
        misses[r["policy"]] = misses.get(r["policy"], 0) + r["deadline_misses"]
        key = f"deadline {r['deadline_hours']:g} h, restart {r['restart_hours']:g} h"
        by_setting.setdefault(key, {}).setdefault(r["policy"], []).append(r["cost_usd"])
    out: dict = {
        "runs": {k: len(v) for k, v in costs.items()},
        "mean_cost_usd": {k: _mean(v) for k, v in costs.items()},
        "deadline_misses": misses,
        "mean_cost_usd_by_setting": {
            key: {k: _mean(v) for k, v in per.items()} for key, per in by_setting.items()
        },
    }
    if "broker" in costs and "uniform-progress" in costs:
        out["broker_vs_uniform_progress"] = _compare(rows, "broker", "uniform-progress")
    return out


def _compare(rows: list[dict], ours: str, theirs: str) -> dict:
    def key(r: dict) -> tuple:
        return r["file"], r["start_hours"], r["deadline_hours"], r["restart_hours"]

    base = {key(r): r["cost_usd"] for r in rows if r["policy"] == theirs}
    runs = [r for r in rows if r["policy"] == ours and key(r) in base]
    diffs = [(r["cost_usd"] - base[key(r)], r) for r in runs]
    costlier = sorted((d for d in diffs if d[0] > 0.005), key=lambda d: -d[0])
    return {
        "runs": len(runs),
        "costlier_runs": len(costlier),
        "cheaper_runs": sum(d < -0.005 for d, _ in diffs),
        "worst_10": [
            {
                **_where(r),
                ours: round(r["cost_usd"], 2),
                theirs: round(base[key(r)], 2),
                "difference_usd": round(d, 2),
            }
            for d, r in costlier[:10]
        ],  # fmt: skip
        f"{ours}_missed": [_where(r) for r in runs if r["deadline_misses"]],
    }


def _where(r: dict) -> dict:
    keys = ("file", "start_hours", "deadline_hours", "restart_hours")
    return {k: round(r[k], 3) if k == "start_hours" else r[k] for k in keys}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2)


def _workers(workers: int | None) -> int:
    return max(1, workers or os.cpu_count() or 1)


def _run_pool(tasks: list[tuple], workers: int | None) -> list[tuple[float, int, float]]:
    """Every task's (cost, misses, CPU seconds), in task order; the longest windows (most
    ticks) are handed out first so the pool ends together."""
    n = _workers(workers)
    if n == 1:
        return [_cbl_run(t) for t in tasks]
    from concurrent.futures import ProcessPoolExecutor

    def ticks(i: int) -> float:
        return (tasks[i][2] + CBL_TAIL_HOURS) / _cbl_trace(tasks[i][0])[1].step_hours

    order = sorted(range(len(tasks)), key=lambda i: (-ticks(i), i))
    with ProcessPoolExecutor(max_workers=n) as pool:
        futures = {i: pool.submit(_cbl_run, tasks[i]) for i in order}
        return [futures[i].result() for i in range(len(tasks))]


@functools.lru_cache(maxsize=64)
def _cbl_trace(file: str):
    """The file's zone (its name up to "_"; spotjson.place_of rejects the GCP names
    like us-central1-a_c3-88.json) as a V100 place, and its counts per tick; prices
    dropped so every file sells spot at the catalog's 0.918 USD/h."""
    from broker.sim.model import Availability, TracePlace
    from broker.sim.traces.spotjson import cloud_of

    path = Path(file)
    data = json.loads(path.read_text())
    zone = path.name.split("_", 1)[0]
    counts = tuple(int(v) for v in data["data"])
    step = float(data["metadata"]["gap_seconds"]) / 3600
    return TracePlace(cloud_of(zone, path), zone, CBL_GPU[1]), Availability(step, counts)


def _cbl_run(task: tuple) -> tuple[float, int, float]:
    """One simulation: (file, start, deadline, restart, policy) -> (cost, misses, CPU
    seconds of the process for it)."""
    from broker.sim.engine import simulate

    scenario, policy = cbl_scenario(task)
    started = time.process_time()
    result = simulate(scenario, policy)
    return result.total_cost, result.deadline_misses, time.process_time() - started


def cbl_scenario(task: tuple):
    """The scenario and policy of one Can't Be Late run (file, start, deadline, restart,
    policy); bench/engine_speed.py times the same runs."""
    from broker.sim import policies
    from broker.sim.engine import Scenario
    from broker.sim.model import SimJob, SpotTrace
    from broker.sim.places import region_of
    from broker.sim.synthetic import synthetic_offers

    file, start, deadline, restart, item = task
    place, avail = _cbl_trace(file)
    zone = place.location
    itype, gpu, on_demand, spot = CBL_GPU
    row = (place.cloud, region_of(place.cloud, zone), zone, itype, gpu, on_demand, spot, 0.05)
    trace = SpotTrace({place: avail.window(start, deadline + CBL_TAIL_HOURS)}, file)
    job = SimJob("cbl-job", "bench", 0.0, gpu, 1, CBL_JOB_HOURS, deadline,
                 checkpoint_minutes=10.0, checkpoint_gb=0.0)  # fmt: skip
    scenario = Scenario(
        synthetic_offers((row,)), trace, [job], restart_hours=restart,
        reconcile_hours=avail.step_hours, horizon_hours=deadline * 3,
    )  # fmt: skip
    (policy,) = policies.parse(item)
    return scenario, policy


def _optimum(trace, window, on_demand_price: float) -> float:
    """Our hindsight optimum for the window (broker.sim.optimum), same model as the run."""
    from broker.sim.optimum import Market, hindsight_optimum
    from pricing.egress import egress_cost
    from pricing.regions import Place

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
