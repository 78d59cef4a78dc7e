"""SkyNomad's published scenarios, as the simulator replays them.

SkyNomad's result tables (`results/*.csv.gz`: v100, deadline_sensitivity,
region_scaling, region_selection, checkpoint_sensitivity) hold one row per scenario,
strategy and trace window: the zones, the job's length, deadline, restart overhead and
checkpoint size, the window's start, and the cost each strategy paid. A scenario here is
one (table, scenario name, job) with its windows; every one whose zones have a trace in
`../shared/traces` is reproducible:

- the V100 scenario: Can't Be Late's 2023-02-15 availability of its AWS zones with
  SkyNomad's per-tick spot prices, on-demand 3.06 USD/h (p3.2xlarge);
- the H100 scenarios: SkyNomad's GCP probes (`gcp_h100_16_traces`, 600 s ticks, the
  preempted convention: 1 = none to be had), a3-highgpu-8g (8 H100) at each zone's spot
  and on-demand list price (`metadata.price_info`).

Interruption rates are left to the planner's per-cloud default; the job checkpoints every
10 minutes. The published means per window are kept beside each window.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.sim.model import SpotTrace
    from pricing.table import OfferTable

TABLES = ("v100", "deadline_sensitivity", "region_scaling", "region_selection",
          "checkpoint_sensitivity")  # fmt: skip
ORACLE = "multi_region_oracle_dp"
SKYNOMAD = ("unified_cost_model_rate_ratio", "unified_cost_model_risk")  # V100, H100 tables
CHECKPOINT_MINUTES = 10.0
V100 = ("p3.2xlarge", "V100", 1, 3.06)  # instance, GPU, GPUs, on-demand USD/h
H100 = ("a3-highgpu-8g", "H100", 8)


@dataclass(frozen=True)
class Window:
    """One trace window of a scenario, with what each published strategy paid there
    (the mean of its rows: the single-region threshold has one per zone)."""

    start_hours: float
    task_hours: float
    deadline_hours: float
    restart_hours: float
    checkpoint_gb: float
    published: Mapping[str, float]


@dataclass(frozen=True)
class SuiteScenario:
    table: str
    name: str
    zones: tuple[str, ...]  # trace file stems, "us-central1-a_h100_16"
    windows: tuple[Window, ...]

    @property
    def label(self) -> str:
        first = self.windows[0]
        ratio = first.deadline_hours / first.task_hours
        return (f"{self.table}: {self.name}, {len(self.zones)} zones, {first.task_hours:.1f} h, "
                f"deadline x{ratio:.2f}, {first.checkpoint_gb:g} GB")  # fmt: skip

    @property
    def gpu(self) -> str:
        return gpu_of(self.zones)


def gpu_of(zones: tuple[str, ...]) -> str:
    """The GPU of a scenario's zones: SkyNomad's GCP probes are H100s, the rest V100s."""
    return "H100" if zones[0].endswith("_h100_16") else "V100"


def suite(results: Path, traces: Path) -> tuple[list[SuiteScenario], list[str]]:
    """Every scenario of the result tables in `results`, and a note for each one that
    cannot be replayed (its zones have no trace under `traces`)."""
    from broker.sim.traces.skynomad import read_results

    scenarios, notes = [], []
    for table in TABLES:
        path = results / f"{table}.csv.gz"
        if not path.exists():
            notes.append(f"{table}: no {path.name}")
            continue
        grouped: dict[tuple, dict[tuple, list[dict]]] = {}
        for row in read_results(path):
            zones = tuple(ast.literal_eval(row["regions_in_scenario"]))
            key = (row["scenario_name"], zones, row["task_duration"], row["deadline_hours"],
                   row["restart_overhead"], row["checkpoint_size"])  # fmt: skip
            window = (int(row["trace_index"]), int(row["window_index"]), row["env_start_hours"])
            grouped.setdefault(key, {}).setdefault(window, []).append(row)
        for (name, zones, *_), windows in grouped.items():
            missing = [z for z in zones if _trace_file(traces, z) is None]
            if missing:
                notes.append(f"{table}: {name}: no trace for {', '.join(missing)}")
                continue
            ordered = tuple(_window(rows) for _, rows in sorted(windows.items()))
            scenarios.append(SuiteScenario(table, name, zones, ordered))
    return scenarios, notes


def _window(rows: list[dict]) -> Window:
    costs: dict[str, list[float]] = {}
    for row in rows:
        costs.setdefault(row["strategy"], []).append(float(row["cost"]))
    first = rows[0]
    return Window(
        start_hours=float(first["env_start_hours"]),
        task_hours=float(first["task_duration"]),
        deadline_hours=float(first["deadline_hours"]),
        restart_hours=float(first["restart_overhead"]),
        checkpoint_gb=float(first["checkpoint_size"]),
        published={k: sum(v) / len(v) for k, v in sorted(costs.items())},
    )


def skynomad_cost(window: Window) -> float | None:
    """What SkyNomad paid in the window (its V100 or its H100 variant)."""
    return next((window.published[k] for k in SKYNOMAD if k in window.published), None)


def _trace_file(traces: Path, zone: str) -> Path | None:
    if zone.endswith("_h100_16"):
        path = traces / "skynomad-spot/gcp_h100_16_traces" / f"{zone}.json"
    else:
        path = traces / "cant-be-late-spot/availability/1-node/aws-02-15-2023" / f"{zone}.json"
    return path if path.exists() else None


@functools.lru_cache(maxsize=16)
def suite_trace(traces: Path, zones: tuple[str, ...]) -> SpotTrace:
    """The zones' availability (and spot prices) over the whole trace."""
    from broker.sim.model import SpotTrace
    from broker.sim.traces import skynomad
    from broker.sim.traces.spotjson import read_availability

    places = {}
    for zone in zones:
        path = _trace_file(traces, zone)
        assert path is not None, zone
        place, availability = read_availability(path, preempted=zone.endswith("_h100_16"))
        places[place] = availability
    trace = SpotTrace(places, "skynomad suite")
    if not zones[0].endswith("_h100_16"):
        prices = skynomad.read_v100_prices(traces / "skynomad-spot/aws_v100_spot_prices.json.gz")
        trace = skynomad.with_prices(trace, prices)
    return trace


@functools.lru_cache(maxsize=16)
def suite_offers(traces: Path, zones: tuple[str, ...]) -> OfferTable:
    """One catalog row per zone: its instance at its on-demand and (first) spot price,
    the interruption rate left to the planner's per-cloud default."""
    from broker.sim.places import region_of
    from broker.sim.synthetic import synthetic_offers

    trace = suite_trace(traces, zones)
    rows = []
    for place, availability in sorted(trace.places.items(), key=lambda kv: str(kv[0])):
        region = region_of(place.cloud, place.location)
        spot = availability.prices[0] if availability.prices else 0.918
        if place.kind == "H100":
            path = _trace_file(traces, f"{place.location}_h100_16")
            info = json.loads(path.read_text())["metadata"]["price_info"]  # type: ignore[union-attr]
            itype, gpu, count = H100
            on_demand = float(info["on_demand_price"])
        else:
            itype, gpu, count, on_demand = V100
        rows.append((place.cloud, region, place.location, itype, gpu, on_demand, spot,
                     float("nan"), float(count)))  # fmt: skip
    return synthetic_offers(tuple(rows))
