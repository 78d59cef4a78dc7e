"""Kill `broker run` with SIGKILL at random points and restart it: nothing is lost or doubled.

Checks, after the queue drains: every job succeeded exactly once (one attempt, one
success), no sandbox process is left without a job, and every ended attempt has
exactly one ledger entry.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from broker.clock import SystemClock
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import AttemptState, JobState, StateStore

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = """\
apiVersion: broker/v1
name: job-{i}
team: team-{team}
resources:
  accelerators: {gpu}
placement:
  clouds: [gcp, aws]
run:
  workdir: {examples}
  command: python3 train.py --steps 15
runtime:
  estimate_hours: 1
"""


def broker(*args: str) -> list[str]:
    return [sys.executable, "-m", "broker", *args]


def test_sigkill_at_random_points_loses_and_doubles_nothing(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(20):
        gpu = ("L4:1", "T4:1", "A100:1")[i % 3]
        (jobs / f"job-{i}.yaml").write_text(
            TEMPLATE.format(i=i, team=i % 2, gpu=gpu, examples=REPO / "examples")
        )
    state = tmp_path / "state.db"
    env = dict(os.environ, BROKER_STATE=str(state))
    subprocess.run(broker("submit", str(jobs)), env=env, check=True, capture_output=True)
    rng = random.Random(7)
    finished, kills = False, 0
    for _ in range(12):
        proc = subprocess.Popen(
            broker("run", "--poll", "0.05"),
            env=env,
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
            break
    if not finished:
        done = subprocess.run(
            broker("run", "--poll", "0.05"), env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    assert kills >= 2, "the controller should have been killed mid-run at least twice"
    with StateStore.open(state, SystemClock()) as store:
        all_jobs = store.jobs()
        assert len(all_jobs) == 20
        assert {job.state for job in all_jobs} == {JobState.SUCCEEDED}
        attempts = store.attempts()
        per_job = Counter(a.job_id for a in attempts)
        assert set(per_job.values()) == {1}, "a job ran more than once"
        assert {a.state for a in attempts} == {AttemptState.SUCCEEDED}
        charges = Counter(entry.attempt_id for entry in store.ledger())
        assert charges == Counter({a.id: 1 for a in attempts}), "a charge lost or doubled"
    view = load_offers()
    runtime = open_runtime(state, view)
    try:
        alive = [i for i in runtime.provider.list_instances() if i.ended_at is None]
        assert alive == [], "a sandbox process outlived its job"
    finally:
        runtime.close()
