"""Instance rows follow their attempts: closed in the transaction that ends the attempt,
swept on a controller's start-up when an older broker left them live, and the sandbox's
`interrupt` picks the instance that runs now, not one of an attempt that ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import OPEN_ATTEMPT, JobState
from broker.state.location import parse_location
from broker.submit import submit_manifests
from tests.broker.sandbox import sandbox
from tests.cli.runner import run_cli
from tests.waiting import running_program, wait_ended, wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"
LONG_SPOT = """\
apiVersion: broker/v1
name: long-spot
team: nlp
resources:
  accelerators: H100:8
placement:
  spot: only
run:
  command: python3 ../train.py --steps 6000 --checkpoint-every 20 --step-seconds 0.005
runtime:
  estimate_hours: 6
checkpoint:
  uri: s3://acme-ckpt/long-spot/
  interval_minutes: 30
  size_gb: 1
"""


@pytest.fixture
def rt(tmp_path, state_location, monkeypatch):
    """A sandbox runtime on a state file, then on a PostgreSQL database."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a database's sandbox
    with sandbox(tmp_path, pools=True, state=state_location) as runtime:
        yield runtime


def drain(rt, passes: int = 80) -> None:
    for _ in range(passes):
        rt.controller.run_pass()
        if not rt.store.queued() and not rt.controller.active():
            return
        for known in rt.store.instances(state="running"):
            wait_ended(rt.provider, known.provider_id, 10)
    raise AssertionError("the queue did not drain")


def test_every_instance_row_ends_with_its_attempt(rt):
    paths = [DEMO / "eval-eu.yaml", DEMO / "second-team.yaml", DEMO / "onprem.yaml"]
    results = submit_manifests(rt.store, load_manifests(paths).manifests)
    drain(rt)
    assert {rt.store.job(r.job_id).state for r in results} == {JobState.SUCCEEDED}
    rows = rt.store.instances()
    assert len(rows) == len(rt.store.attempts()) >= 3
    assert rt.store.instances(state="running") == []
    for row in rows:
        reported = rt.provider.describe(row.provider_id)
        assert row.state == reported.state == "succeeded"
        assert row.terminated_at is not None
        attempt = rt.store.attempt(row.attempt_id)
        assert attempt.ended_at is not None and row.terminated_at == attempt.ended_at


def test_interrupt_after_a_reclaim_picks_the_live_instance(rt, tmp_path, capsys, state_location):
    (tmp_path / "long.yaml").write_text(LONG_SPOT)
    (result,) = submit_manifests(rt.store, load_manifests([tmp_path / "long.yaml"]).manifests)
    job_id = result.job_id
    state = str(state_location)

    def running() -> bool:
        rt.controller.run_pass()
        return rt.store.job(job_id).state is JobState.RUNNING

    for round_ in (1, 2):
        assert wait_until(running, timeout=30)
        (attempt,) = rt.store.attempts(job_id, states=OPEN_ATTEMPT)
        place = attempt.placed_on
        store = Path(rt.provider.checkpoint_store(job_id, place.cloud, place.region))
        saved = store / "checkpoint.json"  # (copied there before a resumed attempt starts)
        assert wait_until(saved.exists, timeout=30)
        # the command runs (python exec'd): the SIGTERM reaches it, none is lost
        assert wait_until(lambda a=attempt.id: running_program(a, "python3"), timeout=30)
        interrupt = run_cli(capsys, "sandbox", "interrupt", "long-spot", "--state", state)
        assert interrupt.code == 0, interrupt.stderr
        (live,) = rt.store.instances(attempt_id=attempt.id)
        assert live.provider_id in interrupt.stdout, (round_, interrupt.stdout)

        def ended(attempt_id: str = attempt.id) -> bool:
            rt.controller.run_pass()
            return rt.store.attempt(attempt_id).ended_at is not None

        assert wait_until(ended, timeout=30)
        (closed,) = rt.store.instances(attempt_id=attempt.id)
        assert closed.state == "interrupted" and closed.terminated_at is not None
    assert len(rt.store.attempts(job_id)) >= 2
    rt.provider.terminate_grace = 1.0  # a relaunch may not have exec'd its command yet
    rt.controller.cancel(job_id)
    assert rt.store.instances(state="running") == []


def test_a_controller_sweeps_rows_an_older_broker_left_live_on_start_up(rt, state_location):
    (result,) = submit_manifests(rt.store, load_manifests([DEMO / "eval-eu.yaml"]).manifests)
    drain(rt)
    (attempt,) = rt.store.attempts(result.job_id)
    # what a broker from before left behind: the attempt ended, its row still "running"
    rt.store.record_instance("gcp", "zone-a/left-live", "running", attempt_id=attempt.id)
    assert [row.provider_id for row in rt.store.instances(state="running")] == ["zone-a/left-live"]
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    restarted = open_runtime(parse_location(state_location), view, clock=SystemClock())
    try:
        restarted.controller.run_pass()
        assert restarted.store.instances(state="running") == []
        (swept,) = restarted.store.instances(provider_id="zone-a/left-live")
        assert swept.state == "terminated" and swept.terminated_at is not None
    finally:
        restarted.close()
