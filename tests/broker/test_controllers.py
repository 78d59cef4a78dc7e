"""Three `broker run` controllers on one state, killed with SIGKILL at random and
restarted: the queue drains, no attempt is launched twice, every charge is billed once,
and no sandbox process outlives its job.

Each job's command appends its attempt id to a file as it starts: the file, not the
store, says how many times each attempt really ran.
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
from broker.state import TERMINAL, AttemptState, JobState, StateStore
from tests.broker.killed_runs import broker
from tests.state_backends import state_location  # noqa: F401 (the fixture)
from tests.waiting import wait_until

JOBS = 200
MANIFEST = """\
apiVersion: broker/v1
name: job-{i}
team: team-{team}
resources:
  accelerators: {gpu}
placement:
  clouds: [gcp, aws]
run:
  command: echo "$BROKER_ATTEMPT" >> {starts}; sleep 0.2
runtime:
  estimate_hours: 1
"""


def drained(location: Path) -> bool:
    with StateStore.open(location, SystemClock(), read_only=True) as store:
        return all(job.state in TERMINAL for job in store.jobs())


def test_three_controllers_killed_at_random_launch_and_bill_each_attempt_once(
    tmp_path,
    state_location,  # noqa: F811 (the fixture)
):
    jobs, starts = tmp_path / "jobs", tmp_path / "starts.log"
    jobs.mkdir()
    for i in range(JOBS):
        gpu = ("L4:1", "T4:1", "A100:1")[i % 3]
        text = MANIFEST.format(i=i, team=i % 3, gpu=gpu, starts=starts)
        (jobs / f"job-{i}.yaml").write_text(text)
    env = dict(os.environ, BROKER_STATE=str(state_location))
    subprocess.run(broker("submit", str(jobs)), env=env, check=True, capture_output=True)
    rng = random.Random(20)

    def start(n: int) -> subprocess.Popen:
        args = ("run", "--poll", "0.05", "--lease-seconds", "2", "--controller-id", f"c{n}")
        return subprocess.Popen(
            broker(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def launched() -> int:
        return len(starts.read_text().split()) if starts.exists() else 0

    # The kills fall at random points of the drain's progress (so many jobs started),
    # not of wall time: a faster controller must not drain the queue before the kills.
    kill_points = sorted(rng.sample(range(10, JOBS - 10), 6))
    controllers = [start(n) for n in range(3)]
    kills, started = 0, 3
    try:
        for point in kill_points:
            assert wait_until(lambda p=point: launched() >= p or drained(state_location), 120)
            if drained(state_location):
                break
            which = rng.randrange(3)
            controllers[which].send_signal(signal.SIGKILL)
            controllers[which].wait()
            kills += 1
            controllers[which] = start(started)
            started += 1
        assert wait_until(lambda: drained(state_location), timeout=120), "the queue never drained"
        for proc in controllers:  # each stops by itself once nothing is left
            proc.wait(timeout=60)
            assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        for proc in controllers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    assert kills == len(kill_points), "the controllers should have been killed mid-run"

    ran = Counter(starts.read_text().split())
    with StateStore.open(state_location, SystemClock(), read_only=True) as store:
        all_jobs, attempts = store.jobs(), store.attempts()
        assert len(all_jobs) == JOBS
        assert {job.state for job in all_jobs} == {JobState.SUCCEEDED}
        assert not [a for a in attempts if a.ended_at is None], "an attempt left open"
        known = {a.id for a in attempts}
        assert set(ran) <= known, "a process ran for an attempt the store does not know"
        assert [a for a, n in ran.items() if n > 1] == [], "an attempt was launched twice"
        for job in all_jobs:
            mine = store.attempts(job.id)
            won = [a for a in mine if a.state == AttemptState.SUCCEEDED]
            assert len(won) == 1 and ran[won[0].id] == 1, (job, mine)
            for before, after in zip(mine, mine[1:], strict=False):  # one at a time
                assert before.ended_at is not None and after.started_at >= before.ended_at
            events = store.events(job.id)
            finished = [e for e in events if e.kind == "attempt_finished"]
            assert len(finished) == len(mine), "an attempt closed twice"
            up = Counter(e.attempt_id for e in events if e.kind == "attempt_running")
            assert set(up.values()) <= {1}, "an attempt recorded running twice"
        entries = store.ledger()
        periods = Counter((e.attempt_id, e.kind, e.period_start, e.period_end) for e in entries)
        assert [key for key, n in periods.items() if n > 1] == [], "a charge billed twice"
        billed = {a.id for a in attempts if a.billed_hours}
        assert {e.attempt_id for e in entries if e.kind == "compute"} == billed
        assert store.instances(state="running") == []
        assert store.leases() == [], "a lease outlived the step it guarded"
    runtime = open_runtime(state_location, load_offers())
    try:
        alive = [i for i in runtime.provider.list_instances() if i.ended_at is None]
        assert alive == [], "a sandbox process outlived its job"
    finally:
        runtime.close()


LONG = MANIFEST.replace('echo "$BROKER_ATTEMPT" >> {starts}; sleep 0.2', "sleep 60")


def test_a_pass_reads_the_running_jobs_in_bulk_on_postgresql(
    tmp_path, postgres_cluster, monkeypatch
):
    """A pass that launches nothing sends a few statements whatever the number of jobs
    running or queued (before: about five per running job: its open attempts, its
    instance, the sweep's attempt, the policy's attempts twice)."""
    from broker.manifest.load import load_manifests
    from broker.state.location import parse_location
    from broker.submit import submit_manifests

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a database's sandbox
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(120):
        (jobs / f"long-{i}.yaml").write_text(LONG.format(i=i, team=i % 3, gpu="T4:1"))
    location = parse_location(postgres_cluster.fresh_database())
    rt = open_runtime(location, load_offers(), clock=SystemClock())
    try:
        submit_manifests(rt.store, load_manifests([jobs]).manifests)
        sent: list[tuple[int, int, int]] = []  # (statements, running, queued)
        for _ in range(6):
            before = rt.store.statements_sent or 0
            report = rt.controller.run_pass()
            if not report.changed:
                running = len(rt.store.attempts(states=[AttemptState.RUNNING]))
                sent.append(((rt.store.statements_sent or 0) - before, running,
                             len(rt.store.queued())))  # fmt: skip
        assert sent, "the sandbox never filled up"
        for statements, running, queued in sent:
            assert running >= 20 and queued >= 40
            assert statements < running, (statements, running)  # not one (or five) per job
        assert len({statements for statements, _, _ in sent}) == 1  # the same every pass
    finally:
        for instance in rt.provider.list_instances():
            rt.provider.terminate(instance.id)
        rt.close()
