"""Spot survival in the sandbox, with real processes and real checkpoint files: a job
reclaimed mid-run resumes elsewhere from its checkpoint, moved there first, and ends
with the same weights as a run that was never interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from broker.clock import FixedClock, SystemClock
from broker.manifest.load import Manifest, load_manifests
from broker.offers import load_offers
from broker.recovery import closed_places, recent_reclaims
from broker.runtime import BrokerSession, open_runtime
from broker.state import AttemptState, JobState
from broker.submit import submit_manifests
from tests.waiting import running_program, wait_ended, wait_until

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
STEPS, EVERY = 3000, 50
JOB = f"""\
apiVersion: broker/v1
name: survivor
team: nlp
resources:
  accelerators: T4:1
placement:
  clouds: [aws, gcp]
  spot: only
run:
  workdir: {REPO / "examples"}
  command: python3 train.py --steps {STEPS} --checkpoint-every {EVERY} --step-seconds 0.002
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://acme-ckpt/survivor/
  interval_minutes: 30
  size_gb: 20
"""


@pytest.fixture
def rt(tmp_path):
    runtime = open_runtime(tmp_path / "state.db", load_offers(), clock=SystemClock())
    yield runtime
    for instance in runtime.provider.list_instances():
        runtime.provider.terminate(instance.id)
    runtime.close()


def submit(rt) -> str:
    path = rt.workdir.parent / "survivor.yaml"
    path.write_text(JOB)
    (manifest,) = load_manifests([path]).manifests
    (result,) = submit_manifests(rt.store, [manifest])
    return result.job_id


def run_until_reclaimed(rt, job_id: str):
    """Launch the job, let it checkpoint, reclaim its spot instance; the first attempt."""
    rt.controller.run_pass()
    (first,) = rt.store.attempts(job_id)
    place = first.placed_on
    store = Path(rt.provider.checkpoint_store(job_id, place.cloud, place.region))
    assert wait_until((store / "checkpoint.json").exists)
    (instance,) = rt.store.instances(attempt_id=first.id)
    assert rt.provider.interrupt(instance.provider_id) is not None
    wait_ended(rt.provider, instance.provider_id, 30)
    return first


def finish(rt, job_id: str) -> None:
    for _ in range(50):
        rt.controller.run_pass()
        if rt.store.job(job_id).state in (JobState.SUCCEEDED, JobState.FAILED):
            return
        for known in rt.store.instances(state="running"):
            wait_ended(rt.provider, known.provider_id, 30)
    raise AssertionError(f"job did not finish: {rt.store.job(job_id).state}")


def log_of(rt, attempt_id: str) -> str:
    return (rt.workdir / attempt_id / "log.txt").read_text()


def test_a_reclaimed_job_moves_its_checkpoint_and_resumes_where_it_stopped(rt, tmp_path):
    job_id = submit(rt)
    first = run_until_reclaimed(rt, job_id)
    finish(rt, job_id)
    attempts = rt.store.attempts(job_id)
    assert [a.state for a in attempts] == [AttemptState.INTERRUPTED, AttemptState.SUCCEEDED]
    second = attempts[1]
    here, there = first.placed_on, second.placed_on
    assert (here.cloud, here.region) != (there.cloud, there.region)
    assert second.market == "spot"
    # The reclaimed place is closed for spot now, for every job.
    now = rt.controller.clock.now()
    closed = closed_places(recent_reclaims(rt.store, now), now)
    assert [(u.cloud, u.region, u.market) for u in closed] == [(here.cloud, here.region, "spot")]

    # The checkpoint was copied once, to the new place's store, and resumed from there.
    migration = rt.store.migration(second.id)
    assert migration["from"] == f"{here.cloud}/{here.region}"
    assert migration["to"] == f"{there.cloud}/{there.region}"
    interrupted = log_of(rt, first.id)
    saved_step = int(interrupted.split("interrupted by SIGTERM at step ")[1].split(":")[0])
    resumed = log_of(rt, second.id)
    assert f"resumed from step {saved_step} " in resumed
    target = Path(rt.provider.checkpoint_store(job_id, there.cloud, there.region))
    assert f"({target})" in resumed
    # Lost work: at most one checkpoint interval (here none: SIGTERM saved at once).
    last_logged = max(int(line.split()[1].split("/")[0]) for line in interrupted.splitlines()
                      if line.startswith("step "))  # fmt: skip
    assert 0 <= saved_step - last_logged <= EVERY
    # It saved on SIGTERM, after the notice (its marker says when): no work was lost.
    reason = rt.store.attempt(first.id).reason
    assert reason.endswith("; no work lost: it checkpointed when told to stop"), reason
    assert rt.store.lost_shares()[first.id] == 0
    noticed = [e for e in rt.store.events(job_id) if e.kind == "interruption_notice"]
    saved_at = rt.store.checkpoints()[first.id]
    assert first.started_at <= datetime.fromisoformat(noticed[0].data["noticed_at"]) <= saved_at

    # Same weights as a run that never stopped: nothing lost, nothing repeated.
    reference = tmp_path / "reference"
    subprocess.run(
        [sys.executable, str(TRAIN), "--steps", str(STEPS), "--checkpoint-every", str(EVERY),
         "--step-seconds", "0"],
        env={"BROKER_CHECKPOINT_DIR": str(reference), "PATH": os.defpath},
        check=True,
        capture_output=True,
    )  # fmt: skip
    final = json.loads((target / "checkpoint.json").read_text())
    assert final == json.loads((reference / "checkpoint.json").read_text())


class ControllerDied(BaseException):
    """Stands for SIGKILL in the middle of a copy: nothing catches it."""


def test_a_controller_killed_during_the_migration_copies_once_and_resumes_once(
    rt, tmp_path, monkeypatch
):
    from providers.storage import ObjectStore

    job_id = submit(rt)
    run_until_reclaimed(rt, job_id)
    real_copy = ObjectStore.copy_tree
    copies: list[str] = []

    def dies_after_copying(self, source, target, progress=None):
        copies.append(target)
        real_copy(self, source, target, progress)  # bytes are there, nothing recorded yet
        raise ControllerDied

    monkeypatch.setattr(ObjectStore, "copy_tree", dies_after_copying)
    with pytest.raises(ControllerDied):
        rt.controller.run_pass()  # re-queues, plans, starts attempt 2, dies mid-migration
    second = rt.store.attempts(job_id)[-1]
    assert second.state == AttemptState.LAUNCHING and rt.store.migration(second.id) is None
    assert rt.store.instances(attempt_id=second.id) == []  # nothing launched yet

    monkeypatch.setattr(ObjectStore, "copy_tree", real_copy)
    rt.close()
    restarted = open_runtime(
        rt.store.path, load_offers(), clock=SystemClock(), holder=rt.controller.holder
    )  # restarted under its own name: it resumes its claims at once
    try:
        finish(restarted, job_id)
        attempts = restarted.store.attempts(job_id)
        assert [a.state for a in attempts] == [AttemptState.INTERRUPTED, AttemptState.SUCCEEDED]
        events = [e for e in restarted.store.events(job_id) if e.kind == "checkpoint_migrated"]
        assert len(events) == 1 and len(copies) == 1
        assert log_of(restarted, second.id).count("resumed from step") == 1
        launches = [i for i in restarted.store.instances() if i.attempt_id == second.id]
        assert len(launches) == 1
    finally:
        for instance in restarted.provider.list_instances():
            restarted.provider.terminate(instance.id)
        restarted.close()


DEADLINE_JOB = """\
apiVersion: broker/v1
name: due-friday
team: nlp
resources:
  accelerators: T4:1
placement:
  clouds: [aws, gcp]
  spot: prefer
run:
  command: echo started && sleep 60
runtime:
  estimate_hours: 6
  deadline: 10h
checkpoint:
  uri: s3://acme-ckpt/due-friday/
  interval_minutes: 30
  size_gb: 1
"""


@dataclass(frozen=True)
class DeadlineJob:
    """DEADLINE_JOB submitted on a sandbox runtime whose clock stands still until moved."""

    rt: BrokerSession
    clock: FixedClock
    manifest: Manifest
    job_id: str


@contextmanager
def deadline_job(tmp_path: Path) -> Iterator[DeadlineJob]:
    """DEADLINE_JOB (6 h of work, 10 h deadline, 30-min checkpoints) submitted at
    2026-11-30 09:00 UTC; every instance it left is terminated afterwards."""
    from datetime import UTC

    clock = FixedClock(datetime(2026, 11, 30, 9, tzinfo=UTC))
    rt = open_runtime(tmp_path / "state.db", load_offers(), clock=clock, time_scale=1.0)
    try:
        path = tmp_path / "due.yaml"
        path.write_text(DEADLINE_JOB)
        (manifest,) = load_manifests([path]).manifests
        (result,) = submit_manifests(rt.store, [manifest])
        yield DeadlineJob(rt, clock, manifest, result.job_id)
    finally:
        for instance in rt.provider.list_instances():
            rt.provider.terminate(instance.id)
        rt.close()


def test_a_deadline_job_reclaimed_again_and_again_moves_to_on_demand_in_time(tmp_path):
    from datetime import timedelta

    from broker.controller.steering import steer
    from broker.dispatch.settings import DispatchSettings

    with deadline_job(tmp_path) as due:
        rt, clock, job_id = due.rt, due.clock, due.job_id
        markets = []
        for _ in range(12):  # the cloud takes every spot instance back after an hour
            rt.controller.run_pass()
            attempt = rt.store.attempts(job_id)[-1]
            if attempt.state is not AttemptState.RUNNING:
                # queued at home, closed after the reclaim: under the capped reserve the
                # spare still affords that wait (stay_home), one pass later it relaunches
                clock.advance(timedelta(hours=1))
                continue
            markets.append(attempt.market)
            if attempt.market == "on-demand":
                break
            clock.advance(timedelta(hours=1))
            (instance,) = rt.store.instances(attempt_id=attempt.id)
            # the command runs (sleep exec'd): the SIGTERM reaches it, none is lost
            assert wait_until(lambda a=attempt.id: running_program(a, "sleep"))
            rt.provider.interrupt(instance.provider_id)
            wait_ended(rt.provider, instance.provider_id, 30)
        assert markets[0] == "spot" and markets[-1] == "on-demand"
        assert set(markets[:-1]) == {"spot"}
        job = rt.store.job(job_id)
        # On demand with the work still to do (nothing was checkpointed) fits the deadline.
        submitted = rt.store.version(job_id).submitted_at
        elapsed = (clock.now() - submitted).total_seconds() / 3600
        assert elapsed + 6 <= 10
        # and it switched because the slack ran out, not before: one hour earlier it was spot
        spec = due.manifest.spec
        defaults = DispatchSettings()
        _, earlier = steer(spec, job, rt.store, clock.now() - timedelta(hours=3), defaults)
        assert earlier == "spot"
        _, now = steer(spec, job, rt.store, clock.now(), defaults)
        assert now == "on-demand"


def test_a_job_the_policy_sent_to_on_demand_goes_back_to_spot_when_it_allows(tmp_path):
    from datetime import timedelta

    from broker.dispatch.settings import DispatchSettings
    from broker.spotpolicy import make_policy

    with deadline_job(tmp_path) as due:
        rt, job_id = due.rt, due.job_id
        rt.controller.settings = DispatchSettings(make_policy("on-demand"))  # slack gone
        rt.controller.run_pass()
        (first,) = rt.store.attempts(job_id)
        assert first.market == "on-demand" and first.placed_on.steered
        due.clock.advance(timedelta(hours=1))
        rt.controller.run_pass()  # the same policy: stays on demand
        assert len(rt.store.attempts(job_id)) == 1
        # ours, with 4 h of slack left (10 h deadline, 1 h done of 6): spot is safe again
        rt.controller.settings = DispatchSettings(make_policy("deadline-aware", pace=0.0))
        report = rt.controller.run_pass()
        assert ("due-friday", "back to spot") in report.finished
        first, second = rt.store.attempts(job_id)
        assert first.state == AttemptState.INTERRUPTED and "back to spot" in first.reason
        assert second.market == "spot" and not second.placed_on.steered


def test_a_checkpoint_copy_that_fails_for_now_is_retried_on_the_next_pass(rt, monkeypatch):
    from providers.errors import RateLimited
    from providers.storage import ObjectStore

    job_id = submit(rt)
    run_until_reclaimed(rt, job_id)
    real_copy = ObjectStore.copy_tree

    def throttled(self, source, target, progress=None):
        raise RateLimited("storage", "slow down")

    monkeypatch.setattr(ObjectStore, "copy_tree", throttled)
    report = rt.controller.run_pass()
    second = rt.store.attempts(job_id)[-1]
    assert second.number == 2 and rt.store.instances(attempt_id=second.id) == []
    assert any("checkpoint copy" in line for line in report.unreachable)
    monkeypatch.setattr(ObjectStore, "copy_tree", real_copy)
    rt.controller.run_pass()
    assert rt.store.migration(second.id) is not None
    assert len(rt.store.instances(attempt_id=second.id)) == 1


@pytest.mark.parametrize(
    "hooks, choice",
    [
        ({}, "spot"),  # the planner's 0.1 h restart: 4 h of spare is plenty
        ({"restart_hours": 1.5}, "on-demand"),  # 3 restarts + 0.5 h loss > 4 h spare
        ({"pass_hours": 3.5}, "on-demand"),  # judged in whole 3.5 h steps: 2 left, 2 needed
    ],
)
def test_the_spot_policy_judges_with_the_restart_and_pass_interval_it_is_told(
    tmp_path, hooks, choice
):
    from broker.controller.steering import steer
    from broker.dispatch.settings import DispatchSettings

    with deadline_job(tmp_path) as due:  # 6 h of work, 10 h deadline, 30-min checkpoints
        job = due.rt.store.job(due.job_id)
        settings = DispatchSettings(**hooks)
        _, said = steer(due.manifest.spec, job, due.rt.store, due.clock.now(), settings)
        assert said == choice
