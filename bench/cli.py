"""The everyday commands, end to end (issue 15). Prints one JSON document; asserts nothing.

    python bench/cli.py [--manifests 10000] [--jobs 100000] [--runs 5] [--only single]

- `broker plan DIR` over generated manifests (the example fine-tune, each its own
  name): the table and `-o json`, cold (empty caches) and warm (the spec and catalog
  caches filled by a run before), in jobs per second;
- `broker plan job.yaml`, cold and warm;
- `broker jobs` over a state file holding `--jobs` recorded jobs (one or two attempts
  each, with their ledger lines): the default page, every job as JSON, the attempts
  view, one team;
- `broker --help`: the modules it loads (none of pandas, numpy, rich, a cloud SDK).

`--only single` times `broker plan job.yaml` alone (cold and warm, with Python's own
start beside it): the figure of a start-up change, in seconds instead of minutes.

Each figure is the median of `--runs` runs, wall time and the CPU time of the command
(user + system: less moved by other work on the machine, which the load average says).
The project's modules are compiled to bytecode first, as an installed package has them
(with PYTHONDONTWRITEBYTECODE set, as on CI machines, every run would otherwise compile
some sixty modules from source: a tenth of a cold `broker plan job.yaml`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EXAMPLE = REPO / "examples" / "jobs" / "llama-finetune.yaml"
BROKER = [sys.executable, "-m", "broker"]
PACKAGES = ("broker", "pricing", "providers", "onprem")


def compile_bytecode() -> None:
    """Every module of the project compiled, as `pip install` leaves a package."""
    folders = [str(REPO / name) for name in PACKAGES]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True)


def timed(command: list[str], runs: int, env: dict | None = None, cold: bool = False) -> dict:
    """Median wall and CPU seconds of `runs` runs (`cold`: empty caches every run)."""
    walls, cpus = [], []
    for _ in range(runs):
        if cold:
            env = dict(
                os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp()
            )
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {
        "wall_s": round(statistics.median(walls), 3),
        "cpu_s": round(statistics.median(cpus), 3),
        "best_wall_s": round(min(walls), 3),
        "runs": runs,
    }


def per_second(figure: dict, count: int) -> dict:
    return figure | {
        "jobs_per_second": round(count / figure["wall_s"]),
        "jobs_per_cpu_second": round(count / figure["cpu_s"]),
    }


def manifests(count: int) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench-manifests-"))
    text = EXAMPLE.read_text()
    for i in range(count):
        (folder / f"job-{i}.yaml").write_text(text.replace("name: llama-ft", f"name: job-{i}"))
    return folder


def plan_figures(count: int, runs: int) -> dict:
    folder = manifests(count)
    warm = dict(os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp())
    table = [*BROKER, "plan", str(folder)]
    as_json = [*table, "-o", "json"]
    subprocess.run(table, check=True, stdout=subprocess.DEVNULL, env=warm)  # fill the caches
    return {
        "plan_directory": {
            "manifests": count,
            "table_warm": per_second(timed(table, runs, warm), count),
            "json_warm": per_second(timed(as_json, runs, warm), count),
            "table_cold": per_second(timed(table, max(1, runs // 2), cold=True), count),
            "target_jobs_per_second": 10_000,
        },
    } | one_job_figures(runs)


def one_job_figures(runs: int) -> dict:
    """`broker plan job.yaml`: cold (empty caches every run) and warm."""
    warm = dict(os.environ, XDG_DATA_HOME=tempfile.mkdtemp(), XDG_CACHE_HOME=tempfile.mkdtemp())
    one = [*BROKER, "plan", str(EXAMPLE)]
    subprocess.run(one, check=True, stdout=subprocess.DEVNULL, env=warm)  # fill the caches
    return {
        "plan_one_job": {
            "warm": timed(one, runs, warm),
            "cold": timed(one, runs, cold=True) | {"target_s": 0.2},
        },
    }


def spec_json(name: str, team: str) -> str:
    """The stored spec of an A100:8 job without a runtime estimate (learned from its
    runs: `broker jobs` shows it), as the store encodes it."""
    from broker.spec import NO_HISTORY, GpuAsk, JobSpec, Requirements, RuntimeEstimate
    from broker.spec_codec import encode

    spec = JobSpec(
        name, team, Requirements(accelerators=(GpuAsk("A100", 8),)),
        runtime=RuntimeEstimate(auto=True, source=NO_HISTORY),
    )  # fmt: skip
    return json.dumps(encode(spec))


def state_file(jobs: int, seed: int = 3) -> Path:
    """A state file as the broker writes it, holding `jobs` finished or live jobs, each
    with one or two attempts and their ledger lines (written straight, in one go)."""
    from datetime import UTC, datetime, timedelta

    from broker.clock import FixedClock
    from broker.state import StateStore
    from broker.state.model import ts_text

    path = Path(tempfile.mkdtemp(prefix="bench-state-")) / "state.db"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    StateStore.open(path, FixedClock(start)).close()  # the schema, migrated
    rng = random.Random(seed)
    placement = json.loads(
        '{"format": 2, "cloud": "aws", "region": "us-east-1", "zone": "", '
        '"instance_type": "p4d.24xlarge", "accelerator": "A100", "accelerator_count": 8.0, '
        '"nodes": 1, "market": "spot", "price_per_hour": "9.5", "price_source": "bench", '
        '"price_as_of": "2026-01-01", "expected_hours": 3.0, "expected_cost": 28.5, '
        '"rank": 1, "steered": false, "cost": null, "time_scale": 1.0}'
    )
    jobs_rows, versions, attempts, ledger = [], [], [], []
    states = ["succeeded"] * 8 + ["failed", "cancelled", "running", "queued"]
    for i in range(jobs):
        job_id = f"j-{i:012x}"
        at = start + timedelta(seconds=30 * i)
        state = rng.choice(states)
        team, name = f"team-{i % 9}", f"job-{i % 20_000}"
        run = i // 20_000 + 1
        stamp = ts_text(at)
        jobs_rows.append(
            (job_id, team, name, "default", 0, state, 1, None, stamp, stamp, stamp, run, "bench")
        )
        versions.append(
            (job_id, 1, f"d{i}", "name: x\n", spec_json(name, team), "default", 0, stamp)
        )
        tries = 0 if state == "queued" else rng.choice((1, 1, 1, 2))
        for number in range(1, tries + 1):
            attempt_id = f"a-{i:010x}{number:02d}"
            hours = rng.choice(("0.5", "1.25", "3"))
            ended = None if state == "running" and number == tries else ts_text(at)
            outcome = "running" if ended is None else ("interrupted" if number < tries else state)
            attempts.append(
                (attempt_id, job_id, number, 1, json.dumps(placement), "spot", "9.5", "bench",
                 "2026-01-01", outcome, stamp, stamp, ended, 0, "", hours)
            )  # fmt: skip
            if ended is not None:
                amount = str(float(hours) * 9.5)
                ledger.append(
                    (job_id, attempt_id, "compute", amount, hours, "hour", "9.5", "spot",
                     "bench", "2026-01-01", stamp, ended, stamp, "aws", "us-east-1", "")
                )  # fmt: skip
    with sqlite3.connect(path) as conn:
        conn.executemany(f"INSERT INTO jobs VALUES ({','.join('?' * 13)})", jobs_rows)
        conn.executemany(
            "INSERT INTO job_versions (job_id, version, digest, manifest_text, spec_json, queue,"
            f" priority, submitted_at) VALUES ({','.join('?' * 8)})",
            versions,
        )  # spec_key left NULL: the spec is decoded whole, as a row from before it was kept
        conn.executemany(f"INSERT INTO attempts VALUES ({','.join('?' * 16)})", attempts)
        conn.executemany(
            "INSERT INTO ledger (job_id, attempt_id, kind, amount_usd, quantity, unit,"
            " unit_price_usd, market, price_source, price_as_of, period_start, period_end,"
            f" created_at, cloud, region, detail) VALUES ({','.join('?' * 16)})",
            ledger,
        )
    return path


def jobs_figures(count: int, runs: int) -> dict:
    path = state_file(count)
    base = [*BROKER, "jobs", "--state-file", str(path)]
    return {
        "jobs_listing": {
            "recorded_jobs": count,
            "default_page": timed(base, runs) | {"target_s": 0.3},
            "default_page_json": timed([*base, "-o", "json"], runs),
            "one_team": timed([*base, "--team", "team-3"], runs),
            "failed_only": timed([*base, "--state", "failed"], runs),
            "attempts_view": timed([*base, "--attempts"], runs),
            "every_job_json": timed([*base, "--limit", "0", "-o", "json"], max(1, runs // 2)),
        }
    }


def help_figures(runs: int) -> dict:
    sys.path.insert(0, str(REPO / "bench"))
    from catalog import heavy_modules_after_help

    return {
        "help": timed([*BROKER, "--help"], runs) | {"heavy_modules": heavy_modules_after_help()}
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifests", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=("all", "single"), default="all")
    args = parser.parse_args()
    compile_bytecode()
    figures = {"load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    figures["bytecode"] = "compiled beforehand (as installed)"
    figures["python_startup"] = timed([sys.executable, "-c", "pass"], args.runs)
    if args.only == "single":
        figures |= one_job_figures(args.runs)
    else:
        figures |= help_figures(args.runs)
        figures |= jobs_figures(args.jobs, args.runs)
        figures |= plan_figures(args.manifests, args.runs)
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
