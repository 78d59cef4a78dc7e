"""Lost work is measured from the job's own checkpoint time (its `.broker-checkpoint`
marker, docs/spot.md): a job that saves when told to stop (a reclaim's SIGTERM, a
preemption) lost nothing, in `broker status`, the ledger's reports and the spot
policy's count of work done; a job that ignores SIGTERM lost what came after its
last checkpoint."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.reports.report import build_report
from broker.state import AttemptState, JobState
from tests.broker.sandbox import sandbox, submit_text
from tests.cli.runner import run_cli
from tests.waiting import running_program, wait_ended, wait_until

JOB = """\
apiVersion: broker/v1
name: {name}
team: nlp
resources:
  accelerators: T4:1
placement:
  clouds: [aws, gcp]
  spot: only
run:
  command: {command}
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://acme-ckpt/{name}/
  interval_minutes: 30
  size_gb: 1
"""
TRAINS = "python3 ../train.py --steps 5000 --checkpoint-every 50 --step-seconds 0.002"
# Checkpoints once (marker and all) at its start, then ignores SIGTERM and keeps working.
STUBBORN = (
    'sh -c \'trap "" TERM; echo x > "$BROKER_CHECKPOINT_DIR/state"; '
    'date -u +%Y-%m-%dT%H:%M:%S.%6NZ > "$BROKER_CHECKPOINT_DIR/.broker-checkpoint"; '
    "exec sleep 60'"
)


@pytest.fixture
def rt(tmp_path):
    with sandbox(tmp_path) as runtime:
        yield runtime


def submit(rt, name: str, command: str) -> str:
    return submit_text(rt, name, JOB.format(name=name, command=command))


def launched(rt, job_id: str, marker: bool = True):
    """The job's open attempt and instance id, once the job has checkpointed."""
    rt.controller.run_pass()
    (attempt,) = rt.store.attempts(job_id)
    place = attempt.placed_on
    store = Path(rt.provider.checkpoint_store(job_id, place.cloud, place.region))
    assert wait_until((store / ".broker-checkpoint").exists)
    (instance,) = rt.store.instances(attempt_id=attempt.id)
    return attempt, instance.provider_id, store


def test_a_reclaimed_job_that_saves_on_sigterm_lost_nothing(rt, tmp_path, capsys):
    job_id = submit(rt, "saver", TRAINS)
    first, instance, store = launched(rt, job_id)
    notice = rt.provider.interrupt(instance)
    assert notice is not None
    wait_ended(rt.provider, instance, 30)
    marker = datetime.fromisoformat((store / ".broker-checkpoint").read_text().splitlines()[0])
    assert marker >= notice.noticed_at  # the save at SIGTERM, after the notice
    rt.controller.run_pass()  # observes the end, closes the attempt, relaunches
    ended = rt.store.attempt(first.id)
    assert ended.state == AttemptState.INTERRUPTED
    assert ended.reason.endswith("no work lost: it checkpointed when told to stop")
    assert rt.store.lost_shares()[first.id] == 0
    assert rt.store.checkpoints()[first.id] == marker
    report = build_report(rt.store, ["job"])
    assert report.totals.lost == 0 and report.totals.lost_gpu_hours == 0
    state = str(tmp_path / "state.db")
    shown = run_cli(capsys, "cost-report", "--state", state, "-o", "json")
    assert json.loads(shown.stdout)["totals"]["lost_usd"] == "0.000000"
    status = run_cli(capsys, "status", "saver", "--state", state, "-o", "json")
    messages = [e["message"] for e in json.loads(status.stdout)["events"]]
    assert any("no work lost" in message for message in messages)
    assert not any(" lost 0." in message for message in messages)
    # the resumed attempt says it resumed from the saved step
    saved = json.loads((store / "checkpoint.json").read_text())["step"]
    assert wait_until(lambda: len(rt.store.attempts(job_id)) == 2)
    second = rt.store.attempts(job_id)[1]
    log = rt.workdir / second.id / "log.txt"
    assert wait_until(lambda: log.exists() and f"resumed from step {saved}" in log.read_text())


def test_a_preempted_job_that_saves_on_sigterm_lost_nothing(rt):
    job_id = submit(rt, "preempted", TRAINS)
    first, instance, _ = launched(rt, job_id)
    assert wait_until(lambda: running_program(first.id, "python3"))
    rt.controller.preempt(job_id, "preempted by ops/urgent")
    ended = rt.store.attempt(first.id)
    assert ended.state == AttemptState.INTERRUPTED
    assert "no work lost" in ended.reason
    assert rt.store.lost_shares()[first.id] == 0
    assert rt.store.job(job_id).state is JobState.QUEUED
    assert build_report(rt.store, ["job"]).totals.lost == 0


def test_a_job_that_ignores_sigterm_lost_what_came_after_its_last_checkpoint(rt):
    rt.provider.terminate_grace = 0.5  # then killed
    job_id = submit(rt, "stubborn", STUBBORN)
    first, instance, store = launched(rt, job_id)
    assert wait_until(lambda: running_program(first.id, "sleep"))
    rt.controller.preempt(job_id, "preempted by ops/urgent")
    ended = rt.store.attempt(first.id)
    seen = rt.provider.describe(instance)
    marker = datetime.fromisoformat((store / ".broker-checkpoint").read_text().strip())
    expected = (seen.ended_at - marker) / (seen.ended_at - seen.launched_at)
    share = rt.store.lost_shares()[first.id]
    assert 0 < share < 1 and float(share) == pytest.approx(expected, abs=1e-6)
    assert rt.store.checkpoints()[first.id] == marker
    lost = build_report(rt.store, ["job"]).totals.lost
    (compute,) = [e for e in rt.store.ledger(job_id=job_id) if e.kind == "compute"]
    assert lost == (compute.amount_usd * share).quantize(Decimal("1e-6"))
    assert f"lost {float(ended.billed_hours * share):.2f} h" in ended.reason


def test_markers_are_read_strictly():
    from broker.controller.checkpoints import parse_marker

    assert parse_marker("2026-11-01T03:00:00Z\nstep 5\n") == datetime(2026, 11, 1, 3, tzinfo=UTC)
    assert parse_marker("2026-11-01T04:00:00+01:00") == datetime(2026, 11, 1, 3, tzinfo=UTC)
    assert parse_marker("2026-11-01T03:00:00") == datetime(2026, 11, 1, 3, tzinfo=UTC)
    assert parse_marker("") is None and parse_marker("yesterday") is None


T = datetime(2026, 11, 1, tzinfo=UTC)
minutes = st.integers(min_value=0, max_value=600).map(lambda m: T + timedelta(minutes=m))


@given(minutes, minutes, st.none() | minutes, st.none() | minutes)
def test_the_share_lost_is_a_share_and_nothing_when_saved_once_told(start, end, saved, told):
    from broker.reports.lines import share_lost

    if end <= start:
        return
    share = share_lost(start, end, saved, told)
    assert 0 <= share <= 1
    if saved is not None and told is not None and saved >= told:
        assert share == 0
    elif saved is None or saved <= start:
        assert share == 1
    elif saved >= end:
        assert share == 0
    else:
        assert share == Decimal((end - saved) // timedelta(microseconds=1)) / Decimal(
            (end - start) // timedelta(microseconds=1)
        )
