"""The detailed engine's speed yardstick (docs/benchmarks.md, "Speed of the detailed engine"):
the same 128 Can't Be Late runs (two files, 2 deadlines x 4 starts x 2 restarts x 4
policies, bench/simulate.py's settings), one process, `time.process_time` per run, summed
per file and policy. Prints one JSON document.

    BROKER_SHARED_DIR=/work/shared python bench/engine_speed.py \
        [--detail runs.json] [--profile out.prof]

`--detail` writes every run's `PolicyResult.as_dict()` (every field), to compare two
versions byte for byte; `--profile` runs the whole under cProfile and dumps its stats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FILES = (
    "availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json",
    "preemption/1-node/aws-04-19-2023/us-east-1b_intel_64.json",
)
POLICIES = "broker,spot-failover,uniform-progress,on-demand"


def main() -> None:
    default = os.environ.get("BROKER_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared"
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", type=Path, default=Path(default))
    parser.add_argument("--detail", type=Path, default=None, help="every run's full result")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile stats file")
    args = parser.parse_args()
    root = args.shared / "traces" / "cant-be-late-spot"
    if not root.is_dir():
        sys.exit(f"the Can't Be Late traces are not at {root}")
    if args.profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        out = profiler.runcall(measure, root, args.detail)
        profiler.dump_stats(str(args.profile))
    else:
        out = measure(root, args.detail)
    print(json.dumps(out, indent=2))


def measure(root: Path, detail: Path | None) -> dict:
    """CPU seconds per (file, policy) and in all, and the runs' results if asked."""
    from simulate import cbl_tasks

    tasks = cbl_tasks([root / f for f in FILES], POLICIES.split(","), 4)
    seconds: dict[str, float] = {}
    results = []
    for task in tasks:
        result, cpu = run(task)
        key = f"{Path(task[0]).name.split('_')[0]} {task[4]}"
        seconds[key] = seconds.get(key, 0.0) + cpu
        results.append({"task": [str(Path(task[0]).relative_to(root)), *task[1:]],
                        "result": result.as_dict()})  # fmt: skip
    if detail is not None:
        detail.write_text(json.dumps(results, indent=1))
    return {
        "runs": len(tasks),
        "cpu_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "cpu_seconds_total": round(sum(seconds.values()), 2),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def run(task: tuple):
    """One run as bench/simulate.py's `_cbl_run` makes it: (its whole result, CPU s)."""
    from simulate import cbl_scenario

    from broker.sim.engine import simulate

    scenario, policy = cbl_scenario(task)
    started = time.process_time()
    result = simulate(scenario, policy)
    return result, time.process_time() - started


if __name__ == "__main__":
    main()
