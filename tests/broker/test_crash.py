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
from collections import Counter
from pathlib import Path

from broker.clock import SystemClock
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import AttemptState, JobState, StateStore
from tests.broker.killed_runs import broker, run_killed_at_random

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


def test_sigkill_at_random_points_loses_and_doubles_nothing(tmp_path, state_location, monkeypatch):
    """On a state file and on a PostgreSQL database (`state_location`)."""
    from broker.state.location import parse_location

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a database's sandbox
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(20):
        gpu = ("L4:1", "T4:1", "A100:1")[i % 3]
        (jobs / f"job-{i}.yaml").write_text(
            TEMPLATE.format(i=i, team=i % 2, gpu=gpu, examples=REPO / "examples")
        )
    state = parse_location(state_location)
    env = dict(os.environ, BROKER_STATE=str(state_location))
    subprocess.run(broker("submit", str(jobs)), env=env, check=True, capture_output=True)
    kills = run_killed_at_random(env, seed=7)
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


SPOT = """\
apiVersion: broker/v1
name: {name}
team: {team}
resources:
  accelerators: T4:1
placement:
  clouds: [gcp, aws]
  spot: prefer
run:
  workdir: {examples}
  command: python3 train.py --steps {steps} --checkpoint-every 10
runtime:
  estimate_hours: {estimate}
checkpoint:
  uri: s3://ckpt/{name}/
  interval_minutes: 30
  size_gb: 0
"""
EXAMPLES = REPO / "examples"
CAP, QUOTA = 1.5, 2  # the budgeted team's USD a month, and its GPUs at once
# What each of its jobs may run between two looks at its budget: a wall second is billed
# as an hour, and a pass on a machine this busy (two controllers, the test suite) may
# take seconds. Unchecked, the team spends about 6 USD (two 12 h jobs past the cap).
SLACK_HOURS = 6.0
FAST_CLOCK = ("--sandbox-time-scale", "3600")  # the wall second billed as an hour


def test_sigkill_with_two_controllers_random_reclaims_and_a_budget(tmp_path):
    """Two controllers on one state file, each killed with SIGKILL at random and restarted
    (the other keeps running), spot reclaimed at random, one team capped: nothing is lost
    or doubled, and the capped team stays within its cap but for what its jobs could run
    between two looks."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(8):  # short checkpointed spot jobs of a team without a budget
        text = SPOT.format(name=f"free-{i}", team="free", steps=120, estimate=1, examples=EXAMPLES)
        (jobs / f"free-{i}.yaml").write_text(text)
    for i in range(6):  # 12 h jobs estimated at 1 h, of a team with a budget
        text = SPOT.format(
            name=f"capped-{i}", team="capped", steps=2400, estimate=1, examples=EXAMPLES
        )
        (jobs / f"capped-{i}.yaml").write_text(text)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"teams:\n  capped: {{monthly_budget: {CAP}, max_gpus: {QUOTA}}}\n")
    state = tmp_path / "state.db"
    env = dict(os.environ, BROKER_STATE=str(state))
    subprocess.run(broker("submit", str(jobs)), env=env, check=True, capture_output=True)
    rng = random.Random(11)

    def start(seed: int) -> subprocess.Popen:
        args = ("run", "--poll", "0.05", "--policy", str(policy), *FAST_CLOCK)
        args += ("--sandbox-reclaim-rate", "0.5", "--seed", str(seed))
        return subprocess.Popen(
            broker(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    controllers = [start(0), start(1)]
    kills = 0
    for round_ in range(14):  # kill one of the two at a random moment; the other runs on
        which = rng.randrange(2)
        try:
            controllers[which].wait(timeout=rng.uniform(0.2, 0.9))
        except subprocess.TimeoutExpired:
            controllers[which].send_signal(signal.SIGKILL)
            controllers[which].wait()
            kills += 1
        controllers[which] = start(100 + round_)
    for proc in controllers:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = subprocess.run(
        broker("run", "--poll", "0.05", "--policy", str(policy), *FAST_CLOCK),
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode in (0, 4), done.stderr  # 4: what is left waits for the budget
    assert kills >= 4, "the controllers should have been killed mid-run"
    from broker.queue import load_policy

    runtime = open_runtime(state, load_offers(), policy=load_policy(policy))
    try:
        store = runtime.store
        attempts = store.attempts()
        for job in store.jobs():
            mine = store.attempts(job.id)
            if job.state is not JobState.SUCCEEDED:  # only a budget may hold a job
                assert job.team == "capped" and job.state is JobState.QUEUED, job
            for before, after in zip(mine, mine[1:], strict=False):  # one at a time
                assert before.ended_at is not None and after.started_at >= before.ended_at
        assert not [a for a in attempts if a.ended_at is None], "an attempt left open"
        assert any(a.state == AttemptState.INTERRUPTED for a in attempts), "no reclaim"
        hourly = Counter(e.attempt_id for e in store.ledger() if e.kind != "egress")
        billed = Counter(a.id for a in attempts if a.billed_hours)
        assert hourly == billed, "a charge lost or doubled"
        for job in store.jobs():
            ends = [e for e in store.events(job.id) if e.kind == "attempt_finished"]
            assert len(ends) == len(store.attempts(job.id)), "an attempt closed twice"
        held = [line for line in runtime.controller.queue_lines() if line.position]
        assert all(line.why.startswith("budget: team capped") for line in held), held
        capped = [a for a in attempts if store.job(a.job_id).team == "capped"]
        spent = sum(float(e.amount_usd) for e in store.ledger(team="capped"))
        price = max(float(a.price_per_hour) for a in capped)
        assert spent <= CAP + QUOTA * price * SLACK_HOURS, (spent, price)
        assert store.instances(state="running") == []
        alive = [i for i in runtime.provider.list_instances() if i.ended_at is None]
        assert alive == [], "a sandbox process outlived its job"
    finally:
        runtime.close()
