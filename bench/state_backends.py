"""The state store on SQLite and on PostgreSQL (issue 20). Prints one JSON document;
asserts nothing.

    python bench/state_backends.py [--jobs 10000] [--postgres postgresql://...] [--no-sqlite]

For each backend, on a fresh file or database:
- `submits_per_s`: `StateStore.submit` of `--jobs` new jobs, one transaction each (as
  `broker submit` does), from one process;
- `queue_read_s`: reading the queue at that depth (`store.queued()`, what a pass reads
  first) and `broker jobs`' default page (`store.listing(limit=50)`), medians of 5;
- `pass_s`: one controller pass (`Controller.run_pass` on the sandbox) with every job
  queued: it plans the whole queue and launches what the sandbox has room for (their
  processes are stopped after), and the launches it made; then `steady_pass_s`, a
  second pass (the specs decoded: it observes the running jobs, plans the queue again
  and launches into the room left), then `full_pass_s`, a third with the sandbox full
  (it observes every running job and plans the queue, launching nothing: what a pass
  reads, alone); each with its CPU seconds and, on PostgreSQL, the statements it sent
  and the round trips they took (a write's statements whose results are not read go
  out together: psycopg's pipeline mode).

Without `--postgres` a throwaway cluster is started with .ci/services/pg-up.sh (as the
tests do: /usr/lib/postgresql/*/bin, run as the `postgres` user when root) and stopped by
PID after; without PostgreSQL installed only SQLite is measured, and the document says why.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SERVICES = REPO / ".ci" / "services"
MANIFEST = """\
apiVersion: broker/v1
name: bench-{i}
team: team-{team}
resources:
  accelerators: T4:1
placement:
  clouds: [gcp, aws]
run:
  command: sleep 30
runtime:
  estimate_hours: 1
"""


def measure(location, jobs: int, workdir: Path) -> dict:
    from broker.clock import SystemClock
    from broker.manifest.load import load_manifests
    from broker.offers import load_offers
    from broker.runtime import open_runtime
    from broker.state import StateStore

    source = workdir / "job.yaml"
    source.write_text(MANIFEST.format(i=0, team=0))
    (manifest,) = load_manifests([source]).manifests
    specs = []
    from dataclasses import replace

    for i in range(jobs):
        specs.append(replace(manifest.spec, name=f"bench-{i}", team=f"team-{i % 7}"))
    with StateStore.open(location, SystemClock()) as store:
        start = time.perf_counter()
        for i, spec in enumerate(specs):
            store.submit(spec, manifest.text, f"digest-{i}")
        submit_s = time.perf_counter() - start
        queued = _median(lambda: store.queued(), 5)
        page = _median(lambda: store.listing(limit=50), 5)
    os.environ["XDG_STATE_HOME"] = str(workdir / "xdg-state")  # a database's sandbox folder
    rt = open_runtime(location, load_offers(), clock=SystemClock())
    passes = {}
    try:
        for name in ("pass", "steady_pass", "full_pass"):
            sent, trips = rt.store.statements_sent, rt.store.round_trips
            start, cpu = time.perf_counter(), time.process_time()
            report = rt.controller.run_pass()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            passes[f"{name}_s"] = round(seconds, 3)
            passes[f"{name}_cpu_s"] = round(cpu, 3)
            passes[f"{name}_launched"] = len(report.launched)
            if sent is not None and trips is not None:
                passes[f"{name}_statements"] = (rt.store.statements_sent or 0) - sent
                passes[f"{name}_round_trips"] = (rt.store.round_trips or 0) - trips
    finally:
        for instance in rt.provider.list_instances():
            rt.provider.terminate(instance.id)
        rt.close()
    return {
        "jobs": jobs,
        "submit_s": round(submit_s, 3),
        "submits_per_s": round(jobs / submit_s, 1),
        "queue_read_s": round(queued, 4),
        "jobs_page_s": round(page, 4),
        **passes,
    }


def _median(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def throwaway_cluster(folder: Path) -> tuple[str | None, dict, str]:
    """A throwaway cluster (pg-up.sh) and its URL; (None, env, why) when none can start."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder.mkdir()
    folder.chmod(0o755)  # the postgres user must traverse it (and its parent)
    password = secrets.token_urlsafe(12)
    env = {**os.environ, "SVC_DIR": str(folder), "PG_PORT": str(port), "PG_PASSWORD": password}
    done = subprocess.run(["bash", str(SERVICES / "pg-up.sh")], env=env, capture_output=True)
    if done.returncode:
        return None, env, done.stderr.decode().strip()[-300:]
    url = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
    return url, env, ""


def fresh_database(url: str) -> str:
    import psycopg

    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + f"/{name}"


def stop_cluster(env: dict) -> None:
    """Stop the cluster of `throwaway_cluster` by its PID (pg-down.sh) and remove it."""
    subprocess.run(["bash", str(SERVICES / "pg-down.sh")], env=env, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--postgres", help="a server to use (a new database is made on it)")
    parser.add_argument("--no-sqlite", action="store_true", help="measure PostgreSQL only")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-state-", dir="/tmp"))
    root.chmod(0o755)
    result: dict = {"machine": {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}}
    env = None
    try:
        if not args.no_sqlite:
            (root / "sqlite").mkdir()
            result["sqlite"] = measure(root / "sqlite" / "state.db", args.jobs, root / "sqlite")
        server, why = args.postgres, ""
        if server is None:
            server, env, why = throwaway_cluster(root / "svc")
        if server is None:
            result["postgresql"] = {"skipped": why or "no PostgreSQL"}
        else:
            (root / "pg").mkdir()
            result["postgresql"] = measure(fresh_database(server), args.jobs, root / "pg")
    finally:
        if env is not None:
            stop_cluster(env)
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
