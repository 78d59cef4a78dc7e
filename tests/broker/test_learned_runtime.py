"""Runtimes learned from history (broker.learned_runtime): the mean of the last runs of
the same job, else of similar jobs (same GPU model and count), else the 1 h default, each
with its source; raised when a running job reaches it; read from the real state store
and used by the real controller's plans and budget projection."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.controller import Controller
from broker.learned_runtime import (
    History,
    K,
    PastRun,
    grown_cost,
    history_estimate,
    learn,
    raised,
    runtime_of,
)
from broker.manifest.load import parse_manifest_text
from broker.sim.model import Availability, SpotTrace, TracePlace
from broker.sim.provider import SimulatedProvider, Work
from broker.sim.synthetic import ZONES, synthetic_offers
from broker.spec import (
    DEFAULT_HOURS,
    MANIFEST,
    NO_HISTORY,
    GpuAsk,
    JobSpec,
    Requirements,
    RuntimeEstimate,
)
from broker.state import JobState, StateStore
from tests.fakes.specs import placed

T0 = datetime(2026, 3, 2, tzinfo=UTC)
HOURS = st.floats(0.01, 1000, allow_nan=False)


def auto_spec(name: str = "train", gpu: str = "V100", count: float = 1, nodes: int = 1) -> JobSpec:
    """The spec of a manifest without an estimate (as `RuntimeSection.to_spec` makes it)."""
    return JobSpec(
        name=name,
        team="ml",
        requirements=Requirements(accelerators=(GpuAsk(gpu, count),), nodes=nodes),
        runtime=RuntimeEstimate(auto=True, source=NO_HISTORY),
    )


def runs(hours: list[float], label: str = "ml/train", gpu: str = "V100") -> list[PastRun]:
    return [PastRun(label, h, gpu, 1.0) for h in hours]


# --- the estimator, on values ---------------------------------------------------------


@given(st.lists(HOURS, min_size=1, max_size=8), st.booleans())
def test_the_estimate_lies_between_the_least_and_most_of_the_runs_used(hours, same_name):
    history = runs(hours, "ml/train" if same_name else "ml/other")
    same, like = (history, []) if same_name else ([], history)
    estimate = learn(auto_spec(), same, like)
    used = hours[:K]  # newest first: the last K runs
    assert min(used) - 1e-9 <= estimate.estimate_hours <= max(used) + 1e-9
    assert estimate.auto and estimate.source.startswith("history: ")
    assert all(f"{h:.2f} h" in estimate.source for h in used)
    what = "of ml/train" if same_name else "on V100:1"
    assert what in estimate.source


def test_the_estimate_is_the_mean_of_the_last_two_runs_and_says_so():
    estimate = learn(auto_spec(), runs([2.1, 1.8, 40.0]), [])
    assert estimate.estimate_hours == pytest.approx(1.95)
    assert estimate.source == "history: mean of the last 2 runs of ml/train (2.10 h, 1.80 h)"


def test_the_jobs_own_runs_come_before_similar_ones():
    estimate = learn(auto_spec(), runs([3.0]), runs([10.0, 12.0], "ml/other"))
    assert estimate.estimate_hours == 3.0
    assert estimate.source == "history: the last run of ml/train (3.00 h)"


def test_similar_means_the_same_gpu_model_and_count_over_all_nodes():
    like = [
        PastRun("ml/a", 9.0, "A100", 1.0),  # another model
        PastRun("ml/b", 8.0, "V100", 2.0),  # another count
        PastRun("ml/c", 4.0, "V100", 2.0),
        PastRun("ml/d", 2.0, "V100", 2.0),
    ]
    one = learn(auto_spec(count=1), [], like)
    assert (one.estimate_hours, one.source) == (DEFAULT_HOURS, NO_HISTORY)
    two = learn(auto_spec(count=1, nodes=2), [], like)  # V100:1 on 2 nodes: 2 GPUs
    assert two.estimate_hours == pytest.approx(6.0)
    assert two.source == "history: mean of the last 2 runs on V100:2 (ml/b 8.00 h, ml/c 4.00 h)"


def test_without_any_history_the_estimate_is_the_old_default_and_says_so():
    estimate = learn(auto_spec(), [], [])
    assert estimate.estimate_hours == DEFAULT_HOURS == 1.0
    assert estimate.source == NO_HISTORY and "no finished run" in NO_HISTORY


def test_a_run_on_another_gpu_counts_in_first_choice_hours():
    from pricing.gpus import find_gpu

    spec = replace(
        auto_spec(),
        requirements=Requirements(accelerators=(GpuAsk("V100", 1), GpuAsk("H100", 1))),
    )
    estimate = learn(spec, [PastRun("ml/train", 1.0, "H100", 1.0)], [])
    ratio = find_gpu("H100").relative_throughput / find_gpu("V100").relative_throughput
    assert ratio > 1 and estimate.estimate_hours == pytest.approx(ratio)


@given(HOURS, HOURS)
def test_a_manifest_estimate_is_kept_whatever_the_history(given_hours, past):
    spec = replace(auto_spec(), runtime=RuntimeEstimate(given_hours))
    assert learn(spec, runs([past]), runs([past])) == RuntimeEstimate(given_hours)
    assert raised(spec.runtime, given_hours * 10) == spec.runtime
    assert spec.runtime.source == MANIFEST


@given(HOURS, st.floats(0, 5000, allow_nan=False))
def test_an_overrun_raises_the_estimate_beyond_what_the_job_has_run(estimate, ran):
    runtime = RuntimeEstimate(estimate, auto=True, source="history: x")
    after = raised(runtime, ran)
    if ran < estimate:
        assert after == runtime
    else:
        assert after.estimate_hours > ran and after.estimate_hours > estimate
        assert after.source.startswith("history: x; raised to ")
        assert f"it has run {ran:.2f} h" in after.source


def test_the_raise_follows_the_ladder():
    runtime = RuntimeEstimate(1.0, auto=True, source="s")
    assert raised(runtime, 1.0).estimate_hours == 1.25  # reached: + 15 min
    assert raised(runtime, 1.6).estimate_hours == 1.75  # + 15 min + 30 min
    assert raised(runtime, 2.0).estimate_hours == 2.75  # ... + 1 h


# --- history from the state store -----------------------------------------------------


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FixedClock):
    with StateStore.open(tmp_path / "state.db", clock) as opened:
        yield opened


V100 = {"cloud": "aws", "region": "us-east-1", "instance_type": "p3.2xlarge"}


def finished_run(
    store: StateStore,
    clock: FixedClock,
    spec: JobSpec,
    hours: list[tuple[str, float]],
    digest: str = "d1",
    gpu: tuple[str, float] = ("V100", 1),
) -> str:
    """A run of `spec` an hour after the last (a new run once the last one finished)
    with one attempt per (outcome, billed hours); its job id."""
    clock.current += timedelta(hours=1)
    result = store.submit(spec, "x", digest)
    job = result.job_id
    if store.job(job).state in (JobState.SUCCEEDED, JobState.FAILED):
        job = store.rerun(job).job_id
    for outcome, billed in hours:
        store.transition(job, JobState.PLANNED)
        where = placed(V100 | {"accelerator": gpu[0], "accelerator_count": gpu[1]}, 3, "spot")
        attempt = store.start_attempt(job, where)
        store.attempt_running(attempt, {"provider_id": f"i-{attempt}"})
        lost = Decimal("0.25") if outcome == "interrupted" else None
        to = JobState.QUEUED if outcome == "interrupted" else None
        store.finish_attempt(attempt, outcome, billed_hours=billed, job_to=to, lost_share=lost)
    return job


def test_the_store_history_is_the_last_two_succeeded_runs_of_the_job(store, clock):
    spec = auto_spec()
    finished_run(store, clock, spec, [("succeeded", 40.0)])
    finished_run(store, clock, spec, [("succeeded", 1.8)])
    last = finished_run(store, clock, spec, [("interrupted", 1.0), ("succeeded", 1.35)])
    estimate = history_estimate(History(store), spec, None)
    # the interrupted attempt kept 75% of its hour: 0.75 + 1.35 = 2.10 h
    assert estimate.estimate_hours == pytest.approx(1.95)
    assert estimate.source == "history: mean of the last 2 runs of ml/train (2.10 h, 1.80 h)"
    # a finished run is shown with the estimate it had: the history before it
    before = runtime_of(History(store), spec, store.job(last), T0)
    assert before.estimate_hours == pytest.approx(20.9)


def test_the_store_falls_back_to_similar_jobs_then_to_the_default(store, clock):
    finished_run(store, clock, auto_spec("other"), [("succeeded", 3.0)])
    finished_run(store, clock, auto_spec("elsewhere"), [("succeeded", 9.0)], gpu=("A100", 1))
    estimate = history_estimate(History(store), auto_spec("new"), None)
    assert (estimate.estimate_hours, estimate.source) == (
        3.0,
        "history: the last run on V100:1 (ml/other 3.00 h)",
    )
    lone = history_estimate(History(store), auto_spec("new", gpu="H100"), None)
    assert (lone.estimate_hours, lone.source) == (DEFAULT_HOURS, NO_HISTORY)


def test_failed_runs_are_no_history(store):
    spec = auto_spec()
    job = store.submit(spec, "x", "d1").job_id
    store.transition(job, JobState.PLANNED)
    attempt = store.start_attempt(job, placed(V100 | {"accelerator": "V100"}, 3, "spot"))
    store.attempt_running(attempt, {"provider_id": "i-1"})
    store.finish_attempt(attempt, "failed", billed_hours=5.0)
    assert history_estimate(History(store), spec, None).source == NO_HISTORY


# --- the controller plans, steers and projects budgets with it --------------------------

SIM_JOB = """\
apiVersion: broker/v1
name: train
team: ml
resources:
  accelerators: V100:1
placement:
  spot: never
run:
  command: simulated
runtime:
  estimate_hours: auto
"""


def test_the_controller_plans_with_the_learned_estimate_and_raises_it_on_overrun(tmp_path):
    """Three runs of one `auto` job on the simulator, real work 3 h, 5 h and 12 h: the
    controller plans each for its history (the plan's run hours), and while the third
    runs past its 4 h estimate the estimate is raised and the budget projection counts
    the hours it grew."""
    from pricing.query import OfferIndex

    clock = FixedClock(T0)
    trace = SpotTrace({TracePlace("aws", "us-east-1a", "V100"): Availability(1.0, (0,))})
    sim = SimulatedProvider(synthetic_offers(ZONES[:1]), trace, clock, T0, tmp_path)
    store = StateStore.open(tmp_path / "state.db", clock)
    controller = Controller(store, sim, clock, lambda p: OfferIndex(p.offers()))
    (manifest,) = parse_manifest_text(SIM_JOB)
    job_id = store.submit(manifest.spec, SIM_JOB, manifest.digest).job_id
    planned, took, raised_seen = [], [], []
    for n, real in enumerate((3.0, 5.0, 12.0)):
        if n:
            job_id = store.rerun(job_id).job_id
        sim.work[job_id] = Work(real, "V100")
        for _ in range(500):
            if store.job(job_id).state in (JobState.SUCCEEDED, JobState.FAILED):
                break
            clock.current += timedelta(hours=0.25)
            sim.sync()
            controller.run_pass()
            job = store.job(job_id)
            if job.state == JobState.RUNNING:
                now = runtime_of(History(store), store.version(job_id).spec, job, clock.now())
                if now.estimate_hours > planned_hours(store, job_id):
                    spec = replace(manifest.spec, runtime=now)
                    grown = grown_cost(store.attempts(job_id)[-1].placed_on, spec)
                    raised_seen.append((now, grown))
        assert store.job(job_id).state == JobState.SUCCEEDED
        planned.append(store.attempts(job_id)[0].placed_on)
        took.append(float(store.attempts(job_id)[-1].billed_hours))
    # run 1: no history (1 h); run 2: what run 1 took; run 3: the mean of runs 1 and 2
    expected = [1.0, took[0], (took[0] + took[1]) / 2]
    assert [p.cost.run_hours for p in planned] == pytest.approx(expected)
    assert expected[2] == pytest.approx(4.0, abs=0.5)
    assert "history: mean of the last 2 runs of ml/train" in planned[2].cost.assumptions[0]
    # every run went past its estimate (1 h < 3 h, 3 h < 5 h, 4 h < 12 h): raised each time
    assert raised_seen and all("raised to" in r.source for r, _ in raised_seen)
    assert all(grown > 0 for _, grown in raised_seen)
    assert max(r.estimate_hours for r, _ in raised_seen) > 10.0
    store.close()


def planned_hours(store: StateStore, job_id: str) -> float:
    return store.attempts(job_id)[-1].placed_on.cost.run_hours


def test_a_grown_estimate_is_counted_by_the_budget_and_the_queues_running_view(store, clock):
    """`spent_this_month` and `running_jobs` (what the queue policy reads) count the
    hours an `auto` estimate grew since its attempt was planned, at its price."""
    from broker.planner.decision import CostEstimate
    from broker.scheduling import running_jobs, spent_this_month

    spec = auto_spec()
    job = store.submit(spec, "x", "d1").job_id
    store.transition(job, JobState.PLANNED)
    cost = CostEstimate(12.0, 0.0, 0.0, 12.0, 4.0, 0.0, 0.0, 0.0, 0.0, "")
    where = replace(
        placed(V100 | {"accelerator": "V100", "accelerator_count": 1}, 3, "on-demand"),
        expected_hours=4.0,
        expected_cost=12.0,
        cost=cost,
    )
    attempt = store.start_attempt(job, where)
    store.attempt_running(attempt, {"provider_id": "i-1"})
    active = [store.job(job)]
    grown = replace(spec, runtime=RuntimeEstimate(5.25, auto=True, source="raised"))
    for spec_now, extra in ((spec, 0.0), (grown, 1.25)):
        spent = spent_this_month(store, active, clock.now(), None, lambda _, now=spec_now: now)
        assert spent["ml"] == pytest.approx(12.0 + 3 * extra)
        (running,) = running_jobs(store, active, lambda _, now=spec_now: now)
        assert running.expected_end == where_started(store, attempt) + timedelta(hours=4 + extra)
    given = replace(grown, runtime=RuntimeEstimate(5.25))  # a manifest's: never grown
    assert grown_cost(store.attempts(job)[-1].placed_on, given) == 0.0


def where_started(store: StateStore, attempt: str) -> datetime:
    return store.attempt(attempt).started_at


def test_the_search_across_names_looks_only_among_the_store_s_newest_runs(store, clock):
    """`finished_runs(team, within=N)`: the team's succeeded runs among the store's newest
    N runs (of every team), newest to end first; older ones are not searched."""
    made = []
    for i in range(6):
        made.append(finished_run(store, clock, auto_spec(f"job-{i}"), [("succeeded", 1.0)]))
        other = replace(auto_spec(f"x-{i}"), team="other")
        finished_run(store, clock, other, [("succeeded", 1.0)], digest=f"o{i}")
    found = store.finished_runs("ml", None, limit=10, within=5)
    assert [run.job.id for run in found] == made[:-3:-1]  # the newest 5: 2 of ml, 3 other
    every = store.finished_runs("ml", None, limit=4, within=None)
    assert [run.job.id for run in every] == made[:-5:-1]
