"""Round trips of one launch's writes on a real PostgreSQL (issue 20: a launching pass at
10,000 queued jobs within 1 s): the plan, the start and the "running" of one job, as a
controller writes them (a lease holder; a team with a quota and a budget, or none), each write's
waits for the server counted (`StateStore.round_trips`). Before a write kept the rows it
had locked (broker.state.held) the three took 5 + 7 + 8 = 20, then 3 + 6 + 5 = 14; since
a write that claims a job reads its lease and counts in the round trip that locks it (and
the "running" write its instance row there too), 2 + 5 + 3 = 10, or 2 + 3 + 3 = 8 for a
team with no quota or budget to check; the bounds below fail each earlier count. And what
a write keeps never outlives it: another controller's change between two writes is seen, a
lease another controller took while this one waited for the job's row lock is seen, and a
write undone leaves nothing kept behind."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from broker.clock import FixedClock
from broker.state import JobState, StateStore
from broker.state.leases import Holder, LeaseHeld
from broker.state.limits import TeamLimits
from broker.state.placed import PlacedOn
from tests.fakes.specs import job_spec
from tests.waiting import wait_until

T0 = datetime(2026, 12, 1, tzinfo=UTC)
PLACED = PlacedOn(
    cloud="gcp", region="us-central1", zone="us-central1-a", instance_type="g2",
    accelerator="L4", accelerator_count=1, market="spot", price_per_hour=Decimal("0.7"),
    expected_hours=1.0, expected_cost=0.7,
)  # fmt: skip
LIMITS = TeamLimits(
    team="ml", month_start=datetime(2026, 12, 1, tzinfo=UTC), max_gpus=8,
    max_gpus_by_model={}, monthly_budget=100.0, committed={},
)  # fmt: skip


def _trips(store: StateStore, write: Callable[[], Any]) -> tuple[Any, int]:
    before = store.round_trips or 0
    result = write()
    return result, (store.round_trips or 0) - before


@pytest.mark.parametrize(
    "limits, most", [(LIMITS, (2, 5, 3)), (None, (2, 3, 3))], ids=["quota", "no quota"]
)
def test_a_launch_takes_fewer_round_trips_than_before(
    postgres_cluster, limits: TeamLimits | None, most: tuple[int, int, int]
) -> None:
    with StateStore.open(postgres_cluster.fresh_database(), FixedClock(T0)) as store:
        store.hold_as(Holder("controller-a", 30))
        job = store.submit(job_spec("trips", "ml"), "x", "d").job_id
        planned, plan = _trips(
            store, lambda: store.transition(job, JobState.PLANNED, "p", expect=JobState.QUEUED)
        )
        attempt, start = _trips(store, lambda: store.start_attempt(job, PLACED, limits))
        up, running = _trips(store, lambda: store.attempt_running(attempt, {"provider_id": "i-1"}))
        assert planned and up
        assert store.job(job).state is JobState.RUNNING
        assert store.attempt(attempt).state == "running"
        assert [lease.job_id for lease in store.leases()] == []  # at rest: released
        kinds = [event.kind for event in store.events(job)]
        assert kinds[-5:] == [
            "transition",
            "transition",
            "instance",
            "transition",
            "attempt_running",
        ]
    assert plan <= most[0] and start <= most[1] and running <= most[2], (plan, start, running)
    assert plan + start + running <= sum(most) < 14, (plan, start, running)


def test_what_a_write_kept_is_read_again_by_the_next(postgres_cluster) -> None:
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as a, StateStore.open(url, FixedClock(T0)) as b:
        a.hold_as(Holder("controller-a", 30))
        b.hold_as(Holder("controller-b", 30))
        job = a.submit(job_spec("kept", "ml"), "x", "d").job_id
        assert a.transition(job, JobState.PLANNED, "a plans", expect=JobState.QUEUED)
        with pytest.raises(LeaseHeld):  # A's lease, read with the row B locked
            b.transition(job, JobState.QUEUED, "b")
        assert a.transition(job, JobState.QUEUED, "a gives it back", expect=JobState.PLANNED)
        assert b.transition(job, JobState.PLANNED, "b plans", expect=JobState.QUEUED)
        assert not a.transition(job, JobState.PLANNED, "stale", expect=JobState.QUEUED)
        with pytest.raises(LeaseHeld):
            a.start_attempt(job, PLACED)
        assert b.start_attempt(job, PLACED)
        assert a.job(job).state is JobState.LAUNCHING


def test_a_write_undone_keeps_nothing(postgres_cluster) -> None:
    with StateStore.open(postgres_cluster.fresh_database(), FixedClock(T0)) as store:
        store.hold_as(Holder("controller-a", 30))
        job = store.submit(job_spec("undone", "ml"), "x", "d").job_id
        with pytest.raises(RuntimeError), store._write() as now:
            store._job_row(job)
            store._set(job, now, state=JobState.PLANNED)
            assert store._held("jobs", job)["state"] is JobState.PLANNED
            raise RuntimeError("undone")
        assert store._held_rows is None
        assert store.job(job).state is JobState.QUEUED
        assert store.transition(job, JobState.PLANNED, "again", expect=JobState.QUEUED)


def _waits_for_a_lock(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return conn.execute(sql).fetchone()[0] > 0


def test_a_lease_taken_while_a_write_waited_for_the_row_is_seen(postgres_cluster) -> None:
    """B's transition waits for the job's row, which A has locked; A claims the job and
    commits; B, reading the lease after the lock is its own, finds A's and is refused."""
    url = postgres_cluster.fresh_database()
    with StateStore.open(url, FixedClock(T0)) as a, StateStore.open(url, FixedClock(T0)) as b:
        a.hold_as(Holder("controller-a", 30))
        b.hold_as(Holder("controller-b", 30))
        job = a.submit(job_spec("raced", "ml"), "x", "d").job_id
        outcome: list[BaseException | bool] = []

        def b_plans() -> None:
            try:
                outcome.append(b.transition(job, JobState.PLANNED, "b"))
            except LeaseHeld as exc:
                outcome.append(exc)

        with a._write() as now:
            a._job_row(job)  # A holds the row: B's read waits for it
            waiter = threading.Thread(target=b_plans)
            waiter.start()
            assert wait_until(lambda: _waits_for_a_lock(url), timeout=30)
            a._claim(job, now, "launch")
            a._set(job, now, state=JobState.PLANNED)
        waiter.join(timeout=60)
        assert len(outcome) == 1 and isinstance(outcome[0], LeaseHeld), outcome
        assert b.job(job).state is JobState.PLANNED
        assert [lease.holder for lease in b.leases()] == ["controller-a"]
