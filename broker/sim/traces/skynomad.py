"""SkyNomad artifact data: per-tick AWS V100 spot prices (joined onto the Can't Be Late
availability of the same 9 zones and 20,158 ticks), its result tables (the windows
and published costs of the V100 scenario), and the AWS inter-region egress table."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from pathlib import Path

from broker.sim.model import SpotTrace, TracePlace
from pricing.userio.reading import load_json, read_text_maybe_gzip


def read_v100_prices(path: Path) -> dict[str, tuple[float, ...]]:
    """{"us-east-1a": (USD/h per tick, ...)} from aws_v100_spot_prices.json.gz."""
    data = load_json(path, "trace")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of price series per zone")
    return {key.split("_")[0]: tuple(float(p) for p in values) for key, values in data.items()}


def with_prices(trace: SpotTrace, prices: dict[str, tuple[float, ...]]) -> SpotTrace:
    """`trace` with each zone's per-tick price attached (lengths must agree)."""
    places = {}
    for place, availability in trace.places.items():
        series = prices.get(place.location)
        if series is not None and len(series) == len(availability.counts):
            availability = replace(availability, prices=series)
        places[place] = availability
    return SpotTrace(places, trace.source + " + SkyNomad prices")


def read_results(path: Path) -> list[dict[str, str]]:
    """Rows of a results/*.csv.gz table."""
    with io.StringIO(read_text_maybe_gzip(path, "trace"), newline="") as handle:
        return list(csv.DictReader(handle))


def scenario_windows(rows: list[dict[str, str]]) -> list[dict[str, float | list[str]]]:
    """The distinct trace windows of a results table: regions, start hour, task length,
    deadline, restart overhead, checkpoint size (one per window_index)."""
    import ast

    seen, out = set(), []
    for row in rows:
        key = (row["trace_index"], row["window_index"], row["env_start_hours"])
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "regions": list(ast.literal_eval(row["regions_in_scenario"])),
                "start_hours": float(row["env_start_hours"]),
                "task_hours": float(row["task_duration"]),
                "deadline_hours": float(row["deadline_hours"]),
                "restart_hours": float(row["restart_overhead"]),
                "checkpoint_gb": float(row["checkpoint_size"]),
            }
        )
    return out


def published_means(rows: list[dict[str, str]]) -> dict[str, float]:
    """Mean published cost per strategy."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        sums.setdefault(row["strategy"], []).append(float(row["cost"]))
    return {name: round(sum(v) / len(v), 4) for name, v in sorted(sums.items())}


def places_for(trace: SpotTrace, names: list[str]) -> SpotTrace:
    """The part of `trace` whose files are named in a results row ("us-east-1c_v100_1")."""
    zones = {name.split("_")[0] for name in names}
    return SpotTrace({p: a for p, a in trace.places.items() if p.location in zones}, trace.source)


__all__ = ["TracePlace", "places_for", "published_means", "read_results", "read_v100_prices",
           "scenario_windows", "with_prices"]  # fmt: skip
