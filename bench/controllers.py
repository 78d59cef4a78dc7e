"""Several controllers on one queue (issue 20). Prints one JSON document; asserts nothing.

    python bench/controllers.py [--jobs 10000] [--controllers 1,3] [--state PATH]
                                [--drain-seconds 0]

For each controller count: `--jobs` one-GPU sandbox jobs (their command is `true`) are
submitted with one `broker submit DIR`; two controller passes are timed in-process over
the full queue (each plans every queued job and launches what the sandbox holds); then that
many `broker run` processes drain the queue together, sharing its leases. Figures:

- submits_per_s: jobs over the wall time of `broker submit` (process start included);
- first_pass, steady_pass: two passes over the full queue timed in-process (goal: at
  most 1 s at 10,000 queued), the CPU time the controller's process spent in each, and
  what each launched; the first decodes every job's spec, which a controller then
  keeps (the rest of a pass's wall time is waiting: for each commit's fsync, for the
  sandbox's processes to start, for the CPU other processes hold);
- launches_per_s: attempts the controllers launched over the wall time they ran: until
  the queue drained, or `--drain-seconds` with the queue still nearly full (on a 2-core
  machine a full drain of 10,000 jobs takes over an hour: the sandbox holds 40 jobs at
  once and every pass plans the whole queue);
- attempts_per_job, lease_takeovers: a sanity look (one attempt each, none expected).

`--state` is where each run keeps its state: a path or a `postgresql://` URL; `{n}` in
it is replaced by the controller count (each run needs an empty state). Default: a
fresh SQLite file in a temporary folder; with `--backend postgresql`, a fresh database
per run on a throwaway PostgreSQL cluster (.ci/services/pg-up.sh, as the tests start
it; stopped by its PID after), or on the server of `--state URL` (a new database is
made on it for each run). On PostgreSQL each timed pass also counts the statements it
sent and the round trips they took (`statements`, `round_trips`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

JOB = """\
apiVersion: broker/v1
name: job-{i}
team: team-{team}
resources:
  accelerators: {gpu}
placement:
  clouds: [gcp, aws]
run:
  command: "true"
runtime:
  estimate_hours: 1
"""


def broker(*args: str) -> list[str]:
    return [sys.executable, "-m", "broker", *args]


def write_manifests(folder: Path, jobs: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(jobs):
        gpu = ("L4:1", "T4:1", "A100:1")[i % 3]
        (folder / f"job-{i}.yaml").write_text(JOB.format(i=i, team=i % 4, gpu=gpu))


def passes(location: str) -> dict:
    """Two controller passes over the whole queue, timed in-process: the first decodes
    every job's spec once (a controller keeps them), the second is the steady pass."""
    from broker.offers import load_offers
    from broker.runtime import open_runtime
    from broker.state.location import parse_location

    runtime = open_runtime(parse_location(location), load_offers())
    timed = {}
    try:
        for name in ("first_pass", "steady_pass"):
            queued = len(runtime.store.queued())
            sent, trips = runtime.store.statements_sent, runtime.store.round_trips
            start, cpu = time.perf_counter(), time.process_time()
            report = runtime.controller.run_pass()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            timed[name] = {"seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3)}
            timed[name]["queued"] = queued
            timed[name]["launched"] = len(report.launched)
            if sent is not None and trips is not None:
                timed[name]["statements"] = (runtime.store.statements_sent or 0) - sent
                timed[name]["round_trips"] = (runtime.store.round_trips or 0) - trips
    finally:
        runtime.close()
    return timed


def drain(location: str, controllers: int, lease_seconds: float, seconds: float) -> float:
    """Seconds `controllers` `broker run` processes ran: until the queue drained, or for
    `seconds` (then stopped as Ctrl-C stops them) when that is more than 0."""
    import signal

    env = dict(os.environ, BROKER_STATE=location)
    args = ("run", "--poll", "0.05", "--lease-seconds", str(lease_seconds))
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            broker(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(controllers)
    ]
    try:
        for proc in procs:
            left = seconds - (time.perf_counter() - start) if seconds > 0 else None
            try:
                proc.wait(timeout=max(left, 0.01) if left is not None else None)
            except subprocess.TimeoutExpired:
                break
        ended = time.perf_counter() - start
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # a clean stop: exit 130, jobs keep running
                proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return ended


def tally(location: str) -> dict:
    from collections import Counter

    from broker.clock import SystemClock
    from broker.state import StateStore

    with StateStore.open(location, SystemClock(), read_only=True) as store:
        jobs = store.jobs()
        attempts = store.attempts()
        takeovers = sum(
            1 for job in jobs for e in store.events(job.id) if e.kind == "lease_taken_over"
        )
    per_job = Counter(a.job_id for a in attempts)
    return {
        "jobs": len(jobs),
        "succeeded": sum(1 for job in jobs if job.state == "succeeded"),
        "queued": sum(1 for job in jobs if job.state == "queued"),
        "attempts": len(attempts),
        "attempts_per_job": max(per_job.values(), default=0),
        "lease_takeovers": takeovers,
    }


def one_run(folder: Path, location: str, jobs: int, controllers: int, args) -> dict:
    env = dict(os.environ, BROKER_STATE=location)
    start = time.perf_counter()
    subprocess.run(broker("submit", str(folder)), env=env, check=True, capture_output=True)
    submit_s = time.perf_counter() - start
    timed = passes(location)
    launched = sum(one["launched"] for one in timed.values())
    drain_s = drain(location, controllers, args.lease_seconds, args.drain_seconds)
    counts = tally(location)
    return {
        "controllers": controllers,
        "submit_s": round(submit_s, 2),
        "submits_per_s": round(jobs / submit_s, 1),
        **timed,
        "drain_s": round(drain_s, 2),
        "launches_per_s": round((counts["attempts"] - launched) / drain_s, 1),
        **counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--controllers", default="1,3", help="controller counts, comma separated")
    parser.add_argument("--state", default="", help="state location; {n}: the controller count")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=0.0,
        help="run the controllers this long, then stop them (0: until the queue drains)",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.controllers.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="bench-controllers-", dir="/tmp") as tmp:
        folder = Path(tmp) / "jobs"
        write_manifests(folder, args.jobs)
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "xdg-state")  # a database's sandbox
        runs = []
        with locations(args, Path(tmp)) as location_for:
            for n in counts:
                runs.append(one_run(folder, location_for(n), args.jobs, n, args))
                print(json.dumps(runs[-1]), file=sys.stderr)  # progress: each run as it ends
    print(json.dumps({"jobs": args.jobs, "backend": args.backend, "runs": runs}, indent=2))


@contextmanager
def locations(args, tmp: Path) -> Iterator[Callable[[int], str]]:
    """Where the run of `n` controllers keeps its state (see the module docstring)."""
    if args.backend == "sqlite":
        template = args.state or str(tmp / "state-{n}.db")
        yield lambda n: template.replace("{n}", str(n))
        return
    from state_backends import fresh_database, stop_cluster, throwaway_cluster

    server, env = args.state, None
    if not server:
        tmp.chmod(0o755)  # the postgres user must traverse it
        server, env, why = throwaway_cluster(tmp / "svc")
        if server is None:
            raise SystemExit(f"bench/controllers.py: no PostgreSQL cluster: {why}")
    try:
        yield lambda n: fresh_database(server)
    finally:
        if env is not None:
            stop_cluster(env)


if __name__ == "__main__":
    main()
