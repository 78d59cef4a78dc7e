"""Budgets are hard caps: the controller projects each team's spend (the ledger, what its
running attempts accrued, their burn until the next pass) and stops what would take it
over, gracefully, holding it in the queue with reason `budget`; with runtime estimates
half the real runtime, a team's spend never crosses its cap by more than one pass's
burn (before, only launches were checked, against estimates)."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock, SystemClock
from broker.controller import Controller
from broker.manifest.load import parse_manifest_text
from broker.queue import Policy, TeamPolicy
from broker.sim.model import Availability, SpotTrace, TracePlace
from broker.sim.provider import SimulatedProvider, Work
from broker.sim.synthetic import ZONES, synthetic_offers
from broker.state import AttemptState, JobState, StateStore
from tests.cli.runner import run_cli

REPO = Path(__file__).resolve().parents[2]
ORIGIN = datetime(2026, 3, 2, tzinfo=UTC)
PRICE = 3.06  # the synthetic V100's on-demand USD/h
SIM_JOB = """\
apiVersion: broker/v1
name: job-{n}
team: ml
priority: {priority}
resources:
  accelerators: V100:1
placement:
  spot: never
run:
  command: simulated
runtime:
  estimate_hours: {estimate!r}
checkpoint:
  uri: s3://ckpt/job-{n}/
  interval_minutes: 30
  size_gb: 0
"""


def run_budgeted(
    tmp: Path, cap: float, real_hours: list[float], step: float, estimate_share: float = 0.5
):
    """Jobs of team ml whose estimates are `estimate_share` of their real runtime, run by
    the real controller on the simulator (one pass every `step` hours) until nothing
    runs; (the store, the largest burn of one pass: the price of what ran x step)."""
    clock = FixedClock(ORIGIN)
    trace = SpotTrace({TracePlace("aws", "us-east-1a", "V100"): Availability(1.0, (0,))})
    sim = SimulatedProvider(synthetic_offers(ZONES[:1]), trace, clock, ORIGIN, tmp)
    store = StateStore.open(tmp / "state.db", clock)
    policy = Policy(teams={"ml": TeamPolicy(monthly_budget=cap)})
    from pricing.query import OfferIndex

    controller = Controller(store, sim, clock, lambda p: OfferIndex(p.offers()), policy)
    for n, hours in enumerate(real_hours):
        text = SIM_JOB.format(n=n, priority=n % 2, estimate=hours * estimate_share)
        (manifest,) = parse_manifest_text(text)
        job_id = store.submit(manifest.spec, text, manifest.digest).job_id
        sim.work[job_id] = Work(hours, "V100", checkpoint_hours=0.5)
    worst = 0.0
    for tick in range(1, 2000):
        running = len(controller.active())
        worst = max(worst, running * PRICE * step)
        clock.current = ORIGIN + timedelta(hours=tick * step)
        sim.sync()
        controller.run_pass()
        if not controller.active() and tick > 1:
            break
    return store, controller, worst


def spent(store: StateStore) -> float:
    return sum(float(e.amount_usd) for e in store.ledger())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap=st.floats(2.0, 40.0),
    real=st.lists(st.floats(0.5, 8.0), min_size=1, max_size=4),
    step=st.sampled_from([0.1, 0.25, 0.5, 1.0]),
)
def test_estimates_half_the_real_runtime_never_cross_the_cap_by_more_than_one_pass(cap, real, step):
    with tempfile.TemporaryDirectory() as tmp:
        store, controller, worst = run_budgeted(Path(tmp), cap, real, step)
        try:
            total = spent(store)
            assert total <= cap + worst + 1e-6, (total, cap, worst)
            for job in store.jobs():
                if job.state is not JobState.SUCCEEDED:  # held: the rest would not fit
                    assert job.state is JobState.QUEUED
                    (line,) = [x for x in controller.queue_lines() if x.job.id == job.id]
                    assert line.why.startswith("budget: team ml at $"), line.why
        finally:
            store.close()


def test_a_running_job_is_stopped_gracefully_and_held_for_its_budget(tmp_path):
    # 3.06 USD/h, estimated 2 h (6.12 USD: it fits a 10 USD cap), really 6 h (18.36 USD)
    store, controller, worst = run_budgeted(tmp_path, 10.0, [6.0], 0.25)
    try:
        (job,) = store.jobs()
        assert job.state is JobState.QUEUED
        (stopped,) = store.attempts(job.id)
        assert stopped.state == AttemptState.INTERRUPTED  # resumable, not failed
        assert stopped.reason.startswith("budget: team ml would reach $")
        assert "no work lost" in stopped.reason  # the simulator saves on SIGTERM
        assert 10.0 - 2 * worst < spent(store) <= 10.0 + worst  # stopped near the cap
        moves = [e.data for e in store.events(job.id) if e.kind == "transition"]
        assert moves[-1]["to"] == "queued" and moves[-1]["reason"].startswith("budget:")
        (line,) = controller.queue_lines()
        assert line.why.startswith("budget: team ml at $")  # held: it does not fit
        assert controller.run_pass().launched == []  # and stays held
    finally:
        store.close()


def test_without_budgets_the_same_jobs_run_to_the_end(tmp_path):
    from broker.queue.budget import over_budget

    assert over_budget(Policy(), {"ml": 1e9}, []) == []
    store, _, _ = run_budgeted(tmp_path, 1e6, [6.0, 3.0], 0.25)
    try:
        assert {job.state for job in store.jobs()} == {JobState.SUCCEEDED}
        assert spent(store) == pytest.approx(PRICE * (6.0 + 3.0 + 2 * 0.1), abs=0.01)
    finally:
        store.close()


def test_the_stop_order_is_lowest_priority_then_newest():
    from broker.queue.budget import Burning, over_budget

    t = ORIGIN
    burning = [
        Burning("j-old-low", "ml", 0, t, accrued=3.0, burn=1.0),
        Burning("j-new-low", "ml", 0, t + timedelta(hours=1), accrued=1.0, burn=1.0),
        Burning("j-high", "ml", 5, t + timedelta(hours=2), accrued=1.0, burn=1.0),
        Burning("j-other", "vision", 0, t, accrued=50.0, burn=50.0),  # no budget
    ]
    policy = Policy(teams={"ml": TeamPolicy(monthly_budget=8.0)})
    # billed 2 + accrued 5 + burn 3 = 10 > 8: stopping one burn of 1 leaves 9, two leave 8
    stops = over_budget(policy, {"ml": 2.0}, burning)
    assert [job for job, _ in stops] == ["j-new-low", "j-old-low"]
    assert stops[0][1].text.startswith("budget: team ml would reach $10.00 of $8.00")
    assert over_budget(policy, {"ml": 2.0}, list(reversed(burning))) == stops
    assert over_budget(policy, {"ml": 0.0}, burning) == []  # 0 + 5 + 3 = 8: at the cap


BUDGETED = """\
apiVersion: broker/v1
name: over-budget
team: tight
resources:
  accelerators: T4:1
placement:
  clouds: [gcp]
run:
  command: python3 ../train.py --steps 4000 --checkpoint-every 20 --step-seconds 0.005
runtime:
  estimate_hours: 10
checkpoint:
  uri: s3://ckpt/over-budget/
  interval_minutes: 30
  size_gb: 0
"""


def test_broker_run_stops_a_sandbox_job_at_its_cap_and_says_why(tmp_path, capsys, monkeypatch):
    from broker.manifest.load import load_manifests
    from broker.offers import load_offers
    from broker.runtime import open_runtime
    from broker.submit import submit_manifests

    # the job expects its 10 h estimate at the price of its plan, and really runs 20 h
    (tmp_path / "job.yaml").write_text(BUDGETED)
    rt = open_runtime(tmp_path / "state.db", load_offers(), clock=SystemClock())
    (rt.workdir / "train.py").write_text((REPO / "examples" / "train.py").read_text())
    try:
        submit_manifests(rt.store, load_manifests([tmp_path / "job.yaml"]).manifests)
        (line,) = rt.controller.queue_lines()
        price = float(line.placed.price_per_hour)
    finally:
        rt.close()
    cap = round(price * 12, 2)
    (tmp_path / "policy.yaml").write_text(f"teams:\n  tight: {{monthly_budget: {cap}}}\n")
    passes: list[datetime] = []
    real = Controller.run_pass

    def timed(self):
        passes.append(self.clock.now())
        return real(self)

    monkeypatch.setattr(Controller, "run_pass", timed)
    state = str(tmp_path / "state.db")
    run = run_cli(capsys, "run", "--state", state, "--policy", str(tmp_path / "policy.yaml"),
                  "--poll", "0.2", "--sandbox-time-scale", "3600")  # fmt: skip
    assert run.code == 4, run.stderr  # over budget: it waits for next month
    assert "over-budget: budget: team tight at $" in run.stderr
    gaps = [(b - a).total_seconds() for a, b in zip(passes, passes[1:], strict=False)]
    one_pass = price * max(gaps)  # a wall second is billed as an hour
    with StateStore.open(tmp_path / "state.db", SystemClock()) as store:
        job = store.job("over-budget")
        total = sum(float(e.amount_usd) for e in store.ledger(job_id=job.id))
        (stopped,) = store.attempts(job.id)
        assert job.state is JobState.QUEUED
        assert stopped.state == AttemptState.INTERRUPTED and stopped.exit_code == 143
        assert "no work lost: it checkpointed when told to stop" in stopped.reason
    assert total <= cap + one_pass, (total, cap, one_pass)
    shown = run_cli(capsys, "queue", "--state", state, "--policy", str(tmp_path / "policy.yaml"),
                    "-o", "json")  # fmt: skip
    (row,) = json.loads(shown.stdout)["queue"]
    assert row["why"].startswith("budget: team tight at $")
