"""`broker run` killed with SIGKILL at random moments and started again: the loop the
crash tests (test_crash.py, test_gang_crash.py, test_controllers.py) drive a queue with."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Mapping


def broker(*args: str) -> list[str]:
    """The argv of the broker CLI as a user runs it (`python -m broker ...`)."""
    return [sys.executable, "-m", "broker", *args]


def run_killed_at_random(
    env: Mapping[str, str], seed: int, *, tries: int = 12, finish_timeout: float = 120
) -> int:
    """Start `broker run` up to `tries` times, each killed with SIGKILL at a random moment
    of its first 0.1-0.8 s unless it ended by itself first (the queue drained); then,
    when none ended by itself, one run to the end, which must exit 0. The number of kills."""
    rng = random.Random(seed)
    finished, kills = False, 0
    for _ in range(tries):
        proc = subprocess.Popen(
            broker("run", "--poll", "0.05"),
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:  # the kill point: a random moment of the run, or its natural end
            finished = proc.wait(timeout=rng.uniform(0.1, 0.8)) == 0
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        if finished:
            return kills
    done = subprocess.run(
        broker("run", "--poll", "0.05"),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=finish_timeout,
    )
    assert done.returncode == 0, done.stderr
    return kills
