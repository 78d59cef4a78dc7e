"""`broker jobs`' runtime columns read narrowly (`StateStore.listed_runs`, broker.state.
listing): on SQLite and on PostgreSQL, over drawn histories (runs of `auto` and fixed
estimates on several GPUs, succeeded, interrupted with lost shares, failed, still
running at several time scales, never launched; placements of every stored layout),
`as_listed` over the narrow read gives exactly what it gave over every attempt's whole
placement and the whole spec (the reference below is that reading, as it was)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.learned_runtime import (
    History,
    _planned_source,
    as_listed,
    on_first_choice,
    runtime_of,
    work_hours,
)
from broker.planner.decision import CostEstimate
from broker.spec import NO_HISTORY, GpuAsk, JobSpec, Requirements, RuntimeEstimate
from broker.state import TERMINAL, AttemptState, JobState, StateStore
from broker.state.listing import AttemptWork
from broker.state.placed import PlacedOn
from tests.state_backends import execute

T0 = datetime(2026, 3, 2, tzinfo=UTC)
SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
GPUS = (("V100", 1.0), ("A100", 8.0), ("T4", 1.0), ("", 0.0))
OUTCOMES = ("succeeded", "interrupted", "failed", "cancelled", "running", "launching")

attempt_draw = st.tuples(
    st.sampled_from(OUTCOMES),
    st.sampled_from((0.0, 0.5, 1.25, 3.0, 7.75)),  # billed hours
    st.sampled_from(range(len(GPUS))),  # where it ran
    st.sampled_from((1.0, 3600.0, 60)),  # time scale
    st.booleans(),  # the placement records its plan's cost
    st.sampled_from((2, 1, None)),  # stored layout: format 2, format 1, the plan's JSON
)
run_draw = st.tuples(
    st.sampled_from(("train", "eval", "tune")),
    st.sampled_from(range(len(GPUS))),  # what it asks for
    st.sampled_from((None, 2.5)),  # its estimate: None is `auto`
    st.lists(attempt_draw, max_size=3),
    st.sampled_from((None, JobState.QUEUED, JobState.CANCELLED)),  # never launched
)


def spec_of(name: str, ask: int, hours: float | None) -> JobSpec:
    gpu, count = GPUS[ask]
    asks = (GpuAsk(gpu, count),) if gpu else ()
    runtime = (
        RuntimeEstimate(auto=True, source=NO_HISTORY)
        if hours is None
        else RuntimeEstimate(estimate_hours=hours)
    )
    return JobSpec(name, "ml", Requirements(accelerators=asks), runtime=runtime)


def placement(where: int, scale: float, costed: bool, hours: float) -> PlacedOn:
    gpu, count = GPUS[where]
    said = ("runtime estimate 2 h on V100 (history: the last run), scaled by relative GPU "
            "throughput", "spot interruptions: ...")  # fmt: skip
    cost = CostEstimate(
        compute=hours * 3, interruption_overhead=0.0, egress=0.0, total=hours * 3,
        run_hours=hours + 0.5, staging_hours=0.0, overhead_hours=0.0,
        expected_interruptions=0.0, interruption_rate=0.0, interruption_rate_source="catalog",
        assumptions=said if where % 2 else (),
    ) if costed else None  # fmt: skip
    return PlacedOn(
        cloud="aws", region="us-east-1", instance_type="p3.2xlarge", accelerator=gpu,
        accelerator_count=count, market="spot", price_per_hour=Decimal("3"), cost=cost,
        time_scale=scale,
    )  # fmt: skip


def record(store: StateStore, clock: FixedClock, draws) -> list[tuple[str, str, int | None]]:
    """The drawn runs, through the store's own writes; (job, attempt, layout) of each
    attempt, so that its placement can be rewritten in an older layout."""
    laid = []
    for name, ask, hours, attempts, unlaunched in draws:
        clock.current += timedelta(hours=1)
        spec = spec_of(name, ask, hours)
        job = store.submit(spec, "x", f"d-{name}-{ask}-{hours}").job_id
        if store.job(job).state in TERMINAL:
            job = store.rerun(job).job_id
        if store.job(job).state not in (JobState.QUEUED,):
            continue  # a run still live: this draw adds nothing
        for outcome, billed, where, scale, costed, layout in attempts:
            store.transition(job, JobState.PLANNED)
            attempt = store.start_attempt(job, placement(where, scale, costed, billed))
            laid.append((job, attempt, layout))
            clock.current += timedelta(minutes=20)
            if outcome == "launching":
                break
            store.attempt_running(attempt, {"provider_id": f"i-{attempt}"})
            clock.current += timedelta(minutes=40)
            if outcome == "running":
                break
            lost = Decimal("0.25") if outcome == "interrupted" else None
            to = JobState.QUEUED if outcome == "interrupted" else None
            store.finish_attempt(attempt, outcome, billed_hours=billed, job_to=to, lost_share=lost)
            if store.job(job).state != JobState.QUEUED:
                break
        state = store.job(job).state
        if unlaunched is JobState.CANCELLED and state == JobState.QUEUED:
            store.transition(job, JobState.CANCELLED)
    return laid


def older_layout(row: dict, layout: int | None) -> dict:
    """A format-2 placement row as format 1 wrote it (no time scale), or as the plan's
    own JSON before any format (a `cost_breakdown`, no time scale)."""
    if layout == 2:
        return row
    if layout == 1:
        return {k: v for k, v in row.items() if k != "time_scale"} | {"format": 1}
    plan = {k: v for k, v in row.items() if k not in ("format", "cost", "time_scale")}
    return plan | {"cost_breakdown": row["cost"], "steered": None}


def as_listed_before(history: History, store: StateStore, job_id: str, now: datetime):
    """`as_listed` as it read a run before the narrow read: the whole job, spec and
    attempts (each placement decoded whole), and the lost shares of the job."""
    job = store.job(job_id)
    spec = store.version(job_id).spec
    attempts = store.attempts(job_id)
    first = attempts[0].placed_on if attempts else None
    runtime = None
    if job.state not in TERMINAL:
        runtime = runtime_of(history, spec, job, now)
    elif first is not None and first.cost is not None:
        hours = on_first_choice(spec, first.cost.run_hours, first.accelerator)
        said = first.cost.assumptions[0] if first.cost.assumptions else ""
        runtime = replace(spec.runtime, estimate_hours=hours, source=_planned_source(said))
    if job.state != JobState.SUCCEEDED or not attempts:
        return runtime, None
    interrupted = any(a.state == AttemptState.INTERRUPTED for a in attempts)
    shares = store.lost_shares(job_id) if interrupted else {}
    took = on_first_choice(spec, work_hours(attempts, shares), attempts[-1].placed_on.accelerator)
    return runtime, took


# Every branch at least once, whatever is drawn: an interrupted attempt then a success on
# another GPU, an interrupted then running `auto` run (raised by its work), an old layout.
SHAPES = [
    ("train", 0, None, [("succeeded", 3.0, 0, 1.0, True, 2)], None),
    ("train", 0, None, [("interrupted", 1.25, 1, 1.0, True, 1), ("succeeded", 0.5, 0, 1.0,
                        False, 2)], None),
    ("eval", 1, None, [("interrupted", 7.75, 1, 3600.0, True, None), ("running", 0.0, 1,
                       3600.0, True, 2)], None),
    ("tune", 2, 2.5, [], JobState.CANCELLED),
]  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=SLOW_OK)
@given(draws=st.lists(run_draw, min_size=1, max_size=10))
@example(draws=SHAPES)
def test_the_narrow_read_lists_every_run_exactly_as_the_whole_one(new_state_location, draws):
    location = new_state_location()
    clock = FixedClock(T0)
    with StateStore.open(location, clock) as store:
        laid = record(store, clock, draws)
    for _, attempt_id, layout in laid:  # older layouts, as old state files hold them
        if layout != 2:
            ((text,),) = _placement(location, attempt_id)
            rewritten = json.dumps(older_layout(json.loads(text), layout))
            execute(location, "UPDATE attempts SET placement_json = ? WHERE id = ?",
                    (rewritten, attempt_id))  # fmt: skip
    now = clock.current + timedelta(hours=5)
    with StateStore.open(location, FixedClock(now)) as store:
        found = store.listing()
        ids = [job.id for job in found.jobs]
        listed = store.listed_runs([*ids, "j-unknown"])
        assert sorted(listed) == sorted(ids)  # an unknown id is left out
        for job in found.jobs:
            run = listed[job.id]
            spec = store.version(job.id).spec
            assert (run.team, run.name, run.requirements, run.runtime) == (
                spec.team, spec.name, spec.requirements, spec.runtime,
            )  # fmt: skip
            assert run.attempts == tuple(AttemptWork.of(a) for a in store.attempts(job.id))
            got = as_listed(History(store), job.state, run, now)
            assert got == as_listed_before(History(store), store, job.id, now)


def _placement(location, attempt_id: str):
    from tests.state_backends import query

    return query(location, "SELECT placement_json FROM attempts WHERE id = ?", (attempt_id,))


def test_a_run_read_narrowly_shares_its_decoded_spec_parts(tmp_path):
    """Runs written from one template decode their requirements and runtime once."""
    clock = FixedClock(T0)
    with StateStore.open(tmp_path / "state.db", clock) as store:
        ids = [store.submit(spec_of(f"job-{i}", 1, None), "x", f"d{i}").job_id for i in range(3)]
        listed = store.listed_runs(ids)
    first, *rest = (listed[i] for i in ids)
    assert all(r.requirements is first.requirements for r in rest)
    assert all(r.runtime is first.runtime for r in rest)
    assert [listed[i].name for i in ids] == ["job-0", "job-1", "job-2"]
