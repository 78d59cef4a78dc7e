"""Leases on one state file shared by several stores (as several controllers hold it):
a job's next step has one holder at a time, taken by compare-and-set in the write that
changes the job, renewed by the heartbeat, released at rest, taken over once expired;
and a team's quota and budget checked inside `start_attempt` against every controller's
attempts and the shared ledger."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.state import JobState, StateStore
from broker.state.leases import Holder, LeaseHeld, claim_sql, holder_gone
from broker.state.limits import TeamLimitReached, TeamLimits
from broker.state.placed import PlacedOn
from tests.fakes.specs import job_spec

T0 = datetime(2026, 11, 3, tzinfo=UTC)
MONTH = datetime(2026, 11, 1, tzinfo=UTC)
Q = JobState


def on(gpus: float = 1.0, expected: float = 0.5) -> PlacedOn:
    return PlacedOn(
        cloud="aws", region="us-east-1", instance_type="g5", accelerator="A10G",
        accelerator_count=gpus, price_per_hour=Decimal("1.0"), expected_cost=expected,
    )  # fmt: skip


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def pair(tmp_path, clock) -> Iterator[tuple[StateStore, StateStore]]:
    """Two controllers' stores on one file, A and B, leases of 30 s."""
    path = tmp_path / "state.db"
    with StateStore.open(path, clock) as a, StateStore.open(path, clock) as b:
        a.hold_as(Holder("A", 30))
        b.hold_as(Holder("B", 30))
        yield a, b


def submit(store: StateStore, name: str, team: str = "ml") -> str:
    return store.submit(job_spec(name, team=team), f"name: {name}\n", name, "alice").job_id


def test_a_planned_job_is_the_planners_until_its_lease_expires(pair, clock):
    a, b = pair
    job = submit(a, "one")
    assert a.transition(job, Q.PLANNED, expect=Q.QUEUED)
    # B's recovery pass, its launch, and a claim all lose while A's lease is live.
    assert not b.transition(job, Q.QUEUED, "re-queued", expect=Q.PLANNED)
    with pytest.raises(LeaseHeld, match="held by A"):
        b.start_attempt(job, on())
    assert not b.claim(job, "launch")
    attempt = a.start_attempt(job, on())
    clock.advance(timedelta(seconds=31))  # A died mid-launch: its lease has expired
    assert b.claim(job, "launch")
    (taken,) = [e for e in b.events(job) if e.kind == "lease_taken_over"]
    assert taken.data["from"] == "A" and taken.data["to"] == "B"
    with pytest.raises(LeaseHeld, match="held by B"):  # A, back, is fenced off
        a.attempt_running(attempt, {"provider_id": "i-1"})
    assert b.attempt_running(attempt, {"provider_id": "i-1"})
    assert b.job(job).state is Q.RUNNING and b.leases() == []  # at rest: released


def test_a_heartbeat_that_holds_no_lease_writes_nothing(pair, clock):
    """Between steps a controller holds no lease: its heartbeat reads that and begins
    no write transaction (which would wait for another controller's write lock)."""
    a, b = pair
    job = submit(a, "one")
    assert b.transition(job, Q.PLANNED, expect=Q.QUEUED)  # B holds the job, A nothing
    began = []
    a._conn.set_trace_callback(began.append)
    assert a.heartbeat() == 0
    a._conn.set_trace_callback(None)
    assert not any(sql.lstrip().upper().startswith(("BEGIN", "UPDATE")) for sql in began)
    assert b.heartbeat() == 1 and [lease.holder for lease in a.leases()] == ["B"]


def test_the_heartbeat_keeps_a_long_step_and_its_absence_frees_it(pair, clock):
    a, b = pair
    job = submit(a, "one")
    assert a.transition(job, Q.PLANNED, expect=Q.QUEUED)
    clock.advance(timedelta(seconds=20))
    assert a.heartbeat() == 1
    clock.advance(timedelta(seconds=20))  # 40 s after the claim, 20 s after the heartbeat
    assert not b.claim(job, "launch")
    (lease,) = a.leases()
    assert (lease.holder, lease.expires_at) == ("A", T0 + timedelta(seconds=50))
    clock.advance(timedelta(seconds=11))
    assert b.claim(job, "launch")
    assert [lease.holder for lease in b.leases()] == ["B"]


def test_a_cancel_is_never_blocked_and_a_store_without_holder_takes_no_lease(pair, clock, tmp_path):
    a, _ = pair
    job = submit(a, "one")
    assert a.transition(job, Q.PLANNED, expect=Q.QUEUED)
    with StateStore.open(tmp_path / "state.db", clock) as user:  # a single user's command
        assert user.holder is None
        assert user.transition(job, Q.CANCELLED, "cancelled by bob")
        other = submit(user, "two")
        assert user.transition(other, Q.PLANNED)
        assert [lease.job_id for lease in user.leases()] == [job]  # A's, still: not ours
    assert a.job(job).state is Q.CANCELLED


def test_the_lease_of_a_controller_process_that_exited_is_taken_over_at_once(pair, clock):
    import socket

    a, b = pair
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead = f"controller@{socket.gethostname()}:{done.stdout.strip()}:abc123"
    assert holder_gone(dead) and not holder_gone(Holder.new().id) and not holder_gone("A")
    job = submit(a, "one")
    a.hold_as(Holder(dead, 3600))
    assert a.transition(job, Q.PLANNED, expect=Q.QUEUED)
    assert b.claim(job, "launch")  # no hour's wait: its holder is gone
    (taken,) = [e for e in b.events(job) if e.kind == "lease_taken_over"]
    assert taken.data["holder_exited"] is True


def test_the_claim_query_skips_locked_rows_on_postgresql():
    assert claim_sql("postgresql").endswith("FOR UPDATE OF j SKIP LOCKED")
    assert "FOR UPDATE" not in claim_sql("sqlite")


HOLDERS = ("A", "B", "C")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(HOLDERS),
            st.sampled_from(("claim", "beat", "release")),
            st.integers(0, 40),
        ),  # fmt: skip
        min_size=1,
        max_size=25,
    )
)
def test_at_most_one_live_holder_whatever_the_order(tmp_path_factory, steps):
    clock = FixedClock(T0)
    path = tmp_path_factory.mktemp("leases") / "state.db"
    stores = {name: StateStore.open(path, clock) for name in HOLDERS}
    try:
        for name, store in stores.items():
            store.hold_as(Holder(name, 30))
        job = submit(stores["A"], "one")
        live: dict[str, datetime] = {}  # the model: holder -> expiry
        for name, action, wait in steps:
            clock.advance(timedelta(seconds=wait))
            now = clock.now()
            others = [h for h, until in live.items() if h != name and until > now]
            if action == "claim":
                assert stores[name].claim(job, "step") == (not others)
                if not others:
                    live = {name: now + timedelta(seconds=30)}
            elif action == "beat":
                stores[name].heartbeat()
                if name in live:
                    live[name] = now + timedelta(seconds=30)
            else:
                stores[name].release(job)
                live.pop(name, None)
            stored = {lease.holder: lease.expires_at for lease in stores[name].leases()}
            assert stored == live
    finally:
        for store in stores.values():
            store.close()


# --- a team's limits, checked in the claiming transaction ------------------------------


def planned(store: StateStore, name: str, team: str = "capped") -> str:
    job = submit(store, name, team)
    assert store.transition(job, Q.PLANNED, expect=Q.QUEUED)
    return job


def test_two_controllers_cannot_both_take_a_teams_last_gpu(pair):
    a, b = pair
    limits = TeamLimits("capped", MONTH, max_gpus=2)
    first, second = planned(a, "one"), planned(b, "two")
    a.start_attempt(first, on(gpus=2), limits)  # A's pass saw room; so did B's
    before = len(b.attempts())
    with pytest.raises(TeamLimitReached, match="2/2 GPUs") as refused:
        b.start_attempt(second, on(gpus=1), limits)
    assert refused.value.category == "quota"
    assert len(b.attempts()) == before and b.job(second).state is Q.PLANNED  # nothing written
    other = planned(b, "free", team="free")  # another team's job is not held
    b.start_attempt(other, on(gpus=8), limits=TeamLimits("free", MONTH))


def test_a_budget_counts_the_shared_ledger_and_every_controllers_open_attempts(pair):
    a, b = pair
    cap = TeamLimits("capped", MONTH, monthly_budget=1.0)
    done = planned(a, "billed")
    attempt = a.start_attempt(done, on(expected=0.1), cap)
    a.attempt_running(attempt, {"provider_id": "i-1"})
    entry = {"kind": "compute", "amount_usd": "0.45", "quantity": "0.45", "unit": "hour",
             "unit_price_usd": "1.0"}  # fmt: skip
    assert a.finish_attempt(attempt, "succeeded", 0, billed_hours="0.45", ledger_entries=[entry])
    running = planned(a, "running")
    a.start_attempt(running, on(expected=0.4), cap)  # 0.45 billed + 0.4 committed
    late = planned(b, "late")
    with pytest.raises(TeamLimitReached, match=r"\$0\.45 billed and \$0\.40 committed"):
        b.start_attempt(late, on(expected=0.2), cap)
    assert b.job(late).state is Q.PLANNED and b.attempts(late) == []
    # A job of what is left fits; one the projection knows to burn past its plan does not.
    small = planned(b, "small")
    b.start_attempt(small, on(expected=0.15), cap)
    over = TeamLimits("capped", MONTH, monthly_budget=1.0, committed={running: 0.5})
    with pytest.raises(TeamLimitReached, match=r"\$0\.65 committed"):
        b.start_attempt(late, on(expected=0.01), over)


class _RivalClosesAfterEachRead:
    """A's store, with B closing the attempt (when B can take its lease) right after each
    read A makes of it: the worst moment for a check made before a claim."""

    def __init__(self, mine: StateStore, rival: StateStore, job: str) -> None:
        self.mine, self.rival, self.job = mine, rival, job

    def claim(self, job_id: str, step: str) -> bool:
        return self.mine.claim(job_id, step)

    def release(self, job_id: str) -> None:
        self.mine.release(job_id)

    def attempt(self, attempt_id: str):
        found = self.mine.attempt(attempt_id)
        if self.rival.claim(self.job, "finish"):
            self.rival.finish_attempt(attempt_id, "succeeded", 0, job_to=Q.SUCCEEDED)
        return found


@pytest.mark.parametrize("step", ["launch", "finish"])
def test_a_step_is_never_claimed_on_an_attempt_another_controller_closed(pair, step):
    """A pass reads the open attempts once; another controller may close one before this
    one claims its next step. Whatever the interleaving, this controller never ends up
    holding a lease on a closed attempt (a lease left on a finished job)."""
    from types import SimpleNamespace

    from broker.controller.observing import Observing

    a, b = pair
    job = submit(a, "one")
    assert a.transition(job, Q.PLANNED, expect=Q.QUEUED)
    attempt_id = a.start_attempt(job, on())
    assert a.attempt_running(attempt_id, {"provider_id": "i-1"})
    seen = a.attempt(attempt_id)  # what A's pass read: open
    racing = SimpleNamespace(store=_RivalClosesAfterEachRead(a, b, job))
    claimed = Observing._claimed_open(racing, a.job(job), seen, step)
    closed = a.attempt(attempt_id).ended_at is not None
    held_by_a = [lease.job_id for lease in a.leases() if lease.holder == "A"]
    assert not (closed and held_by_a), "a lease left on a closed attempt"
    assert claimed == (not closed) and bool(held_by_a) == claimed
    if claimed:  # B closes it once A is done; a later claim of A's is then given back
        a.release(job)
        assert b.claim(job, "finish")
        assert b.finish_attempt(attempt_id, "succeeded", 0, job_to=Q.SUCCEEDED)
    assert not Observing._claimed_open(SimpleNamespace(store=a), a.job(job), seen, step)
    assert a.leases() == [] and a.job(job).state is Q.SUCCEEDED
