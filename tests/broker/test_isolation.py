"""One bad job never blocks the queue: an error the broker's own code raises for one job
of ten, in any stage (planning, ordering, launching, observing or finishing its
attempt), holds or fails that job with the error as an event, and the other nine run.
Each stage's function is made to raise for that one job only."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from broker.controller import Controller
from broker.controller.launching import Launching
from broker.controller.outcomes import INFRA_RETRIES
from broker.manifest.load import load_manifests
from broker.state import OPEN_ATTEMPT, TERMINAL, AttemptState, JobState
from broker.submit import submit_manifests
from tests.broker.sandbox import sandbox
from tests.cli.runner import run_cli
from tests.waiting import wait_ended

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = """\
apiVersion: broker/v1
name: job-{i}
team: team-{team}
resources:
  accelerators: T4:1
placement:
  clouds: [gcp, aws]
run:
  command: python3 ../train.py --steps 5 --step-seconds 0
runtime:
  estimate_hours: 1
"""
BAD = "job-4"


@pytest.fixture
def rt(tmp_path):
    with sandbox(tmp_path, pools=True) as runtime:
        folder = tmp_path / "jobs"
        folder.mkdir()
        for i in range(10):
            (folder / f"job-{i}.yaml").write_text(TEMPLATE.format(i=i, team=i % 2))
        submit_manifests(runtime.store, load_manifests([folder]).manifests)
        yield runtime


def bad_id(rt) -> str:
    return rt.store.job(BAD).id


def drain(rt, bad_ends: bool = False) -> None:
    """Passes until the nine good jobs (and, with `bad_ends`, the bad one) have ended
    and nothing is in flight."""
    for _ in range(120):
        rt.controller.run_pass()
        ending = [j for j in rt.store.jobs() if bad_ends or j.name != BAD]
        if all(j.state in TERMINAL for j in ending) and not rt.controller.active():
            return
        for known in rt.store.instances(state="running"):
            with contextlib.suppress(RuntimeError):  # the injected error, when it is this
                wait_ended(rt.provider, known.provider_id, 10)
    raise AssertionError({j.name: j.state for j in rt.store.jobs()})


def raising_for(rt, real, pick):
    """`real` wrapped to raise when `pick(*args)` names the bad job."""

    def wrapper(*args, **kwargs):
        if pick(*args, **kwargs) == bad_id(rt):
            raise RuntimeError("injected for one job")
        return real(*args, **kwargs)

    return wrapper


def errors(rt, job_id: str) -> list[str]:
    return [e.data["reason"] for e in rt.store.events(job_id) if e.kind == "error"]


def assert_nine_ran(rt) -> None:
    good = [j for j in rt.store.jobs() if j.name != BAD]
    assert len(good) == 9
    assert {j.state for j in good} == {JobState.SUCCEEDED}, {j.name: j.state for j in good}
    assert rt.store.instances(state="running") == []


def held(rt, stage: str) -> None:
    """The bad job waits in the queue with its error as its reason, noted once."""
    job_id = bad_id(rt)
    assert rt.store.job(job_id).state is JobState.QUEUED
    assert rt.store.attempts(job_id, states=OPEN_ATTEMPT) == []
    (reason,) = errors(rt, job_id)  # once, however many passes held it
    assert reason.startswith(f"error while {stage}: ")
    (line,) = [line for line in rt.controller.queue_lines() if line.job.id == job_id]
    assert line.why == reason


def failed(rt, stage: str) -> None:
    """The bad job's attempts were closed failed (no exit code of its own), retried
    INFRA_RETRIES times, then the job failed."""
    job_id = bad_id(rt)
    attempts = rt.store.attempts(job_id)
    assert rt.store.job(job_id).state is JobState.FAILED
    assert len(attempts) == INFRA_RETRIES + 1
    for attempt in attempts:
        assert attempt.state == AttemptState.FAILED and attempt.exit_code is None
        assert attempt.reason.startswith(f"error while {stage}: RuntimeError: injected")
    assert errors(rt, job_id)


def test_planning(rt, monkeypatch):
    real = Launching._steered_spec
    pick = lambda self, job, *rest: job.id  # noqa: E731
    monkeypatch.setattr(Launching, "_steered_spec", raising_for(rt, real, pick))
    drain(rt)
    assert_nine_ran(rt)
    held(rt, "planning")


def test_ordering(rt, monkeypatch):
    import broker.queue

    real = broker.queue.QueuedJob
    pick = lambda **fields: fields["job_id"]  # noqa: E731
    monkeypatch.setattr(broker.queue, "QueuedJob", raising_for(rt, real, pick))
    drain(rt)
    assert_nine_ran(rt)
    held(rt, "ordering")


def test_launching_before_an_attempt(rt, monkeypatch):
    real = Launching._place
    pick = lambda self, job, *rest: job.id  # noqa: E731
    monkeypatch.setattr(Launching, "_place", raising_for(rt, real, pick))
    drain(rt)
    assert_nine_ran(rt)
    held(rt, "launching")


def test_launching_an_attempt(rt, monkeypatch):
    import broker.controller.requests as requests

    real = requests.launch_request
    pick = lambda job, *rest: job.id  # noqa: E731
    monkeypatch.setattr(requests, "launch_request", raising_for(rt, real, pick))
    drain(rt, bad_ends=True)
    assert_nine_ran(rt)
    failed(rt, "launching")


def test_observing(rt, monkeypatch):
    provider = rt.provider
    real = provider.describe

    def job_of(instance_id: str) -> str:
        (known,) = rt.store.instances(provider_id=instance_id) or [None]
        return rt.store.attempt(known.attempt_id).job_id if known else ""

    monkeypatch.setattr(provider, "describe", raising_for(rt, real, job_of))
    drain(rt, bad_ends=True)
    assert_nine_ran(rt)
    failed(rt, "observing")


def test_finishing(rt, monkeypatch):
    real = Controller._finish
    pick = lambda self, job, *rest: job.id  # noqa: E731
    monkeypatch.setattr(Controller, "_finish", raising_for(rt, real, pick))
    drain(rt, bad_ends=True)
    assert_nine_ran(rt)
    failed(rt, "finishing")
    for attempt in rt.store.attempts(bad_id(rt)):  # billed what it ran, once
        assert len([e for e in rt.store.ledger() if e.attempt_id == attempt.id]) <= 1


def test_a_deadline_that_overflows_written_before_validation_blocks_nothing(rt, tmp_path, capsys):
    # a state file from before `validate` refused it: the spec is in the store as is
    (manifest,) = load_manifests([tmp_path / "jobs" / "job-0.yaml"]).manifests
    spec = replace(manifest.spec, name=BAD + "-overflow")
    spec = replace(spec, runtime=replace(spec.runtime, deadline=timedelta(days=99999999)))
    overflow = rt.store.submit(spec, manifest.text, "digest-overflow").job_id
    state = str(tmp_path / "state.db")
    queue = run_cli(capsys, "queue", "--state", state, "-o", "json")
    assert queue.code == 0, queue.stderr
    run = run_cli(capsys, "run", "--state", state, "--poll", "0.05")
    assert run.code == 1  # everything else ran; the one job that never can is named
    assert "stuck" in run.stderr and BAD + "-overflow" in run.stderr
    assert "OverflowError" in run.stderr and "Traceback" not in run.stderr
    jobs = {job.name: job.state for job in rt.store.jobs()}
    assert jobs.pop(BAD + "-overflow") is JobState.QUEUED
    assert set(jobs.values()) == {JobState.SUCCEEDED} and len(jobs) == 10
    (reason,) = errors(rt, overflow)
    assert reason.startswith("error while planning: OverflowError")
