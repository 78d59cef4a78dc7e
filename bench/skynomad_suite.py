"""`bench/simulate.py --suite skynomad`: every SkyNomad scenario the simulator replays.

For each scenario of `results/*.csv.gz` (broker.sim.traces.skynomad_suite) and each of
its trace windows: our policies through the full engine, our hindsight optimum
(broker.sim.optimum) in the same cost model, and SkyNomad's published costs. Prints one
JSON document: per scenario the mean cost of each policy, its deadline misses, our
optimum, SkyNomad's and the published oracle's means; then a summary. Runs go to a
process pool; results keep the task order, so the same inputs print the same figures.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

TAIL_HOURS = 5.0  # trace kept past the deadline


def run_suite(traces: Path, policy_text: str, *, workers: int, limit: int | None = None,
              detail: Path | None = None) -> dict:  # fmt: skip
    from broker.sim.traces.skynomad_suite import ORACLE, skynomad_cost, suite

    scenarios, notes = suite(traces / "skynomad-spot/results", traces)
    scenarios = scenarios[:limit]
    items = [part.strip() for part in policy_text.split(",") if part.strip()]
    tasks = [(str(traces), s, w, sc.zones, sc.windows[w], item) for s, sc in enumerate(scenarios)
             for w in range(len(sc.windows)) for item in [*items, "optimum"]]  # fmt: skip
    started = time.perf_counter()
    results = _pool(tasks, workers)
    wall = time.perf_counter() - started
    rows = []
    for (_, s, w, _, _, item), (cost, misses) in zip(tasks, results, strict=True):
        window = scenarios[s].windows[w]
        rows.append({"scenario": s, "window": w, "policy": item, "cost_usd": cost,
                     "deadline_misses": misses, "skynomad_usd": skynomad_cost(window),
                     "published_optimum_usd": window.published.get(ORACLE)})  # fmt: skip
    if detail is not None:
        detail.write_text(json.dumps(rows, indent=1))
    per = [_scenario(sc, [r for r in rows if r["scenario"] == s], items)
           for s, sc in enumerate(scenarios)]  # fmt: skip
    return {
        "suite": "SkyNomad results/*.csv.gz, every scenario the simulator replays",
        "scenarios": per,
        "not_reproducible": notes,
        "summary": _summary(per, rows, items),
        "workers": workers,
        "wall_seconds": round(wall, 1),
    }


def _scenario(scenario, rows: list[dict], items: list[str]) -> dict:
    def mean(values: list) -> float | None:
        known = [v for v in values if v is not None and v == v]  # an infeasible optimum: NaN
        return round(sum(known) / len(known), 2) if known else None

    ours = {item: mean([r["cost_usd"] for r in rows if r["policy"] == item]) for item in items}
    optimum = mean([r["cost_usd"] for r in rows if r["policy"] == "optimum"])
    skynomad = [r["skynomad_usd"] for r in rows if r["policy"] == "optimum"]
    published = [r["published_optimum_usd"] for r in rows if r["policy"] == "optimum"]
    out = {
        "scenario": scenario.label,
        "windows": len(scenario.windows),
        "mean_cost_usd": ours,
        "deadline_misses": {
            item: sum(r["deadline_misses"] for r in rows if r["policy"] == item) for item in items
        },  # fmt: skip
        "our_optimum_usd": optimum,
        "our_optimum_infeasible_windows": sum(
            r["cost_usd"] != r["cost_usd"] for r in rows if r["policy"] == "optimum"
        ),  # fmt: skip
        "skynomad_usd": mean(skynomad),
        "published_optimum_usd": mean(published),
    }
    broker = ours.get("broker")
    if broker is not None and out["skynomad_usd"]:
        out["broker_vs_skynomad_percent"] = round(100 * (broker / out["skynomad_usd"] - 1), 1)
    if broker is not None and optimum:
        out["broker_vs_our_optimum_percent"] = round(100 * (broker / optimum - 1), 1)
    return out


def _summary(per: list[dict], rows: list[dict], items: list[str]) -> dict:
    out: dict = {"scenarios": len(per), "windows": sum(p["windows"] for p in per)}
    if "broker" not in items:
        return out
    versus = [p["broker_vs_skynomad_percent"] for p in per if "broker_vs_skynomad_percent" in p]
    gaps = [p["broker_vs_our_optimum_percent"] for p in per if "broker_vs_our_optimum_percent" in p]
    optimum = {(r["scenario"], r["window"]): r["cost_usd"] for r in rows
               if r["policy"] == "optimum" and r["cost_usd"] == r["cost_usd"]}  # fmt: skip
    worst = sorted(((r["cost_usd"] / optimum[(r["scenario"], r["window"])], r) for r in rows
                    if r["policy"] == "broker" and optimum.get((r["scenario"], r["window"]))),
                   key=lambda pair: -pair[0])[:5]  # fmt: skip
    feasible = set(optimum)
    missed = {item: sum(r["deadline_misses"] for r in rows if r["policy"] == item
                        and (r["scenario"], r["window"]) in feasible)
              for item in items}  # fmt: skip
    below = sum(v <= 0 for v in versus)
    mean_vs = round(sum(versus) / len(versus), 1) if versus else None
    mean_gap = round(sum(gaps) / len(gaps), 1) if gaps else None
    out |= {
        "line": f"broker at or below SkyNomad in {below} of {len(versus)} scenarios, "
        f"{mean_vs:+.1f} % against SkyNomad and {mean_gap:+.1f} % against our optimum on "
        f"average, {missed['broker']} deadlines missed where one can be met",
        "broker_at_or_below_skynomad": f"{below} of {len(versus)}",
        "broker_vs_skynomad_mean_percent": mean_vs,
        "broker_vs_our_optimum_mean_percent": mean_gap,
        "deadline_misses": {
            item: sum(r["deadline_misses"] for r in rows if r["policy"] == item) for item in items
        },  # fmt: skip
        "deadline_misses_where_feasible": missed,
        "broker_worst_windows_x_optimum": [
            {
                "scenario": per[r["scenario"]]["scenario"],
                "window": r["window"],
                "times_optimum": round(ratio, 2),
            }
            for ratio, r in worst
        ],  # fmt: skip
    }
    return out


def _pool(tasks: list[tuple], workers: int) -> list[tuple[float, int]]:
    if workers <= 1:
        return [_run(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")  # the workers inherit the imports
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(_run, tasks, chunksize=1))


def _run(task: tuple) -> tuple[float, int]:
    """One window under one policy, or our optimum for it: (cost, misses)."""
    from broker.sim import policies
    from broker.sim.engine import Scenario, simulate
    from broker.sim.model import SimJob
    from broker.sim.traces.skynomad_suite import (
        CHECKPOINT_MINUTES,
        gpu_of,
        suite_offers,
        suite_trace,
    )

    traces, _, _, zones, window, item = task
    trace = suite_trace(Path(traces), zones).window(
        window.start_hours, window.deadline_hours + TAIL_HOURS
    )
    offers = suite_offers(Path(traces), zones)
    if item == "optimum":
        return _optimum(trace, offers, window), 0
    gpu = gpu_of(zones)
    job = SimJob("suite-job", "bench", 0.0, gpu, 8 if gpu == "H100" else 1, window.task_hours,
                 window.deadline_hours, checkpoint_minutes=CHECKPOINT_MINUTES,
                 checkpoint_gb=window.checkpoint_gb)  # fmt: skip
    step = next(iter(trace.places.values())).step_hours
    run = Scenario(offers, trace, [job], restart_hours=window.restart_hours,
                   reconcile_hours=step, horizon_hours=window.deadline_hours * 3)  # fmt: skip
    (policy,) = policies.parse(item)
    result = simulate(run, policy)
    return result.total_cost, result.deadline_misses


def _optimum(trace, offers, window) -> float:
    """Our hindsight optimum for the window, in the simulator's cost model: spot in each
    traced zone at its tick prices, on-demand in each region at its zones' lowest price,
    a move between regions at the checkpoint's egress."""
    from broker.sim.optimum import Market, hindsight_optimum
    from broker.sim.places import region_of
    from pricing.egress import egress_cost
    from pricing.regions import Place

    cloud_of_region, on_demand = {}, {}
    for row in offers.records():
        region = row["region"]
        cloud_of_region[region] = row["cloud"]
        on_demand[region] = min(on_demand.get(region, float("inf")), row["price_on_demand"])
    markets = []
    spot = {r["zone"]: r["price_spot"] for r in offers.records()}
    for place, avail in sorted(trace.places.items(), key=lambda kv: str(kv[0])):
        region = region_of(place.cloud, place.location)
        markets.append(Market(region, avail.prices or [spot[place.location]],
                              [c > 0 for c in avail.counts]))  # fmt: skip
    markets += [Market(r, [price]) for r, price in sorted(on_demand.items())]
    step = next(iter(trace.places.values())).step_hours
    gb = window.checkpoint_gb

    def move(a: str, b: str) -> float:
        return egress_cost(Place(cloud_of_region[a], a), Place(cloud_of_region[b], b), gb)

    best = hindsight_optimum(
        markets, step_hours=step, work_hours=window.task_hours,
        deadline_hours=window.deadline_hours, restart_hours=window.restart_hours, egress=move,
    )  # fmt: skip
    return round(float(best.cost), 4) if best.feasible else float("nan")
