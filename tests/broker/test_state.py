"""The state store: migrations, the job state machine, submit versions, compare-and-set
between controllers, bill-once, crash atomicity and exact money."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Context, Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.planner.decision import CostEstimate, Placement
from broker.state import (
    TERMINAL,
    TRANSITIONS,
    AttemptState,
    IllegalTransition,
    JobState,
    RunInFlight,
    SchemaTooNew,
    StateStore,
    UnknownAttempt,
    UnknownJob,
    can_transition,
    default_state_path,
    schema,
)
from broker.state import store as store_module
from broker.state.placed import PlacedOn
from tests.fakes.specs import job_spec, placed
from tests.state_backends import execute, lock_timeout, query, sql_error, tables

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 1, tzinfo=UTC)
PLACEMENT = {"cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "instance_type": "p5"}
TABLES = ("jobs", "job_versions", "attempts", "instances", "events", "ledger")
Q = JobState


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def path(state_location: Path | str) -> Path | str:
    """The store's location: a SQLite file, then a PostgreSQL database (state_backends)."""
    return state_location


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A state file, for what only SQLite has (WAL, PRAGMAs, files of older brokers)."""
    return tmp_path / "state" / "state.db"


@pytest.fixture
def store(path: Path, clock: FixedClock) -> Iterator[StateStore]:
    with StateStore.open(path, clock) as opened:
        yield opened


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    """One store for hypothesis examples; each example works on a job of its own."""
    with StateStore.open(tmp_path_factory.mktemp("shared") / "s.db", FixedClock(T0)) as opened:
        yield opened


def submit(store: StateStore, name: str = "llama", digest: str = "d1", **kw: Any) -> str:
    kw.setdefault("team", "ml")
    return store.submit(job_spec(name, **kw), f"name: {name}\n", digest).job_id


def launched(store: StateStore, name: str = "llama", price: Any = 32.7726) -> tuple[str, str]:
    """A job PLANNED -> LAUNCHING with one attempt; (job id, attempt id)."""
    job = submit(store, name)
    store.transition(job, Q.PLANNED)
    return job, store.start_attempt(job, placed(PLACEMENT, price, "spot", "aws-api", "2026-10-30"))


def running(store: StateStore, name: str = "llama", price: Any = 32.7726) -> tuple[str, str]:
    job, attempt = launched(store, name, price)
    assert store.attempt_running(attempt, {"provider_id": f"i-{name}"})
    return job, attempt


def counts(path: Path | str) -> dict[str, int]:
    return {t: query(path, f"SELECT COUNT(*) FROM {t}")[0][0] for t in TABLES}


def path_to(target: JobState) -> list[JobState]:
    """The shortest allowed path from QUEUED to `target` (BFS over the table)."""
    previous: dict[JobState, JobState | None] = {Q.QUEUED: None}
    todo = deque([Q.QUEUED])
    while todo:
        state = todo.popleft()
        for nxt in sorted(TRANSITIONS[state]):
            if nxt not in previous:
                previous[nxt] = state
                todo.append(nxt)
    steps: list[JobState] = []
    at: JobState | None = target
    while at is not None and at is not Q.QUEUED:
        steps.append(at)
        at = previous[at]
    return steps[::-1]


# --- file, schema, migrations ------------------------------------------------------------


def test_default_path_follows_xdg_state_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_path() == tmp_path / "broker" / "state.db"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")  # the XDG spec says: ignore
    assert default_state_path() == Path.home() / ".local" / "state" / "broker" / "state.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_path() == Path.home() / ".local" / "state" / "broker" / "state.db"


def test_fresh_file_is_migrated_and_reopening_changes_nothing(path, clock):
    with StateStore.open(path, clock) as store:
        job = submit(store)
    applied = query(path, "SELECT version FROM schema_migrations ORDER BY version")
    assert applied == [(m.version,) for m in schema.MIGRATIONS]
    for _ in range(2):
        with StateStore.open(path, clock) as store:
            assert store.job(job).state is Q.QUEUED
    assert query(path, "SELECT COUNT(*) FROM schema_migrations")[0][0] == len(applied)


def test_wal_foreign_keys_and_busy_timeout(sqlite_path, clock):
    store = StateStore.open(sqlite_path, clock)
    path = sqlite_path
    with sqlite3.connect(path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    with pytest.raises(sqlite3.IntegrityError):  # foreign keys are enforced
        store._conn.execute(
            "INSERT INTO events (job_id, time, kind, message, data_json)"
            " VALUES ('j-x', '', '', '', '{}')"
        )
    store.close()


def test_postgres_enforces_foreign_keys_and_waits_for_row_locks(postgres_cluster, clock):
    import psycopg

    state_location = postgres_cluster.fresh_database()
    with StateStore.open(state_location, clock, busy_timeout=7) as store:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            store._conn.execute(
                "INSERT INTO events (job_id, time, kind, message, data_json)"
                " VALUES ('j-x', '', '', '', '{}')"
            )
        assert store._conn.execute("SHOW lock_timeout").fetchone()[0] == "7s"
        collations = query(
            state_location,
            "SELECT DISTINCT collation_name FROM information_schema.columns"
            " WHERE table_name = 'jobs' AND data_type = 'text'",
        )
        assert collations == [("C",)]  # text sorts by code point, as in SQLite


def test_a_file_from_a_newer_broker_is_refused_unchanged(path, clock):
    StateStore.open(path, clock).close()
    execute(path, "INSERT INTO schema_migrations VALUES (99, 'future', '2030-01-01')")
    with pytest.raises(SchemaTooNew, match="schema version 99.*knows schema version 99"):
        StateStore.open(path, clock)
    assert query(path, "SELECT MAX(version), COUNT(*) FROM schema_migrations")[0] == (
        99,
        len(schema.MIGRATIONS) + 1,
    )


def test_later_migrations_apply_in_order_each_in_its_own_transaction(path, clock, monkeypatch):
    with StateStore.open(path, clock) as store:
        job = submit(store)
    n = len(schema.MIGRATIONS)
    good = schema.Migration(n + 1, "add a table", ("CREATE TABLE extra (x TEXT)",))
    bad = schema.Migration(n + 2, "half broken", ("CREATE TABLE half (x TEXT)", "NOT SQL"))
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, good, bad])
    with pytest.raises(sql_error(path)):
        StateStore.open(path, clock)
    assert query(path, "SELECT MAX(version) FROM schema_migrations") == [(n + 1,)]  # it stayed
    names = tables(path)
    assert "extra" in names and "half" not in names  # the bad one left nothing behind
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS[:n], good])
    with StateStore.open(path, clock) as store:
        assert store.job(job).name == "llama"


def test_a_naive_clock_is_refused(path):
    with pytest.raises(ValueError, match="naive"):
        StateStore.open(path, FixedClock(datetime(2026, 11, 1)))


# --- the state machine -------------------------------------------------------------------

PAIRS = [(a, b) for a in JobState for b in JobState]


@pytest.mark.parametrize(("start", "to"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_of_states(store, start, to):
    job = submit(store)
    for step in path_to(start):
        assert store.transition(job, step)
    before = store.events(job)
    if can_transition(start, to):
        assert store.transition(job, to, reason="because", data={"k": 1})
        assert store.job(job).state is to
        last = store.events(job)[-1]
        assert (last.kind, last.data["from"], last.data["to"], last.data["k"]) == (
            "transition",
            start,
            to,
            1,
        )
        assert last.message == f"{start} -> {to}: because"
    else:
        with pytest.raises(IllegalTransition):
            store.transition(job, to)
        assert store.job(job).state is start
        assert store.events(job) == before


def test_terminal_states_have_no_way_out_but_resubmission():
    assert all(not TRANSITIONS[s] for s in TERMINAL)
    assert TERMINAL == {Q.SUCCEEDED, Q.FAILED, Q.CANCELLED}


CURRENT = "current"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(JobState)),
            st.none() | st.just(CURRENT) | st.sampled_from(list(JobState)),
        ),
        max_size=12,
    )
)
def test_random_walks_follow_the_table(shared, moves):
    store = shared
    job = submit(store, f"walk-{uuid.uuid4().hex}")
    state, visited = Q.QUEUED, {Q.QUEUED}
    for to, expect in moves:
        expect = state if expect == CURRENT else expect
        events = len(store.events(job))
        if expect is not None and expect != state:
            assert store.transition(job, to, expect=expect) is False
        elif can_transition(state, to):
            assert store.transition(job, to, expect=expect) is True
            state = to
            events += 1
        else:
            with pytest.raises(IllegalTransition):
                store.transition(job, to, expect=expect)
        assert store.job(job).state is state
        assert len(store.events(job)) == events
        visited.add(state)
    assert all(s == Q.QUEUED or s in path_to(s) for s in visited)


def test_compare_and_set_is_false_and_silent_when_the_state_moved(store):
    job = submit(store)
    events = store.events(job)
    assert store.transition(job, Q.CANCELLED, expect=Q.PLANNED) is False
    assert store.job(job).state is Q.QUEUED and store.events(job) == events
    with pytest.raises(UnknownJob):
        store.transition("j-000000000000", Q.PLANNED)


def race(path: Path, clock: FixedClock, action: Callable[[StateStore], Any]) -> list[Any]:
    """Run `action` on two stores of one file in two threads, released together."""
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def worker(i: int) -> None:
        with StateStore.open(path, clock) as mine:
            barrier.wait()
            try:
                results[i] = action(mine)
            except IllegalTransition as exc:
                results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_controllers_racing_to_launch_one_wins(store, path, clock):
    for round_ in range(10):
        job = submit(store, f"race-{round_}")
        store.transition(job, Q.PLANNED)
        won = race(path, clock, lambda s, j=job: s.transition(j, Q.LAUNCHING, expect=Q.PLANNED))
        assert sorted(won) == [False, True]
        assert [e.data["to"] for e in store.events(job)[1:]] == [Q.PLANNED, Q.LAUNCHING]


def test_two_controllers_racing_to_start_an_attempt_start_one(store, path, clock):
    for round_ in range(10):
        job = submit(store, f"race-{round_}")
        store.transition(job, Q.PLANNED)
        attempt = placed(PLACEMENT, 1.5, "spot")
        results = race(path, clock, lambda s, j=job, a=attempt: s.start_attempt(j, a))
        ids = [r for r in results if isinstance(r, str)]
        assert len(ids) == 1 and ids[0].startswith("a-") and len(ids[0]) == 14
        assert sum(isinstance(r, IllegalTransition) for r in results) == 1
        assert [a.id for a in store.attempts(job)] == ids


# --- submit and versions -----------------------------------------------------------------


def test_submit_new_then_unchanged_is_a_no_op(store, path):
    result = store.submit(job_spec("llama", "ml", queue="gpu", priority=5), "text", "d1")
    assert result.created and result.changed and result.version == 1
    assert result.job_id.startswith("j-") and len(result.job_id) == 14
    before = counts(path)
    again = store.submit(job_spec("llama", "ml", queue="gpu", priority=5), "other layout", "d1")
    assert (again.job_id, again.version, again.created, again.changed) == (result.job_id, 1, 0, 0)
    assert counts(path) == before
    job = store.job(result.job_id)
    assert (job.queue, job.priority, job.state, job.digest) == ("gpu", 5, Q.QUEUED, "d1")
    version = store.version(job.id)
    assert version.manifest_text == "text"
    assert version.spec == job_spec("llama", "ml", queue="gpu", priority=5)  # decoded as given


@pytest.mark.parametrize("start", [Q.QUEUED, Q.PLANNED])
def test_a_new_version_replaces_a_waiting_one(store, clock, start):
    job = submit(store)
    for step in path_to(start):
        store.transition(job, step)
    queued_at = store.job(job).queued_at
    clock.advance(timedelta(minutes=5))
    result = store.submit(job_spec("llama", "ml", priority=3), "v2", "d2")
    assert (result.version, result.created, result.changed) == (2, False, True)
    now = store.job(job)
    assert (now.state, now.version, now.pending_version, now.priority) == (Q.QUEUED, 2, None, 3)
    assert now.queued_at == queued_at  # a queued job keeps its place


@pytest.mark.parametrize("end", sorted(TERMINAL))
def test_a_new_version_of_a_finished_job_is_a_new_run_at_the_back(store, clock, end):
    job = submit(store)
    for step in path_to(end):
        store.transition(job, step)
    clock.advance(timedelta(hours=1))
    same = store.submit(job_spec("llama", "ml"), "v1", "d1")  # unchanged: a no-op that says so
    assert (same.job_id, same.created, same.changed, same.state) == (job, False, False, end)
    result = store.submit(job_spec("llama", "ml"), "v2", "d2")
    assert (result.created, result.run, result.version) == (True, 2, 2)
    assert store.job(job).state is end and store.job(job).version == 1  # history kept whole
    run = store.job(result.job_id)
    assert (run.state, run.version, run.run, run.queued_at) == (Q.QUEUED, 2, 2, clock.now())
    assert store.job("ml/llama").id == run.id == store.job("llama").id  # the newest run
    assert store.version(run.id).manifest_text == "v2"


def test_a_new_version_waits_for_a_live_attempt(store, clock, path):
    job, attempt = running(store)
    waits = store.submit(job_spec("llama", "ml"), "v2", "d2")
    assert (waits.version, waits.waiting, waits.state) == (2, True, Q.RUNNING)
    assert store.submit(job_spec("llama", "ml"), "v3", "d3").version == 3  # the newest waits
    assert submit(store, digest="d3") == job  # same as the waiting one: no-op
    now = store.job(job)
    assert (now.state, now.version, now.pending_version) == (Q.RUNNING, 1, 3)
    assert store.finish_attempt(attempt, "succeeded", 0, billed_hours=1, ledger_entries=[])
    now = store.job(job)
    assert (now.state, now.version, now.pending_version) == (Q.SUCCEEDED, 1, None)
    following = store.job("ml/llama")
    assert (following.run, following.state, following.version, following.digest) == (
        2,
        Q.QUEUED,
        3,
        "d3",
    )
    kinds = [(e.kind, e.data.get("to")) for e in store.events(job)[-3:]]
    assert kinds == [("transition", Q.SUCCEEDED), ("attempt_finished", None), ("version", None)]
    assert store.events(job)[-1].data["job"] == following.id
    assert store.events(following.id)[0].data["after"] == job


def test_resubmitting_the_running_version_withdraws_the_waiting_one(store):
    job, attempt = running(store)
    store.submit(job_spec("llama", "ml"), "v2", "d2")
    result = store.submit(job_spec("llama", "ml"), "v1", "d1")
    assert (result.version, result.changed) == (1, True)
    assert store.job(job).pending_version is None
    store.finish_attempt(attempt, "failed", 1)
    assert store.job(job).state is Q.FAILED


def test_cancel_drops_a_waiting_version_and_a_later_one_waits_for_the_attempt(store):
    job, attempt = running(store)
    store.submit(job_spec("llama", "ml"), "v2", "d2")
    store.transition(job, Q.CANCELLED, reason="user")
    assert store.job(job).pending_version is None
    assert store.events(job)[-1].data["dropped_version"] == 2
    # cancelled, but its instance is still being torn down: a new version waits for it
    store.submit(job_spec("llama", "ml"), "v3", "d3")
    assert (store.job(job).state, store.job(job).pending_version) == (Q.CANCELLED, 3)
    assert store.finish_attempt(attempt, "cancelled", reason="terminated")
    assert store.job(job).state is Q.CANCELLED
    following = store.job("ml/llama")
    assert (following.state, following.version, following.run) == (Q.QUEUED, 3, 2)


def test_an_interrupted_job_requeued_takes_the_waiting_version_and_keeps_its_place(store, clock):
    job, attempt = running(store)
    queued_at = store.job(job).queued_at
    clock.advance(timedelta(hours=1))
    store.submit(job_spec("llama", "ml"), "v2", "d2")
    store.finish_attempt(attempt, "interrupted", reason="spot reclaimed")
    assert (store.job(job).state, store.job(job).version) == (Q.INTERRUPTED, 1)
    store.transition(job, Q.QUEUED, reason="re-plan")
    now = store.job(job)
    assert (now.state, now.version, now.queued_at) == (Q.QUEUED, 2, queued_at)


def test_queued_is_priority_then_fifo(store, clock):
    for name, priority in [("a", 0), ("b", 5), ("c", 0), ("d", 5)]:
        submit(store, name, priority=priority)
        clock.advance(timedelta(seconds=1))
    store.transition(store.job("c").id, Q.CANCELLED)
    assert [j.name for j in store.queued()] == ["b", "d", "a"]
    store.submit(job_spec("c", "ml", priority=5), "c2", "c2")  # a new run joins the back
    assert [j.name for j in store.queued()] == ["b", "d", "c", "a"]
    assert store.queued(queue="other") == []


def test_jobs_are_found_by_id_team_name_or_unique_name(store):
    a = submit(store, "llama", team="ml")
    b = submit(store, "llama", team="vision")
    c = submit(store, "solo", team="ml")
    assert store.job(a).id == a and store.job("vision/llama").id == b and store.job("solo").id == c
    with pytest.raises(UnknownJob, match="ml/llama, vision/llama"):
        store.job("llama")
    with pytest.raises(UnknownJob):
        store.job("nope")
    assert {j.id for j in store.jobs(team="ml")} == {a, c}  # same created_at: order by id
    assert [j.id for j in store.jobs(states=[Q.QUEUED], team="vision")] == [b]


def test_a_rerun_is_a_new_run_of_the_same_version(store, clock):
    job, attempt = running(store)
    with pytest.raises(RunInFlight, match="run 1 .* is running"):
        store.rerun(job)
    store.finish_attempt(attempt, "succeeded", 0, billed_hours=1)
    clock.advance(timedelta(minutes=1))
    again = store.rerun(job)
    assert (again.created, again.run, again.version, again.state) == (True, 2, 1, Q.QUEUED)
    run = store.job(again.job_id)
    assert run.id != job and (run.team, run.name, run.digest) == ("ml", "llama", "d1")
    assert store.version(run.id).spec == store.version(job).spec
    assert store.job("ml/llama").id == run.id and store.job(job).state is Q.SUCCEEDED
    assert store.events(run.id)[0].data["rerun_of"] == job
    with pytest.raises(RunInFlight):  # one run at a time
        store.rerun(job)
    store.transition(run.id, Q.CANCELLED)
    third = store.rerun(job)  # an older run may be run again: its version, the next number
    assert (third.run, store.job(third.job_id).version) == (3, 1)
    changed = store.submit(job_spec("llama", "ml"), "v2", "d2")  # replaces the queued version
    assert (changed.job_id, changed.version, changed.created) == (third.job_id, 2, False)
    assert [j.run for j in store.jobs(team="ml")] == [1, 2, 3]
    assert store.job_names() == [("ml", "llama")]


def test_version_numbers_count_across_runs(store):
    job = submit(store)
    store.submit(job_spec("llama", "ml"), "v2", "d2")  # queued: replaces version 1
    store.transition(job, Q.CANCELLED)
    run = store.submit(job_spec("llama", "ml"), "v3", "d3")
    assert (run.run, run.version) == (2, 3)


def test_a_version_2_file_migrates_to_runs_keeping_every_row(sqlite_path, clock):
    path = sqlite_path
    with StateStore.open(path, clock) as store:
        job, attempt = running(store)
        store.finish_attempt(attempt, "succeeded", 0, billed_hours=1)
        before = counts(path)
    with sqlite3.connect(path) as conn:  # as broker wrote it before migration 3
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.executescript(
            "DELETE FROM schema_migrations WHERE version >= 3;"
            "ALTER TABLE instances DROP COLUMN members_json;"  # migration 4's
            "DROP TABLE leases;"  # migration 5's (its jobs column goes with the rebuild)
            "ALTER TABLE job_versions DROP COLUMN spec_key;"  # migration 6's
            "CREATE TABLE old_jobs AS SELECT id, team, name, queue, priority, state, version,"
            " pending_version, created_at, updated_at, queued_at FROM jobs;"
            "DROP TABLE jobs;"
            + schema.INITIAL.statements[0]
            + ";INSERT INTO jobs SELECT * FROM old_jobs; DROP TABLE old_jobs;"
        )
    with StateStore.open(path, clock) as store:
        assert counts(path) == before
        found = store.job("ml/llama")
        assert (found.id, found.run, found.state) == (job, 1, Q.SUCCEEDED)
        assert store.attempts(job)[0].id == attempt
        assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert store.rerun(job).run == 2  # (team, name) is no longer unique


# --- attempts, instances, the ledger --------------------------------------------------------


def test_attempt_lifecycle_records_placement_price_and_instance(store, clock):
    cost = CostEstimate(98.3178, 0.0, 0.0, 98.3178, 3.0, 0.0, 0.0, 0.0, 0.0, "catalog")
    placement = Placement(
        1, "aws", "us-east-1", "us-east-1a", "p5.48xlarge", "H100", 8, 1, "spot",
        32.7726, 3.0, 98.3178, cost, "aws-api", "2026-10-30",
    )  # fmt: skip
    job = submit(store)
    store.transition(job, Q.PLANNED)
    attempt_id = store.start_attempt(job, PlacedOn.of(placement))
    attempt = store.attempt(attempt_id)
    assert attempt.placed_on == PlacedOn.of(placement)  # every figure read back as planned
    assert (attempt.market, attempt.price_source, attempt.price_as_of) == (
        "spot", "aws-api", "2026-10-30",
    )  # fmt: skip
    assert (attempt.number, attempt.state, attempt.price_per_hour) == (
        1,
        AttemptState.LAUNCHING,
        Decimal("32.7726"),
    )
    assert store.job(job).state is Q.LAUNCHING
    clock.advance(timedelta(minutes=3))
    instance = {"provider_id": "i-0abc", "tags": {"broker-attempt": attempt_id}}
    assert store.attempt_running(attempt_id, instance)
    assert not store.attempt_running(attempt_id, instance)  # seen already: no-op
    assert store.job(job).state is Q.RUNNING
    (found,) = store.instances(state="running")
    assert (found.cloud, found.zone, found.instance_type, found.job_id) == (
        "aws",
        "us-east-1a",
        "p5.48xlarge",
        job,
    )
    clock.advance(timedelta(hours=1))
    gone = store.record_instance("aws", "i-0abc", "terminated")
    assert gone.terminated_at == clock.now() and gone.tags == {"broker-attempt": attempt_id}
    assert store.instances(state="running") == [] and store.instances(attempt_id=attempt_id)
    assert store.events(job)[-1].message == "instance i-0abc on aws terminated"
    with pytest.raises(UnknownAttempt):
        store.record_instance("aws", "i-x", "running", attempt_id="a-000000000000")
    unowned = store.record_instance("gcp", "us-central1-a/vm-1", "running", region="us-central1")
    assert unowned.attempt_id is None and unowned.job_id is None


def test_finish_attempt_twice_bills_once_even_from_another_controller(store, path, clock):
    job, attempt = running(store)
    clock.advance(timedelta(hours=3))
    entries = [{"kind": "compute"}, {"kind": "egress", "quantity": 50, "unit_price_usd": 0.09}]
    assert store.finish_attempt(attempt, "succeeded", 0, "done", 3, entries)
    before = counts(path)
    assert not store.finish_attempt(attempt, "succeeded", 0, "done", 3, entries)
    with StateStore.open(path, clock) as other:
        assert not other.finish_attempt(attempt, "failed", 1, "restarted", 3, entries)
    assert counts(path) == before
    compute, egress = store.ledger(job_id=job)
    assert (compute.amount_usd, compute.quantity, compute.unit) == (
        Decimal("98.3178"),
        Decimal(3),
        "hour",
    )
    assert (compute.price_source, compute.price_as_of, compute.market) == (
        "aws-api",
        "2026-10-30",
        "spot",
    )
    assert (compute.period_start, compute.period_end) == (T0, T0 + timedelta(hours=3))
    assert (egress.amount_usd, egress.unit) == (Decimal("4.5"), "GB")
    done = store.attempt(attempt)
    assert (done.state, done.exit_code, done.billed_hours) == (AttemptState.SUCCEEDED, 0, 3)
    assert store.events(job)[-1].data["charged_usd"] == "102.817800"  # all 6 places


def test_finish_attempt_with_an_illegal_job_move_writes_nothing(store, path):
    job, attempt = launched(store)
    before = counts(path)
    with pytest.raises(IllegalTransition):
        store.finish_attempt(attempt, "succeeded", 0, "", 1, [{"kind": "compute"}])
    assert counts(path) == before and store.attempt(attempt).state is AttemptState.LAUNCHING
    with pytest.raises(ValueError, match="unknown ledger entry keys"):
        store.finish_attempt(attempt, "failed", 1, "", 1, [{"kind": "compute", "amout": 3}])
    assert counts(path) == before
    # a capacity failure at launch: the attempt failed, the job goes back to the queue
    assert store.finish_attempt(attempt, "failed", None, "no capacity", 0, [], job_to=Q.QUEUED)
    assert store.job(job).state is Q.QUEUED and store.attempt(attempt).reason == "no capacity"


def test_a_cancelled_job_keeps_its_state_while_its_attempt_is_billed(store):
    job, attempt = running(store)
    store.transition(job, Q.CANCELLED, reason="user")
    assert store.finish_attempt(
        attempt, "cancelled", None, "terminated", 0.5, [{"kind": "compute"}]
    )
    assert store.job(job).state is Q.CANCELLED
    assert store.ledger(job_id=job)[0].amount_usd == Decimal("16.3863")


def test_ledger_filters_by_period_and_team(store, clock):
    for name, team in [("a", "ml"), ("b", "vision"), ("c", "ml")]:
        job = submit(store, name, team=team)
        store.transition(job, Q.PLANNED)
        attempt = store.start_attempt(job, placed(PLACEMENT, "2.5", "on-demand"))
        clock.advance(timedelta(days=20))
        store.finish_attempt(attempt, "failed", 1, "", 0, [{"kind": "onprem", "quantity": 2}])
    november = store.ledger(since=T0, until=datetime(2026, 12, 1, tzinfo=UTC))
    assert [(e.team, e.amount_usd) for e in november] == [("ml", Decimal(5))]
    assert [e.team for e in store.ledger(team="ml")] == ["ml", "ml"]
    assert len(store.ledger(since=datetime(2026, 12, 1, tzinfo=UTC))) == 2


def test_money_is_exact(store):
    job, attempt = running(store, price=32.7726)
    store.finish_attempt(attempt, "succeeded", 0, "", 3, [{"kind": "compute"}])
    (entry,) = store.ledger(job_id=job)
    assert entry.amount_usd == Decimal("98.3178") and str(entry.amount_usd) == "98.317800"
    assert query(store.path, "SELECT amount_usd FROM ledger") == [("98.317800",)]
    assert 32.7726 * 3 != 98.3178  # what a REAL column would have stored


AMOUNTS = st.decimals(min_value=0, max_value=10**6, places=6) | st.floats(0, 1e6)
EXACT = Context(prec=100)


def as_decimal(value: Decimal | float) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(price=AMOUNTS, hours=AMOUNTS, gb=AMOUNTS)
def test_money_round_trips_exactly(shared, price, hours, gb):
    job, attempt = running(shared, f"money-{uuid.uuid4().hex}", price=price)
    egress = {"kind": "egress", "quantity": gb, "unit_price_usd": "0.02"}
    shared.finish_attempt(attempt, "succeeded", 0, "", hours, [{"kind": "compute"}, egress])
    compute, transfer = shared.ledger(job_id=job)
    assert shared.attempt(attempt).price_per_hour == as_decimal(price)
    assert compute.unit_price_usd == as_decimal(price)
    # billed time in whole seconds, each amount rounded once to 1e-6 USD (half to even)
    # (a started second counts whole; float noise under 10 ms is no started second)
    centis = (as_decimal(hours) * 3600).quantize(Decimal("0.01"), ROUND_HALF_EVEN)
    seconds = centis.to_integral_value(ROUND_CEILING)
    billed = EXACT.divide(seconds, Decimal(3600)).quantize(Decimal("1e-6"), ROUND_HALF_EVEN)
    assert shared.attempt(attempt).billed_hours == billed == compute.quantity
    assert EXACT.multiply(billed, Decimal(3600)).to_integral_value(ROUND_HALF_EVEN) == seconds
    product = EXACT.multiply(as_decimal(price), billed)
    assert compute.amount_usd == product.quantize(Decimal("1e-6"), ROUND_HALF_EVEN)
    transfer_exact = EXACT.multiply(as_decimal(gb), Decimal("0.02"))
    assert transfer.amount_usd == transfer_exact.quantize(Decimal("1e-6"), ROUND_HALF_EVEN)
    assert abs(transfer.amount_usd - transfer_exact) <= Decimal("5e-7")


# --- crashes -------------------------------------------------------------------------------


def test_an_error_inside_a_transaction_leaves_no_partial_rows(store, path, monkeypatch):
    job, attempt = running(store)
    before = counts(path)
    real = store_module._insert_event

    def failing(conn, job_id, attempt_id, now, kind, message, data):
        real(conn, job_id, attempt_id, now, kind, message, data)
        if kind in ("attempt_finished", "submitted"):  # after the other rows are written
            raise RuntimeError("crash")

    monkeypatch.setattr(store_module, "_insert_event", failing)
    with pytest.raises(RuntimeError):
        store.finish_attempt(attempt, "succeeded", 0, "", 3, [{"kind": "compute"}])
    with pytest.raises(RuntimeError):
        store.submit(job_spec("other-job", "ml"), "v1", "d1")
    assert counts(path) == before
    assert (store.job(job).state, store.attempt(attempt).state) == (Q.RUNNING, "running")
    monkeypatch.undo()
    assert store.finish_attempt(attempt, "succeeded", 0, "", 3, [{"kind": "compute"}])
    assert len(store.ledger(job_id=job)) == 1


CHILD = """
import sys
from datetime import UTC, datetime
from broker.clock import FixedClock
from broker.state import StateStore
from broker.state import store as store_module
from broker.state.placed import PlacedOn

real = store_module._insert_event

def hold(conn, job_id, attempt_id, now, kind, message, data):
    real(conn, job_id, attempt_id, now, kind, message, data)
    if kind == "attempt_finished":  # every row of the finish is written, not committed
        print("inside", flush=True)
        sys.stdin.read()  # hold the transaction open until killed

store_module._insert_event = hold
store = StateStore.open(sys.argv[1], FixedClock(datetime(2026, 11, 1, 3, tzinfo=UTC)))
store.finish_attempt(sys.argv[2], "succeeded", 0, "", 3, [{"kind": "compute"}])
print("committed", flush=True)
"""


def test_a_process_killed_mid_transaction_leaves_nothing_and_no_lock(store, path, clock):
    job, attempt = running(store)
    before = counts(path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), attempt],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "inside\n"
        assert store.job(job).state is Q.RUNNING  # readers see the last commit meanwhile
        error, says = lock_timeout(path)
        with StateStore.open(path, clock, busy_timeout=0) as impatient:
            with pytest.raises(error, match=says):
                impatient.transition(job, Q.CANCELLED)  # the killed writer holds the lock
    finally:
        child.kill()
        child.communicate()
    assert child.returncode != 0
    assert counts(path) == before
    assert store.attempt(attempt).state is AttemptState.RUNNING
    assert store.finish_attempt(attempt, "succeeded", 0, "", 3, [{"kind": "compute"}])
    assert [e.amount_usd for e in store.ledger(job_id=job)] == [Decimal("98.3178")]


def test_a_gangs_nodes_are_kept_with_its_instance_and_updated(store, path, clock):
    from providers.gang import GangMember

    job, attempt = launched(store, "gang")
    members = tuple(GangMember(r, f"node-{r}", "z-1", f"10.0.0.{r + 1}", "running") for r in (0, 1))
    store.attempt_running(attempt, {"provider_id": "g-1", "members": members})
    (row,) = store.instances(attempt_id=attempt)
    assert row.members == members
    ended = (
        replace(members[0], state="succeeded", exit_code=0),
        replace(members[1], state="failed", exit_code=3),
    )
    store.record_instance(row.cloud, "g-1", "running", members=ended)
    with StateStore.open(path, clock) as again:
        assert again.instances(attempt_id=attempt)[0].members == ended
    store.record_instance(row.cloud, "g-1", "terminated")  # members not given: kept
    assert store.instances(attempt_id=attempt)[0].members == ended
