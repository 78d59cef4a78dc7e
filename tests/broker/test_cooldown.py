"""Cool-downs are waits, not failures: a spot-only job whose only place was just reclaimed
waits in the queue "cooling down until T (place)", `broker run` sleeps until the
cool-down ends and runs it, and "stuck" is kept for jobs that can never run, by name."""

from __future__ import annotations

import json
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from broker.cli.exits import CliExit
from broker.cli.run import drive
from broker.dispatch.settings import DispatchSettings
from broker.recovery import cooldown
from broker.state import AttemptState, JobState
from tests.broker.sandbox import sandbox, submit_text
from tests.cli.runner import run_cli
from tests.waiting import wait_ended, wait_until

ONE_PLACE = """\
apiVersion: broker/v1
name: one-place
team: nlp
resources:
  accelerators: H100:8
placement:
  clouds: [aws]
  regions: [us-east-1]
  spot: only
run:
  command: python3 ../train.py --steps {steps} --checkpoint-every 20 --step-seconds 0.005
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://acme-ckpt/one-place/
  interval_minutes: 30
  size_gb: 1
"""
NEVER = """\
apiVersion: broker/v1
name: never-fits
team: nlp
resources:
  accelerators: H100:64
placement:
  clouds: [aws]
run:
  command: "true"
runtime:
  estimate_hours: 1
"""
PLACE = "aws/us-east-1/p5.48xlarge"


@pytest.fixture
def rt(tmp_path):
    with sandbox(tmp_path) as runtime:
        yield runtime


def submit(rt, text: str) -> str:
    return submit_text(rt, text.split("name: ")[1].split()[0], text)


def reclaim(rt, job_id: str):
    """Launch the job, let it checkpoint, reclaim it; its ended first attempt."""
    rt.controller.run_pass()
    (first,) = rt.store.attempts(job_id)
    assert first.placed_on.where == PLACE
    store = Path(rt.provider.checkpoint_store(job_id, "aws", "us-east-1"))
    assert wait_until((store / "checkpoint.json").exists)
    (instance,) = rt.store.instances(attempt_id=first.id)
    assert rt.provider.interrupt(instance.provider_id) is not None
    wait_ended(rt.provider, instance.provider_id, 30)
    report = rt.controller.run_pass()
    ended = rt.store.attempt(first.id)
    assert ended.state == AttemptState.INTERRUPTED
    return ended, report


def test_a_job_whose_only_place_cools_down_waits_for_it(rt, tmp_path, capsys):
    job_id = submit(rt, ONE_PLACE.format(steps=20000))
    ended, report = reclaim(rt, job_id)
    until = ended.ended_at + cooldown(1)
    why = f"cooling down until {until.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} ({PLACE})"
    assert rt.store.job(job_id).state is JobState.QUEUED
    assert report.waiting == {"one-place": why} and report.wake_at == until
    (line,) = [line for line in rt.controller.queue_lines() if line.job.id == job_id]
    assert line.why == why and line.placed is not None and line.placed.where == PLACE
    shown = run_cli(capsys, "queue", "--state", str(tmp_path / "state.db"), "-o", "json")
    assert shown.code == 0, shown.stderr
    (row,) = json.loads(shown.stdout)["queue"]
    assert row["why"] == why and "no feasible placement" not in row["why"]


def test_the_run_loop_sleeps_until_the_cool_down_ends(rt, capsys):
    rt.controller.settings = DispatchSettings(cooldown_scale=0.003)  # 1.8 s after one reclaim
    job_id = submit(rt, ONE_PLACE.format(steps=2000))
    ended, _ = reclaim(rt, job_id)
    drive(rt, poll=0.05, limit_s=60)  # returns: the queue drained, nothing was "stuck"
    assert rt.store.job(job_id).state is JobState.SUCCEEDED
    first, second = rt.store.attempts(job_id)
    assert second.placed_on.where == PLACE  # its one place, once it reopened
    assert second.started_at >= ended.ended_at + cooldown(1, 0.003)
    assert "one-place waits: cooling down until" in capsys.readouterr().err


def test_stuck_is_for_jobs_that_can_never_run_and_names_them(rt, capsys):
    submit(rt, NEVER)
    with pytest.raises(CliExit) as stuck:
        drive(rt, poll=0.05, limit_s=30)
    assert stuck.value.code == 1
    assert "the queue is stuck" in str(stuck.value) and "never-fits" in str(stuck.value)
    assert "no feasible placement" in str(stuck.value)


def test_a_cool_down_does_not_hide_a_reason_that_is_not_one(rt):
    # both wait; only one of them for the cool-down
    job_id = submit(rt, ONE_PLACE.format(steps=20000))
    reclaim(rt, job_id)
    other = submit(rt, NEVER)
    report = rt.controller.run_pass()
    assert report.waiting["one-place"].startswith("cooling down until")
    assert report.waiting["never-fits"].startswith("no feasible placement")
    assert rt.store.job(other).state is JobState.QUEUED
    assert report.wake_at is not None and report.wake_at - rt.controller.clock.now() < timedelta(
        minutes=11
    )
