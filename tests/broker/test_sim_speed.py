"""The detailed engine's shortcuts change no figure and no stored row.

`simulate(reference=True)` runs the production `StateStore` as it is and passes at every
trace step; the default runs `broker.sim.store.SimStateStore` (reads remembered until the
next write, redactions remembered) and skips the passes of trace steps at which every job
provably idles (`Cadence.idle_at`). Both must leave the same result and the same rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.controller import Controller
from broker.sim import policies
from broker.sim.engine import ORIGIN, Scenario, simulate
from broker.sim.model import Availability, SimJob, SpotTrace, TracePlace
from broker.sim.store import SimStateStore
from broker.sim.synthetic import ZONES, synthetic_availability, synthetic_jobs, synthetic_offers
from broker.state import JobState

HOME = ZONES[0]
POLICIES = ("broker", "spot-failover", "uniform-progress", "on-demand")
TABLES = {
    "jobs": "id", "job_versions": "job_id, version", "attempts": "id", "events": "id",
    "ledger": "id", "instances": "cloud, provider_id", "schema_migrations": "version",
    "leases": "job_id", "sqlite_master": "type, name",
}  # fmt: skip


def _flapping(flips: int, deadline: float = 30.0) -> Scenario:
    """Spot for 3.5 h, then on and off at every 0.1 h step for `flips` steps, then on for
    good: a reclaim closes the zone for its cool-down while the trace keeps stepping."""
    counts = (1,) * 35 + tuple(i % 2 for i in range(flips)) + (1,)
    trace = SpotTrace({TracePlace("aws", HOME[2], "V100"): Availability(0.1, counts)})
    job = SimJob("flap", "nlp", 0.0, "V100", 1, 12.0, deadline, checkpoint_minutes=10.0)
    return Scenario(synthetic_offers((HOME,)), trace, [job], restart_hours=0.2,
                    reconcile_hours=0.1, horizon_hours=3 * deadline)  # fmt: skip


def _rows(workdir: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(workdir / "state.db")
    try:
        rows = {t: conn.execute(f"SELECT * FROM {t} ORDER BY {o}").fetchall()
                for t, o in TABLES.items()}  # fmt: skip
        for name in ("application_id", "user_version", "page_size", "foreign_keys"):
            rows[name] = conn.execute(f"PRAGMA {name}").fetchall()
        return rows
    finally:
        conn.close()


def _both(scenario: Scenario, name: str, tmp: Path, monkeypatch) -> tuple[dict, dict, list]:
    """(reference result and rows, fast result and rows, passes of each)."""
    passes = [0, 0]
    run_pass = Controller.run_pass
    out = []
    for i, reference in enumerate((True, False)):

        def counted(self, i=i):
            passes[i] += 1
            return run_pass(self)

        monkeypatch.setattr(Controller, "run_pass", counted)
        workdir = tmp / ("reference" if reference else "fast")
        workdir.mkdir()
        policy = policies.make(name)
        result = simulate(scenario, policy, workdir=workdir, reference=reference)
        out.append((result.as_dict(), _rows(workdir)))
    monkeypatch.setattr(Controller, "run_pass", run_pass)
    return out[0], out[1], passes


@pytest.mark.parametrize("name", POLICIES)
def test_skipped_trace_steps_leave_the_same_figures_and_rows(name, tmp_path, monkeypatch):
    reference, fast, passes = _both(_flapping(120), name, tmp_path, monkeypatch)
    assert fast[0] == reference[0]
    assert fast[1] == reference[1]
    assert passes[1] <= passes[0]
    if name == "spot-failover":  # queued through the cool-down while the trace flaps
        assert passes[1] < passes[0]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(POLICIES))
def test_the_fast_path_equals_the_reference_on_synthetic_scenarios(seed, name, tmp_path_factory):
    scenario = Scenario(synthetic_offers(), synthetic_availability(seed),
                        synthetic_jobs(seed, 4), restart_hours=0.1)  # fmt: skip
    _assert_equal_to_reference(scenario, name, tmp_path_factory.mktemp("sim"))


def _assert_equal_to_reference(scenario: Scenario, name: str, tmp: Path) -> None:
    """The fast path's result and stored rows are the reference's."""
    policy = policies.make(name)
    (tmp / "r").mkdir()
    (tmp / "f").mkdir()
    reference = simulate(scenario, policy, workdir=tmp / "r", reference=True).as_dict()
    assert simulate(scenario, policy, workdir=tmp / "f").as_dict() == reference
    assert _rows(tmp / "f") == _rows(tmp / "r")


def test_a_remembered_read_is_forgotten_at_the_next_write(tmp_path):
    from broker.manifest.load import parse_manifest_text
    from broker.sim.manifests import manifest_text

    store = SimStateStore.open_fast(tmp_path / "state.db", FixedClock(ORIGIN), new_id=lambda: "a")
    try:
        text = manifest_text(SimJob("one", "nlp", 0.0, "V100", 1, 1.0, None), "prefer")
        (manifest,) = parse_manifest_text(text)
        assert store.jobs() == []
        job_id = store.submit(manifest.spec, text, manifest.digest).job_id
        listed = store.jobs()
        assert [j.id for j in listed] == [job_id]
        listed.clear()  # a caller's list is its own
        assert [j.state for j in store.jobs()] == [JobState.QUEUED]
        store.transition(job_id, JobState.CANCELLED, "test")
        assert [j.state for j in store.jobs()] == [JobState.CANCELLED]
        assert store.job(job_id).state is JobState.CANCELLED
    finally:
        store.close()


# --- the planner's refusals (broker.sim.refusal) ---------------------------------------


def _reclaimed_often(up: int, flips: int, period: int, hours: float, deadline: float) -> Scenario:
    """Spot for `up` steps, then on and off every `period` steps for `flips` steps, then on
    for good: the reclaims raise the learned rate until the planner refuses the job's spot
    (its risk-adjusted deadline), while spot stays on sale, until the rate decays."""
    counts = (1,) * up + tuple(int((i // period) % 2 == 0) for i in range(flips)) + (1,)
    trace = SpotTrace({TracePlace("aws", HOME[2], "V100"): Availability(0.1, counts)})
    job = SimJob("often", "nlp", 0.0, "V100", 1, hours, deadline, checkpoint_minutes=10.0)
    return Scenario(synthetic_offers((HOME,)), trace, [job], restart_hours=0.2,
                    reconcile_hours=0.1, horizon_hours=3 * deadline)  # fmt: skip


def _refusals(monkeypatch) -> list:
    """The refusals proven during a run (`refused_through`'s answers but None)."""
    from broker.sim import refusal

    proven: list = []
    real = refusal.refused_through

    def spied(*args, **kwargs):
        through = real(*args, **kwargs)
        if through is not None:
            proven.append(through)
        return through

    monkeypatch.setattr(refusal, "refused_through", spied)
    return proven


@pytest.mark.parametrize(
    ("shape", "refused"),
    [((10, 400, 2, 12.0, 13.0), True), ((5, 300, 4, 8.0, 9.0), True),
     ((10, 200, 3, 12.0, 20.0), False)],
)  # fmt: skip
@pytest.mark.parametrize("name", POLICIES)
def test_passes_the_planner_refuses_are_skipped_with_the_same_figures_and_rows(
    shape, refused, name, tmp_path, monkeypatch
):
    proven = _refusals(monkeypatch)
    reference, fast, passes = _both(_reclaimed_often(*shape), name, tmp_path, monkeypatch)
    assert fast[0] == reference[0]
    assert fast[1] == reference[1]
    assert passes[1] <= passes[0]
    if refused and name == "spot-failover":  # its spot refused for a while: passes skipped
        assert proven
        assert passes[1] < passes[0] * 0.8


@settings(max_examples=8, deadline=None)
@given(
    up=st.integers(1, 20),
    flips=st.integers(0, 240),
    period=st.integers(1, 5),
    hours=st.floats(2.0, 12.0),
    slack=st.floats(1.02, 1.6),
    name=st.sampled_from(POLICIES),
)
def test_the_fast_path_equals_the_reference_when_reclaims_vary(
    up, flips, period, hours, slack, name, tmp_path_factory
):
    scenario = _reclaimed_often(up, flips, period, hours, round(hours * slack, 2))
    _assert_equal_to_reference(scenario, name, tmp_path_factory.mktemp("sim"))


CBL = Path(__file__).resolve().parents[3] / "shared" / "traces" / "cant-be-late-spot"


@pytest.mark.skipif(not CBL.is_dir(), reason=f"the Can't Be Late traces are not at {CBL}")
@pytest.mark.parametrize(
    ("file", "start"),
    [
        ("preemption/1-node/aws-04-19-2023/us-east-1c_intel_64.json", 63.306111111111115),
        ("availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json", 344.93333333333334),
    ],
)
def test_the_fast_path_equals_the_reference_on_can_t_be_late_traces(
    file, start, tmp_path, monkeypatch
):
    """A 48 h job with a 52 h deadline on a published trace (bench/simulate.py's setting):
    spot-failover, which the planner refuses for hours after its reclaims."""
    import json

    data = json.loads((CBL / file).read_text())
    step = float(data["metadata"]["gap_seconds"]) / 3600
    place = TracePlace("aws", file.rsplit("/", 1)[1].split("_")[0], "V100")
    avail = Availability(step, tuple(int(v) for v in data["data"])).window(start, 57.0)
    zone = ("aws", place.location[:-1], place.location, "p3.2xlarge", "V100", 3.06, 0.918, 0.05)
    job = SimJob("cbl-job", "bench", 0.0, "V100", 1, 48.0, 52.0, checkpoint_minutes=10.0)
    scenario = Scenario(synthetic_offers((zone,)), SpotTrace({place: avail}), [job],
                        restart_hours=0.2, reconcile_hours=step, horizon_hours=156.0)  # fmt: skip
    reference, fast, passes = _both(scenario, "spot-failover", tmp_path, monkeypatch)
    assert fast[0] == reference[0]
    assert fast[1] == reference[1]
    assert passes[1] <= passes[0]


def test_the_in_memory_store_is_a_state_file_once_closed(tmp_path):
    """`open_fast` holds the state in memory and writes it when closed: the production
    store opens that file (read-only: as it is) and reads what was written; a second
    simulation into the same file is refused rather than mixed into it."""
    from broker.manifest.load import parse_manifest_text
    from broker.sim.manifests import manifest_text
    from broker.state import StateStore
    from broker.state.model import StateError

    file = tmp_path / "state.db"
    store = SimStateStore.open_fast(file, FixedClock(ORIGIN), new_id=lambda: "b")
    text = manifest_text(SimJob("one", "nlp", 0.0, "V100", 1, 1.0, None), "prefer")
    (manifest,) = parse_manifest_text(text)
    job_id = store.submit(manifest.spec, text, manifest.digest).job_id
    assert not file.exists()  # in memory while it runs
    store.close()
    reopened = StateStore.open(file, FixedClock(ORIGIN), read_only=True)
    try:
        assert [(j.id, j.state) for j in reopened.jobs()] == [(job_id, JobState.QUEUED)]
        assert reopened.version(job_id).digest == manifest.digest
    finally:
        reopened.close()
    with pytest.raises(StateError):
        SimStateStore.open_fast(file, FixedClock(ORIGIN), new_id=lambda: "c")


def test_a_closed_stores_connection_serves_the_next_store_afresh(tmp_path):
    """The next `open_fast` reuses a closed store's connection (its statements compiled
    once): it starts from a new state, its remembered reads are forgotten by its own
    writes, a statement it is the first to send too (the triggers call the store of the
    moment), and the closed store cannot read any more."""
    from broker.manifest.load import parse_manifest_text
    from broker.sim.manifests import manifest_text

    text = manifest_text(SimJob("one", "nlp", 0.0, "V100", 1, 1.0, None), "prefer")
    (manifest,) = parse_manifest_text(text)
    first = SimStateStore.open_fast(tmp_path / "a.db", FixedClock(ORIGIN), new_id=lambda: "a")
    first.submit(manifest.spec, text, manifest.digest)
    conn = first._conn
    first.close()
    with pytest.raises(sqlite3.ProgrammingError):
        first.jobs(states=(JobState.QUEUED,))
    first.close()  # twice: nothing more
    second = SimStateStore.open_fast(tmp_path / "b.db", FixedClock(ORIGIN), new_id=lambda: "b")
    try:
        assert second._conn is conn
        assert second.jobs() == []
        job_id = second.submit(manifest.spec, text, manifest.digest).job_id
        assert [j.id for j in second.jobs()] == [job_id]
        second.transition(job_id, JobState.CANCELLED, "test")
        assert [j.state for j in second.jobs()] == [JobState.CANCELLED]
    finally:
        second.close()
    for name in ("a.db", "b.db"):  # written without the simulator's watching triggers
        written = sqlite3.connect(tmp_path / name)
        try:
            kinds = {kind for (kind,) in written.execute("SELECT type FROM sqlite_master")}
        finally:
            written.close()
        assert "table" in kinds and "trigger" not in kinds


# --- the planner's answers remembered (broker.sim.plans) -------------------------------


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    hours=st.floats(0.5, 48.0),
    deadline=st.none() | st.floats(1.0, 96.0),
    spot=st.sampled_from(["prefer", "only", "never"]),
    later=st.floats(0.0, 50.0),
)
def test_a_remembered_plan_is_the_planners_answer(seed, hours, deadline, spot, later):
    """Asked twice, with the same specs on equal tables (not the same objects) and at
    any moments, the remembered planner answers what `plan_many` answers then."""
    from datetime import timedelta

    from broker.manifest.load import parse_manifest_text
    from broker.planner.plan import plan_many
    from broker.sim.manifests import manifest_text
    from broker.sim.plans import remembered_plan_many
    from pricing.query import OfferIndex

    job = SimJob("p", "nlp", 0.0, "V100", 1 + seed % 9, hours, deadline, checkpoint_minutes=10.0)
    (manifest,) = parse_manifest_text(manifest_text(job, spot))
    table = synthetic_offers()
    for at in (ORIGIN, ORIGIN + timedelta(hours=later)):
        for index in (OfferIndex(table), OfferIndex(table.take(list(range(len(table)))))):
            expected = plan_many([manifest.spec], index, at)
            assert remembered_plan_many([manifest.spec], index, at) == expected


def test_a_remembered_plan_is_asked_again_when_the_table_changes():
    """A table that differs in one figure (a learned rate) is another question."""
    import numpy as np

    from broker.manifest.load import parse_manifest_text
    from broker.planner.plan import plan_many
    from broker.sim.manifests import manifest_text
    from broker.sim.plans import remembered_plan_many
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    job = SimJob("q", "nlp", 0.0, "V100", 1, 40.0, 44.0, checkpoint_minutes=10.0)
    (manifest,) = parse_manifest_text(manifest_text(job, "only"))
    table = synthetic_offers()
    first = remembered_plan_many([manifest.spec], OfferIndex(table), ORIGIN)
    numbers = dict(table.numbers)
    numbers["spot_interruption_rate"] = np.full(len(table), 3.0)  # spot now refused
    risky = OfferIndex(OfferTable(numbers, table.codes, table.categories))
    second = remembered_plan_many([manifest.spec], risky, ORIGIN)
    assert second == plan_many([manifest.spec], risky, ORIGIN)
    assert second != first


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.sampled_from([float("nan"), 0.0, 0.05, 0.2, 1.5, 3.0]), min_size=2),
    spot=st.sampled_from(["prefer", "only"]),
    deadline=st.none() | st.floats(2.0, 80.0),
    hours=st.floats(1.0, 40.0),
)
def test_a_table_selling_no_spot_is_planned_whatever_its_rates(rates, spot, deadline, hours):
    """Where no row sells spot, the planner's answer does not depend on the rates (so
    `table_key` leaves them out): the remembered answer, first asked at other rates
    (NaN where known the same), is what a fresh plan answers."""
    import numpy as np

    from broker.manifest.load import parse_manifest_text
    from broker.planner.plan import plan_many
    from broker.sim.manifests import manifest_text
    from broker.sim.plans import remembered_plan_many
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    job = SimJob("u", "nlp", 0.0, "V100", 1, hours, deadline, checkpoint_minutes=10.0)
    (manifest,) = parse_manifest_text(manifest_text(job, spot))
    table = synthetic_offers()

    def unsold(values: list[float]) -> OfferIndex:
        numbers = dict(table.numbers)
        numbers["price_spot"] = np.full(len(table), np.nan)
        numbers["spot_interruption_rate"] = np.resize(np.array(values), len(table))
        return OfferIndex(OfferTable(numbers, table.codes, table.categories))

    first = unsold(rates)
    known = ~np.isnan(first.offers.numbers["spot_interruption_rate"])
    moved = np.nan_to_num(np.array(rates[::-1]), nan=0.4) + 0.7  # other rates, all known
    other = np.where(known, np.resize(moved, len(table)), np.nan)
    second = unsold(other.tolist())
    remembered_plan_many([manifest.spec], first, ORIGIN)
    fresh = plan_many([manifest.spec], second, ORIGIN)
    assert remembered_plan_many([manifest.spec], second, ORIGIN) == fresh
    assert fresh == plan_many([manifest.spec], first, ORIGIN)


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.sampled_from([float("nan"), 0.0, 0.05, 0.2, 0.2, 1.5]), min_size=1),
    later=st.lists(st.sampled_from([float("nan"), 0.0, 0.05, 0.2, 3.0]), min_size=1),
    spot=st.sampled_from(["prefer", "only"]),
    deadline=st.none() | st.floats(2.0, 80.0),
)
def test_a_search_rerated_plans_as_a_fresh_one(rates, later, spot, deadline):
    """The planner's search made on one table and rerated for another that differs in
    its rates alone (`Search.rerated`: in the same order, or refused) gives the answer
    of a fresh plan, on tables whose rates tie, vanish (NaN: the default) and reorder;
    and a rate scaled by two keeps the order, so its search is rerated, not remade."""
    import numpy as np

    from broker.manifest.load import parse_manifest_text
    from broker.planner.plan import Search, plan_many
    from broker.sim.manifests import manifest_text
    from broker.sim.plans import remembered_plan_many
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    job = SimJob("r", "nlp", 0.0, "V100", 1, 20.0, deadline, checkpoint_minutes=10.0)
    (manifest,) = parse_manifest_text(manifest_text(job, spot))
    east = ZONES[0][:2]  # more zones in one region: one partition, ordered by rate
    table = synthetic_offers(
        (*ZONES, (*east, "us-east-1b", *ZONES[0][3:]), (*east, "us-east-1c", "p3.2xlarge",
                                                        "V100", 3.06, 0.99, 0.05))
    )  # fmt: skip

    def rated(values: list[float]) -> OfferIndex:
        numbers = dict(table.numbers)
        numbers["spot_interruption_rate"] = np.resize(np.array(values), len(table))
        return OfferIndex(OfferTable(numbers, table.codes, table.categories))

    first, second = rated(rates), rated(later)
    doubled = rated([2 * r for r in rates])
    made = Search.of([manifest.spec], first, 2_000_000)
    assert made.rerated(doubled) is not None
    for index in (first, second, doubled):
        kept = made.rerated(index)
        fresh = plan_many([manifest.spec], index, ORIGIN)
        if kept is not None:
            reused = plan_many([manifest.spec], index, ORIGIN, search=lambda *_, s=kept: s)
            assert reused == fresh
        assert remembered_plan_many([manifest.spec], index, ORIGIN) == fresh


def test_a_jobs_events_read_again_are_the_production_stores(tmp_path):
    """The simulator's store reads only the events written since a job's last read; what
    it answers (with and without `after`) is what the production store answers."""
    from broker.manifest.load import parse_manifest_text
    from broker.sim.manifests import manifest_text
    from broker.state import StateStore

    clock = FixedClock(ORIGIN)
    ids = iter(f"{i:012x}" for i in range(1, 99))
    fast = SimStateStore.open_fast(tmp_path / "fast.db", clock, new_id=lambda: next(ids))
    ids2 = iter(f"{i:012x}" for i in range(1, 99))
    plain = StateStore.open(tmp_path / "plain.db", clock, new_id=lambda: next(ids2))
    text = manifest_text(SimJob("ev", "nlp", 0.0, "V100", 1, 1.0, None), "prefer")
    (manifest,) = parse_manifest_text(text)
    try:
        for store in (fast, plain):
            store.submit(manifest.spec, text, manifest.digest)
        (job,) = fast.jobs()
        assert fast.events(job.id) == plain.events(job.id)
        for store in (fast, plain):
            store.transition(job.id, JobState.CANCELLED, "test")
        first = plain.events(job.id)[0].id
        assert fast.events(job.id) == plain.events(job.id)
        assert len(fast.events(job.id)) == 2
        assert fast.events(job.id, first) == plain.events(job.id, first)
    finally:
        fast.close()
        plain.close()


def test_a_new_event_forgets_the_reads_of_its_kind_alone(tmp_path):
    """A new event has no watching trigger: the store tells its kind itself
    (`SimStateStore._event`): a remembered read of events of that kind is asked again,
    and every answer is the production store's."""
    from broker.state import StateStore
    from tests.broker.test_state import launched

    clock = FixedClock(ORIGIN)
    ids, ids2 = (iter(f"{i:012x}" for i in range(1, 99)) for _ in range(2))
    fast = SimStateStore.open_fast(tmp_path / "fast.db", clock, new_id=lambda: next(ids))
    plain = StateStore.open(tmp_path / "plain.db", clock, new_id=lambda: next(ids2))
    try:
        (_, attempt), _ = (launched(store) for store in (fast, plain))
        assert fast.checkpoints() == plain.checkpoints() == {}
        assert fast.migration(attempt) is None
        for store in (fast, plain):
            store.record_checkpoint(attempt, uri="s3://b/c")
        assert fast.checkpoints() == plain.checkpoints() != {}
        for store in (fast, plain):
            store.record_migration(attempt, "s3://a/", "s3://b/", 7)
        assert fast.migration(attempt) == plain.migration(attempt) is not None
        assert fast.checkpoints() == plain.checkpoints()
    finally:
        fast.close()
        plain.close()
