"""Planner benchmarks (issue 3). Prints one JSON document of figures; asserts nothing.

    python bench/planner.py [--jobs 10000] [--rows 100000] [--runs 11]

- `broker plan examples/jobs/llama-finetune.yaml` end to end over the bundled catalog;
- batch planning of generated jobs with varied requirements over a 100,000-offer
  catalog (the SkyPilot catalogs from ../shared when present, topped up with
  synthetic offers): jobs per second of wall time and of CPU time (the median of three
  runs each, all jobs, the GPU jobs, the CPU-only jobs), and how many distinct
  requirement groups. Compare code by the CPU figures, or by runs interleaved: on a
  shared machine the wall time follows the load (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from catalog import big_catalog, wall  # noqa: E402

EXAMPLE = REPO / "examples" / "jobs" / "llama-finetune.yaml"


def generated_jobs(count: int, gpus: list[str], seed: int = 7, cpu_share: float = 0.05):
    """Varied manifests: 1-3 GPU alternatives with random counts, clouds, regions,
    countries, spot policy, price caps, deadlines, budgets, inputs and checkpoints;
    `cpu_share` of them CPU-only (with vCPU and memory asks, as preprocessing jobs have)."""
    from broker.spec import (
        Amount,
        Budget,
        Checkpoint,
        DataInput,
        GpuAsk,
        JobSpec,
        Requirements,
        RuntimeEstimate,
    )
    from pricing.regions import Place

    rng = random.Random(seed)
    places = [Place("aws", "us-east-1"), Place("gcp", "us-central1"), Place("azure", "westeurope")]
    for i in range(count):
        cpu_only = rng.random() < cpu_share
        asks = (
            ()
            if cpu_only
            else tuple(
                GpuAsk(g, rng.choice([1.0, 2.0, 4.0, 8.0]))
                for g in rng.sample(gpus, rng.randint(1, 3))
            )
        )
        req = Requirements(
            accelerators=asks,
            cpus=rng.choice([Amount(8.0), Amount(32.0)] if cpu_only else [None, Amount(8.0)]),
            memory_gib=rng.choice(
                [Amount(32.0), Amount(128.0)] if cpu_only else [None, Amount(64.0)]
            ),
            nodes=rng.choice([1, 1, 1, 2]),
            clouds=rng.choice([(), ("aws",), ("gcp", "azure")]),
            regions=rng.choice([(), ("us-*",), ("europe-*", "eu-*")]),
            countries=rng.choice([(), ("US",), ("DE", "NL")]),
            spot=rng.choice(["never", "prefer", "only"]),
            max_price_per_hour=rng.choice([None, 20.0, 100.0]),
        )
        yield JobSpec(
            name=f"job-{i}",
            team=f"team-{i % 7}",
            requirements=req,
            runtime=RuntimeEstimate(
                rng.choice([1.0, 8.0, 48.0]),
                rng.choice([None, timedelta(hours=24), timedelta(days=4)]),
            ),
            checkpoint=rng.choice([None, Checkpoint("s3://ck/", 30.0, 50.0, rng.choice(places))]),
            data=tuple(
                DataInput("s3://d/", rng.choice([10.0, 500.0]), rng.choice(places))
                for _ in range(rng.randint(0, 2))
            ),
            budget=Budget(rng.choice([None, 200.0, 5000.0])),
        )


def manifest_load(count: int) -> dict:
    """Write `count` small manifests to a folder and time `load_manifests` on it."""
    from broker.manifest.load import load_manifests

    folder = Path(tempfile.mkdtemp())
    text = EXAMPLE.read_text()
    for i in range(count):
        (folder / f"job-{i}.yaml").write_text(text.replace("name: llama-ft", f"name: job-{i}"))
    start = time.perf_counter()
    loaded = load_manifests([folder])
    elapsed = time.perf_counter() - start
    return {
        "manifests": len(loaded.manifests),
        "errors": len(loaded.errors),
        "seconds": round(elapsed, 2),
        "per_second": round(len(loaded.manifests) / elapsed),
    }


def timed_plan(jobs, index, now):
    """`plan_many` once: its decisions, wall seconds and CPU seconds (this process)."""
    from broker.planner.plan import plan_many

    start, cpu = time.perf_counter(), time.process_time()
    decisions = plan_many(jobs, index, now)
    return decisions, time.perf_counter() - start, time.process_time() - cpu


def rates(count: int, walls: list[float], cpus: list[float]) -> dict:
    """Jobs per second of the median wall time and of the median CPU time: on a machine
    shared with other work the wall time moves with the load, the CPU time much less."""
    return {
        "jobs_per_second": round(count / statistics.median(walls)),
        "jobs_per_cpu_second": round(count / statistics.median(cpus)),
        "runs": len(walls),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()

    from pricing.catalog import read_offer_table
    from pricing.query import OfferIndex

    env = dict(os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp())
    figures = {
        # Imports `broker plan` pays, measured in the same run (the machine's load varies).
        "baseline_import_numpy_s": wall([sys.executable, "-c", "import numpy"], args.runs)[
            "median_s"
        ],
        "baseline_import_pydantic_s": wall([sys.executable, "-c", "import pydantic"], args.runs)[
            "median_s"
        ],
        # Warm: the manifest validated and the catalog compiled by an earlier run (the
        # spec and catalog caches); cold: a fresh cache directory for every run.
        "plan_one_job": wall([sys.executable, "-m", "broker", "plan", str(EXAMPLE)], args.runs, env)
        | {"target_s": 0.5},
        "plan_one_job_cold": wall(
            [sys.executable, "-m", "broker", "plan", str(EXAMPLE)], args.runs, cold=True
        ),
    }
    path, origin = big_catalog(args.rows)
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
    index = OfferIndex(read_offer_table(path))
    gpus = [
        g
        for g in index.gpus()
        if g in {"A100", "A100-80GB", "H100", "H200", "L4", "T4", "A10G", "L40S", "V100"}
    ]
    jobs = list(generated_jobs(args.jobs, gpus))
    now = datetime(2026, 11, 1, tzinfo=UTC)
    walls, cpus = [], []
    for _ in range(3):
        decisions, wall_s, cpu_s = timed_plan(jobs, index, now)
        walls.append(wall_s)
        cpus.append(cpu_s)
    for label, subset in (
        ("gpu_jobs", [j for j in jobs if j.requirements.accelerators]),
        ("cpu_only_jobs", [j for j in jobs if not j.requirements.accelerators]),
    ):
        runs = [timed_plan(subset, index, now)[1:] for _ in range(3)]
        figures[f"batch_{label}"] = {"jobs": len(subset)} | rates(
            len(subset), [w for w, _ in runs], [c for _, c in runs]
        )
    figures["batch"] = {
        "jobs": len(jobs),
        "distinct_requirements": len({j.requirements for j in jobs}),
        "catalog_rows": len(index.offers),
        "catalog_origin": origin,
        "feasible_jobs": sum(1 for d in decisions if d.placements),
        "median_s": round(statistics.median(walls), 3),
        **rates(len(jobs), walls, cpus),
        "target_jobs_per_second": 5000,
        "cpu_only_share": 0.05,
        "load_average": round(os.getloadavg()[0], 1),
    }
    figures["manifest_load"] = manifest_load(min(args.jobs, 10_000))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
