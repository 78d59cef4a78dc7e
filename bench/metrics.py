"""The metrics endpoint over a big state (issue 20). Prints one JSON document; asserts nothing.

    python bench/metrics.py [--jobs 10000] [--runs 7]

Over a state file holding `--jobs` recorded jobs (bench/cli.py's `state_file`: one or
two attempts each, with their ledger lines):
- one scrape of http://127.0.0.1:PORT/metrics, end to end (open the state read-only,
  count, render, HTTP), and the counting alone (`state_figures`);
- a writer's commits while scrapes run back to back: how long each commit took, to show
  that scrapes (read-only, WAL) do not hold writers up.

Each figure is the median of `--runs` runs: wall seconds, and CPU seconds of the process
(less moved by other work on the machine), with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def median_seconds(action, runs: int) -> dict:
    """Median and max wall seconds of `runs` runs, and the median CPU seconds of this
    process (the server's threads included: less moved by other work on the machine)."""
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return {
        "median_s": round(statistics.median(walls), 4),
        "max_s": round(max(walls), 4),
        "cpu_median_s": round(statistics.median(cpus), 4),
    }


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def writer_latencies(path: Path, url: str, commits: int, scrapes_at_least: int = 3) -> dict:
    """Commit writes (an event each: one write transaction) while another thread scrapes
    without pause, at least `commits` of them and until `scrapes_at_least` scrapes
    ended; each commit's seconds."""
    from broker.clock import SystemClock
    from broker.state import StateStore

    stop, scrapes = threading.Event(), [0]

    def scraping() -> None:
        while not stop.is_set():
            scrape(url)
            scrapes[0] += 1

    thread = threading.Thread(target=scraping, daemon=True)
    store = StateStore.open(path, SystemClock())
    job = store.jobs()[0]
    walls = []
    thread.start()
    try:
        while len(walls) < commits or scrapes[0] < scrapes_at_least:
            start = time.perf_counter()
            store.record_error(job.id, f"bench write {len(walls)}")  # one write transaction
            walls.append(time.perf_counter() - start)
    finally:
        stop.set()
        thread.join()
        store.close()
    return {
        "commits": len(walls),
        "scrapes_meanwhile": scrapes[0],
        "commit_median_s": round(statistics.median(walls), 5),
        "commit_max_s": round(max(walls), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    from cli import state_file

    from broker.metrics.figures import state_figures
    from broker.metrics.server import read_only_state, serve_metrics

    path = state_file(args.jobs)
    opener = read_only_state(path)
    server = serve_metrics(0, "127.0.0.1", opener, {"lab": 16.0})
    try:
        body = scrape(server.url)  # warm: imports, page cache

        def figures_only() -> None:
            with opener() as reads:
                state_figures(reads)

        figures = {
            "recorded_jobs": args.jobs,
            "exposition_bytes": len(body),
            "scrape": median_seconds(lambda: scrape(server.url), args.runs),
            "counting_only": median_seconds(figures_only, args.runs),
            "writer_during_scrapes": writer_latencies(path, server.url, 200),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        server.close()
    print(json.dumps({"metrics": figures}, indent=2))


if __name__ == "__main__":
    main()
