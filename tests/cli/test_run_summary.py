"""`broker run`'s closing line counts what this run ended, not what another controller
on the same queue ended meanwhile (issue 20): the jobs its store moved to a final state
and the attempts it closed, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from broker.cli.run_summary import run_summary
from broker.clock import FixedClock
from broker.state import JobState, StateStore
from tests.fakes.specs import job_spec, placed

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
PLACEMENT = {"cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "instance_type": "p5"}


def running(store: StateStore, name: str) -> tuple[str, str]:
    """A job of `name` submitted and running on one attempt: (job id, attempt id)."""
    job = store.submit(job_spec(name, team="ml"), f"name: {name}\n", name).job_id
    store.transition(job, JobState.PLANNED)
    attempt = store.start_attempt(job, placed(PLACEMENT, "0.9", "spot", "aws-api", "2026-10-30"))
    assert store.attempt_running(attempt, {"provider_id": f"i-{name}"})
    return job, attempt


def test_each_controller_sums_only_what_it_ended(state_location: Path | str):
    clock = FixedClock(T0)
    with (
        StateStore.open(state_location, clock) as ours,
        StateStore.open(state_location, clock) as theirs,
        StateStore.open(state_location, clock) as user,
    ):
        since = clock.now()
        clock.advance(timedelta(minutes=5))
        _, mine = running(ours, "mine")
        _, other = running(theirs, "other")
        cancelled, stopped = running(ours, "cancelled")
        _, open_ = running(ours, "still-open")
        clock.advance(timedelta(hours=1))
        ours.finish_attempt(mine, "succeeded", 0, billed_hours=1)
        theirs.finish_attempt(other, "failed", 3, billed_hours=1)
        assert user.transition(cancelled, JobState.CANCELLED, "user cancel")  # another process
        ours.finish_attempt(stopped, "cancelled", billed_hours=1)  # ... whose attempt we close
        assert not ours.transition(cancelled, JobState.QUEUED, expect=JobState.RUNNING)

        line = run_summary(ours, since, still=1)
        assert line.startswith("broker run: 2 job(s) finished (1 cancelled, 1 succeeded); ")
        assert "2 attempt(s) ended" in line and "; 1 still queued or running" in line
        assert ours.ended_here().attempts == {mine, stopped}
        assert open_ not in ours.ended_here().attempts

        theirs_line = run_summary(theirs, since, still=1)
        assert theirs_line.startswith("broker run: 1 job(s) finished (1 failed); 1 attempt(s)")
        assert user.ended_here().jobs == {cancelled} and not user.ended_here().attempts
