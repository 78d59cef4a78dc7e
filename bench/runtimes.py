"""Benchmark: the runtime estimator's error on the Philly and Gavel job traces (issue 19).

Every submission of a trace, in time order, is predicted as a manifest with
`estimate_hours: auto` would be (broker.learned_runtime: the mean of the last 2 ended
runs of the same job name in the team, else of the same GPU count, else 1 h), from the
runs that had ended by then (broker.sim.traces.runtime_replay). Prints JSON: per trace,
the median and p90 relative error |predicted - actual| / actual of the estimator and of
always 1 h, over every job and per basis of the prediction, and the wall time.
Neither trace has a user's own estimate, so that comparison cannot be made here.
Usage: python bench/runtimes.py [--limit N] [--shared DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from broker.sim.traces import runtime_replay as rr

    parser = argparse.ArgumentParser()
    default = os.environ.get("BROKER_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
    parser.add_argument("--shared", type=Path, default=Path(default))
    parser.add_argument("--limit", type=int, default=None, help="first N jobs of each trace")
    args = parser.parse_args()
    traces = args.shared / "traces"
    results = {}
    for name, read in (
        ("philly", lambda: rr.philly(traces / "philly/philly_jobs.csv.gz", args.limit)),
        (
            "gavel",
            lambda: rr.gavel(
                traces / "gavel/philly_vc_traces.csv.gz",
                traces / "gavel/simulation_throughputs_isolated.csv",
                limit=args.limit,
            ),
        ),
    ):
        began = time.perf_counter()
        predictions = rr.replay(read())
        results[name] = rr.errors(predictions) | {"wall_s": round(time.perf_counter() - began, 2)}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
