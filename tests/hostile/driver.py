"""Run many broker command lines in one process, each through the real entry point.

    python -m tests.hostile.driver RUNS.json RESULTS.jsonl

RUNS.json is a list of {"id", "argv", "cwd", "env"}; each run calls
`broker.cli.main.main()` with that argv, in that folder and environment, its stdout and
stderr captured, and appends one JSON line {"id", "code", "stdout", "stderr",
"traceback", "seconds"} to RESULTS.jsonl as soon as it ends (so that a run that hangs
is known by the line that is missing). A run that does not end within its alarm
(`--alarm` seconds, default 20) is stopped by SIGALRM and reported as a hang.

Starting Python, typer and pandas once for hundreds of runs is what makes the
hostile-input run fit in the suite; the test also runs a sample of the same cases as
real `broker` subprocesses, which this one process cannot stand in for.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path


class Hang(BaseException):
    """Raised by the alarm: the run did not end in time."""


def run_one(argv: list[str], cwd: str, env: dict[str, str]) -> dict[str, object]:
    """One command line through `broker.cli.main.main`, as a user would type it."""
    from broker.cli.main import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved = sys.argv, sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    trace = ""
    started = time.monotonic()
    try:
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv, sys.stdout, sys.stderr = ["broker", *argv], out, err
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Hang:
        code, trace = "hang", "".join(traceback.format_stack(limit=12))
    except BaseException:  # what a user would see as a traceback
        code, trace = "traceback", traceback.format_exc()
    finally:
        sys.argv, sys.stdout, sys.stderr = saved
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return {
        "code": code,
        "stdout": out.getvalue()[-4000:],
        "stderr": err.getvalue()[-4000:],
        "traceback": trace,
        "seconds": round(time.monotonic() - started, 3),
    }


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def main() -> None:
    runs_file, results_file = Path(sys.argv[1]), Path(sys.argv[2])
    alarm = int(sys.argv[sys.argv.index("--alarm") + 1]) if "--alarm" in sys.argv else 20
    runs = json.loads(runs_file.read_text())
    signal.signal(signal.SIGALRM, _alarm)
    with results_file.open("a", encoding="utf-8") as results:
        for run in runs:
            signal.alarm(alarm)
            try:
                result = run_one(run["argv"], run["cwd"], run["env"])
            finally:
                signal.alarm(0)
            results.write(json.dumps({"id": run["id"], **result}) + "\n")
            results.flush()


if __name__ == "__main__":
    main()
