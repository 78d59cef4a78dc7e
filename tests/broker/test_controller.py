"""The controller's crash safety and bookkeeping, on the sandbox provider."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import AttemptState, JobState
from broker.state.placed import PlacedOn
from broker.submit import submit_manifests
from tests.waiting import wait_ended

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"


@pytest.fixture
def rt(tmp_path):
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    runtime = open_runtime(tmp_path / "state.db", view, clock=SystemClock())
    (runtime.workdir / "train.py").write_text((REPO / "examples" / "train.py").read_text())
    yield runtime
    for instance in runtime.provider.list_instances():
        runtime.provider.terminate(instance.id)
    runtime.close()


def submit(rt, name: str) -> str:
    (manifest,) = load_manifests([DEMO / name]).manifests
    (result,) = submit_manifests(rt.store, [manifest])
    return result.job_id


def finish(rt, job_id: str) -> None:
    """Drive passes until the job ends, waiting on its process between them."""
    for _ in range(50):
        rt.controller.run_pass()
        job = rt.store.job(job_id)
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            return
        for known in rt.store.instances(state="running"):
            wait_ended(rt.provider, known.provider_id, timeout=10)
    raise AssertionError(f"job {job_id} did not finish: {rt.store.job(job_id).state}")


def test_a_job_runs_once_and_is_billed_once(rt):
    job_id = submit(rt, "eval-eu.yaml")
    finish(rt, job_id)
    (attempt,) = rt.store.attempts(job_id)
    assert attempt.state == AttemptState.SUCCEEDED
    (charge,) = rt.store.ledger(job_id=job_id)
    assert charge.kind == "compute" and charge.amount_usd > 0
    exact = attempt.price_per_hour * attempt.billed_hours  # rounded once, to 1e-6 USD
    assert charge.amount_usd == exact.quantize(Decimal("1e-6"), ROUND_HALF_EVEN)
    rt.controller.run_pass()  # another pass changes nothing
    assert len(rt.store.ledger(job_id=job_id)) == 1


def test_crash_between_attempt_and_launch_relaunches_the_same_attempt(rt):
    job_id = submit(rt, "eval-eu.yaml")
    # What a controller killed right after start_attempt leaves behind:
    from broker.planner.plan import plan

    decision = plan(
        rt.controller._spec(rt.store.job(job_id)),
        rt.controller.index_of(rt.provider),
        SystemClock().now(),
    )
    placement = decision.placements[0]
    rt.store.transition(job_id, JobState.PLANNED, expect=JobState.QUEUED)
    attempt_id = rt.store.start_attempt(job_id, PlacedOn.of(placement))
    assert rt.provider.list_instances() == []
    finish(rt, job_id)  # a fresh pass finds the open attempt and launches it, once
    assert [a.id for a in rt.store.attempts(job_id)] == [attempt_id]
    assert len(rt.provider.list_instances()) == 1


def test_instances_nobody_owns_are_terminated(rt):
    from providers.base import LaunchRequest

    orphan = rt.provider.launch(
        LaunchRequest(
            attempt_id="a-000000000000",
            job_id="j-000000000000",
            cloud="gcp",
            region="europe-west4",
            instance_type="g2-standard-4",
            command="sleep 30",
        )
    )
    report = rt.controller.run_pass()
    assert orphan.id in report.terminated
    assert rt.provider.describe(orphan.id).ended_at is not None


def test_cancel_terminates_and_bills_up_to_now(rt):
    job_id = submit(rt, "finetune-spot.yaml")
    rt.controller.run_pass()
    assert rt.store.job(job_id).state is JobState.RUNNING
    assert rt.controller.cancel(job_id)
    assert rt.store.job(job_id).state is JobState.CANCELLED
    (attempt,) = rt.store.attempts(job_id)
    assert attempt.state == AttemptState.CANCELLED
    assert all(i.ended_at is not None for i in rt.provider.list_instances())
    assert not rt.controller.cancel(job_id)  # already finished: nothing to do


def test_two_controllers_on_one_state_file_launch_each_attempt_once(rt, tmp_path):
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    other = open_runtime(tmp_path / "state.db", view, clock=SystemClock())
    try:
        job_id = submit(rt, "eval-eu.yaml")
        rt.controller.run_pass()
        other.controller.run_pass()
        assert len(rt.store.attempts(job_id)) == 1
        assert len(rt.provider.list_instances()) == 1
    finally:
        other.close()


def test_policy_budget_and_quota_hold_jobs_back(tmp_path):
    from broker.queue import Policy, TeamPolicy

    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    policy = Policy(teams={"nlp": TeamPolicy(monthly_budget=1.0), "vision": TeamPolicy(max_gpus=4)})
    rt = open_runtime(tmp_path / "state.db", view, clock=SystemClock(), policy=policy)
    try:
        ft = submit(rt, "finetune-spot.yaml")  # team nlp, expected cost far above 1 USD
        lab = submit(rt, "onprem.yaml")  # team vision, 8 GPUs: over its quota of 4
        small = submit(rt, "second-team.yaml")  # team vision, 1 GPU: fits
        why = {line.job.name: line.why for line in rt.controller.queue_lines()}
        assert why["llama-ft"].startswith("budget: team nlp")
        assert why["embed-lab"].startswith("quota: team vision")
        report = rt.controller.run_pass()
        assert [name for name, _ in report.launched] == ["detector"]
        assert report.waiting["llama-ft"].startswith("budget:")
        assert rt.store.job(ft).state is JobState.QUEUED
        assert rt.store.job(lab).state is JobState.QUEUED
        assert rt.store.job(small).state in (JobState.RUNNING, JobState.SUCCEEDED)
    finally:
        for instance in rt.provider.list_instances():
            rt.provider.terminate(instance.id)
        rt.close()


PREEMPT_JOB = """\
apiVersion: broker/v1
name: {name}
team: {team}
priority: {priority}
resources:
  accelerators: A100-80GB:8
placement:
  clouds: [onprem]
run:
  command: python3 {train} --steps 100000 --step-seconds 0.01
runtime:
  estimate_hours: 4
checkpoint:
  uri: file:///tmp/ckpt/{name}/
  interval_minutes: 10
"""


def test_a_higher_priority_job_preempts_checkpointed_work_on_a_full_pool(tmp_path):
    from broker.queue import Policy

    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    rt = open_runtime(
        tmp_path / "state.db",
        view,
        clock=SystemClock(),
        policy=Policy(preemption_protect_minutes=0),
        time_scale=3600,  # billed in whole seconds: the victim's short run bills minutes
    )
    train = REPO / "examples" / "train.py"  # an on-prem attempt runs in its pool's folder
    jobs = tmp_path / "jobs"
    jobs.mkdir()

    def submit_text(name: str, team: str, priority: int) -> str:
        path = jobs / f"{name}.yaml"
        path.write_text(PREEMPT_JOB.format(name=name, team=team, priority=priority, train=train))
        (manifest,) = load_manifests([path]).manifests
        return submit_manifests(rt.store, [manifest])[0].job_id

    try:
        low = [submit_text("low-a", "vision", 1), submit_text("low-b", "vision", 1)]
        rt.controller.run_pass()
        assert {rt.store.job(j).state for j in low} == {JobState.RUNNING}  # the pool is full
        high = submit_text("urgent", "nlp", 100)
        report = rt.controller.run_pass()
        assert ("urgent", "onprem/onprem-us-east/lab-a100-node on-demand") in report.launched
        states = sorted(rt.store.job(j).state for j in low)
        assert states == [JobState.QUEUED, JobState.RUNNING]  # exactly one victim
        victim = next(j for j in low if rt.store.job(j).state is JobState.QUEUED)
        (attempt,) = rt.store.attempts(victim)
        assert attempt.state == AttemptState.INTERRUPTED  # billed, and back in the queue
        assert rt.store.ledger(job_id=victim)
        assert rt.store.job(high).state is JobState.RUNNING
        why = {line.job.name: line.why for line in rt.controller.queue_lines()}
        assert why[rt.store.job(victim).name].startswith(("capacity", "lower priority"))
    finally:
        for instance in rt.provider.list_instances():
            rt.provider.terminate(instance.id)
        rt.close()


def test_a_job_left_planned_or_interrupted_by_a_dead_controller_is_requeued(rt):
    planned = submit(rt, "eval-eu.yaml")
    rt.store.transition(planned, JobState.PLANNED, expect=JobState.QUEUED)  # then: killed
    interrupted = submit(rt, "second-team.yaml")
    rt.controller.run_pass()  # launches it...
    (attempt,) = rt.store.attempts(interrupted)
    rt.provider.terminate(rt.store.instances(attempt_id=attempt.id)[0].provider_id)
    rt.store.finish_attempt(attempt.id, "interrupted")  # ...interrupted, then: killed
    assert rt.store.job(interrupted).state is JobState.INTERRUPTED
    finish(rt, planned)
    finish(rt, interrupted)
    assert rt.store.job(planned).state is JobState.SUCCEEDED
    assert rt.store.job(interrupted).state is JobState.SUCCEEDED
    assert len(rt.store.attempts(interrupted)) == 2  # resumed on a second attempt


def test_an_attempt_that_ends_without_an_exit_code_is_retried(rt, tmp_path):
    import json
    import os
    import signal

    job_id = submit(rt, "eval-eu.yaml")
    rt.controller.run_pass()
    (attempt,) = rt.store.attempts(job_id)
    record = json.loads((rt.workdir / attempt.id / "instance.json").read_text())
    os.killpg(record["pid"], signal.SIGKILL)  # killed from outside: no exit code written
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    restarted = open_runtime(tmp_path / "state.db", view, clock=SystemClock())
    try:
        (known,) = rt.store.instances(attempt_id=attempt.id)
        wait_ended(restarted.provider, known.provider_id, 10)
        finish(restarted, job_id)
    finally:
        restarted.close()
    first, second = rt.store.attempts(job_id)
    assert first.state == AttemptState.FAILED and first.exit_code is None
    assert second.state == AttemptState.SUCCEEDED
    assert rt.store.job(job_id).state is JobState.SUCCEEDED


ONE_GPU_JOB = """\
apiVersion: broker/v1
name: {name}
team: lab
resources:
  accelerators: A100-80GB:1
placement:
  clouds: [onprem]
run:
  command: sleep 60
runtime:
  estimate_hours: 1
"""


def test_a_pool_takes_as_many_one_gpu_jobs_as_it_has_gpus_in_one_pass(tmp_path):
    """A pool's room is its free GPUs (PoolShares), not its free whole nodes: sixteen
    1-GPU jobs start at once on two 8-GPU nodes, and the seventeenth waits for room."""
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    rt = open_runtime(tmp_path / "state.db", view, clock=SystemClock())
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(17):
        (jobs / f"one-{i:02d}.yaml").write_text(ONE_GPU_JOB.format(name=f"one-{i:02d}"))
    try:
        submit_manifests(rt.store, load_manifests([jobs]).manifests)
        report = rt.controller.run_pass()
        assert len(report.launched) == 16
        places = {where.split()[0] for _, where in report.launched}
        assert places == {"onprem/onprem-us-east/lab-a100-node"}
        (waiting,) = rt.store.queued()
        assert "capacity" in report.waiting[waiting.name]
    finally:
        for job in rt.store.jobs():
            rt.controller.cancel(job.id)
        rt.close()


def test_an_instance_the_broker_stopped_without_closing_its_attempt_is_recovered(rt):
    """What a controller killed inside a stop leaves (a budget stop, a preemption, a
    move: the instance terminated, its attempt still open): the next pass closes the
    attempt as interrupted and the job runs again. Only a user's cancel cancels a job."""
    job_id = submit(rt, "eval-eu.yaml")
    rt.controller.run_pass()
    (first,) = rt.store.attempts(job_id)
    (known,) = rt.store.instances(attempt_id=first.id)
    assert rt.provider.terminate(known.provider_id)
    finish(rt, job_id)
    attempts = rt.store.attempts(job_id)
    assert [a.state for a in attempts] == [AttemptState.INTERRUPTED, AttemptState.SUCCEEDED]
    assert rt.store.job(job_id).state == JobState.SUCCEEDED
