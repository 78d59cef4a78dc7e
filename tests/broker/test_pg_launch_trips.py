"""Round trips of one launch's writes on a real PostgreSQL (issue 20: a launching pass at
10,000 queued jobs within 1 s): the plan, the start and the "running" of one job, as a
controller writes them (a lease holder, a team with a quota and a budget), each write's
waits for the server counted (`StateStore.round_trips`). Before a write kept the rows it
had locked (broker.state.held) the three took 5 + 7 + 8 = 20 (now 2 + 5 + 4); the
bounds below fail that. And what a write keeps never outlives it: another controller's
change between two writes is seen, and a write undone leaves nothing kept behind."""

from __future__ import annotations

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


def test_a_launch_takes_fewer_round_trips_than_before(postgres_cluster) -> None:
    with StateStore.open(postgres_cluster.fresh_database(), FixedClock(T0)) as store:
        store.hold_as(Holder("controller-a", 30))
        job = store.submit(job_spec("trips", "ml"), "x", "d").job_id
        planned, plan = _trips(
            store, lambda: store.transition(job, JobState.PLANNED, "p", expect=JobState.QUEUED)
        )
        attempt, start = _trips(store, lambda: store.start_attempt(job, PLACED, LIMITS))
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
    assert plan <= 2 and start <= 5 and running <= 4, (plan, start, running)
    assert plan + start + running <= 11 < 20, (plan, start, running)


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
        assert store._rows is None
        assert store.job(job).state is JobState.QUEUED
        assert store.transition(job, JobState.PLANNED, "again", expect=JobState.QUEUED)
