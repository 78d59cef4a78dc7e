"""Catalog benchmarks (issue 2). Prints one JSON document of figures; asserts nothing.

    python bench/catalog.py [--runs 15] [--queries 1000]

- `broker --help` wall time, and whether pandas or a cloud SDK was imported;
- `broker offers --gpu A100:8` end to end over the bundled catalog;
- load and 1,000 varied queries over a 100,000-offer catalog: the real SkyPilot
  catalogs from ../shared when present (imported once, written as our CSV),
  topped up or replaced by synthetic offers otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEAVY = ("pandas", "numpy", "boto3", "botocore", "google.cloud", "azure", "libcloud", "rich")


def wall(command: list[str], runs: int, env: dict | None = None, cold: bool = False) -> dict:
    """Median and best wall time of `runs` runs; `cold`: empty caches for every run."""
    times = []
    for _ in range(runs):
        if cold:
            env = dict(
                os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp()
            )
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "runs": runs,
    }


def heavy_modules_after_help() -> list[str]:
    code = (
        "import sys; sys.argv=['broker','--help']\n"
        "from broker.cli.entry import main\n"
        "try:\n main()\nexcept SystemExit: pass\n"
        f"print('LOADED:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = out.stdout.strip().splitlines()[-1]
    return [m for m in line.removeprefix("LOADED:").split(",") if m]


def big_catalog(target_rows: int) -> tuple[Path, str]:
    import pandas as pd

    from pricing.catalog import write_offers_csv
    from pricing.synthetic import synthetic_offers

    shared = Path(os.environ.get("BROKER_SHARED_DIR") or REPO.parent / "shared")
    skypilot = shared / "catalogs" / "skypilot" / "v8"
    parts, origin = [], "synthetic"
    if (skypilot / "gcp" / "vms.csv").is_file():
        from pricing.importers.skypilot import import_skypilot

        parts.append(import_skypilot(skypilot))
        origin = f"skypilot ({len(parts[0]):,} rows)"
    have = sum(len(p) for p in parts)
    if have < target_rows:
        parts.append(synthetic_offers(target_rows - have, seed=1))
        origin += " + synthetic" if parts[:-1] else ""
    path = Path(tempfile.mkdtemp()) / "offers.csv"
    write_offers_csv(pd.concat(parts, ignore_index=True), path)
    return path, origin


def query_mix(index, count: int):
    import random

    from pricing.offer_query import OfferQuery

    rng = random.Random(42)
    gpus = [None] + index.gpus()
    regions = [(), ("us-*",), ("europe-*", "eu-*"), ("*asia*", "ap-*"), ("us-east-1",)]
    for _ in range(count):
        yield OfferQuery(
            gpu=rng.choice(gpus),
            gpu_count=rng.choice([None, 1.0, 4.0, 8.0]),
            exact=rng.random() < 0.3,
            clouds=rng.choice([(), ("aws",), ("gcp", "azure")]),
            regions=rng.choice(regions),
            countries=rng.choice([(), ("US",), ("DE", "NL")]),
            market=rng.choice(["any", "spot", "on-demand"]),
            max_price=rng.choice([None, 10.0, 50.0]),
            sort=rng.choice(["price", "price-per-gpu"]),
            limit=30,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()

    from pricing.catalog import read_offer_table
    from pricing.query import OfferIndex, QueryError

    # The bundled catalog (no user catalog); its compiled cache is warmed by the first run.
    env = dict(os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp())
    broker = [sys.executable, "-m", "broker"]
    figures = {
        # What this machine needs for the imports every command pays, measured in the
        # same run: the figures below vary with the machine's load as much as these do.
        "baseline_python_s": wall([sys.executable, "-c", "pass"], args.runs)["median_s"],
        "baseline_import_typer_s": wall([sys.executable, "-c", "import typer"], args.runs)[
            "median_s"
        ],
        "baseline_import_numpy_s": wall([sys.executable, "-c", "import numpy"], args.runs)[
            "median_s"
        ],
        "help": wall([*broker, "--help"], args.runs, env) | {"target_s": 0.15},
        "help_heavy_modules_loaded": heavy_modules_after_help(),
        "offers_a100x8": wall([*broker, "offers", "--gpu", "A100:8"], args.runs, env)
        | {"target_s": 0.6},
    }
    path, origin = big_catalog(args.rows)
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()  # start with no compiled catalog
    start = time.perf_counter()
    index = OfferIndex(read_offer_table(path))  # parses the CSV, writes the compiled cache
    cold = time.perf_counter() - start
    loads = []
    for _ in range(5):
        start = time.perf_counter()
        index = OfferIndex(read_offer_table(path))
        loads.append(time.perf_counter() - start)
    times, hits = [], 0
    for query in query_mix(index, args.queries):
        start = time.perf_counter()
        try:
            hits += len(index.query(query)) > 0
        except QueryError:
            pass
        times.append(time.perf_counter() - start)
    times.sort()
    figures["catalog_100k"] = {
        "rows": len(index.offers),
        "origin": origin,
        "load_and_index_cold_s": round(cold, 4),
        "load_and_index_median_s": round(statistics.median(loads), 4),
        "load_target_s": 0.5,
        "queries": len(times),
        "queries_with_hits": hits,
        "query_median_ms": round(1000 * statistics.median(times), 3),
        "query_p95_ms": round(1000 * times[int(0.95 * len(times))], 3),
        "query_target_ms": 5,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
