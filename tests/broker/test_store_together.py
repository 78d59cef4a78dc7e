"""Several writes in one transaction (`StateStore.together`): one commit, nothing seen by
another reader before it, and the store left as separate transactions would leave it
(a write that raises undone alone, the others kept even when the block raises)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from broker.clock import FixedClock
from broker.state import IllegalTransition, JobState, StateStore
from tests.fakes.specs import job_spec

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _store(tmp_path: Path) -> tuple[StateStore, list[str]]:
    store = StateStore.open(tmp_path / "state.db", FixedClock(T0))
    for n in range(2):
        store.submit(job_spec(f"job-{n}"), f"name: job-{n}\n", f"d{n}")
    return store, [job.id for job in store.jobs()]


def _commits(store: StateStore) -> list[str]:
    seen: list[str] = []
    store._conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None
    )
    return seen


def test_writes_together_commit_once_and_are_seen_only_then(tmp_path: Path) -> None:
    store, (first, second) = _store(tmp_path)
    commits = _commits(store)
    with StateStore.open(tmp_path / "state.db", FixedClock(T0), read_only=True) as reader:
        with store.together():
            assert store.transition(first, JobState.PLANNED, "one", expect=JobState.QUEUED)
            assert store.transition(second, JobState.PLANNED, "two", expect=JobState.QUEUED)
            assert reader.job(first).state is JobState.QUEUED  # not committed yet
            assert store.job(first).state is JobState.PLANNED  # the writer sees its own
        assert reader.job(first).state is reader.job(second).state is JobState.PLANNED
    assert len(commits) == 1
    with store.together():  # nothing written: no transaction, no commit
        assert not store._conn.in_transaction
    assert len(commits) == 1
    store.close()


def test_a_write_that_raises_inside_is_undone_alone(tmp_path: Path) -> None:
    store, (first, second) = _store(tmp_path)
    events_before = len(store.events(second))
    with store.together():
        assert store.transition(first, JobState.PLANNED, "kept", expect=JobState.QUEUED)
        with pytest.raises(IllegalTransition):
            store.transition(second, JobState.SUCCEEDED, "never")  # queued cannot succeed
        assert not store.transition(second, JobState.PLANNED, "no", expect=JobState.RUNNING)
    assert store.job(first).state is JobState.PLANNED
    assert store.job(second).state is JobState.QUEUED
    assert len(store.events(second)) == events_before
    store.close()


def test_what_was_written_before_the_block_raised_is_kept(tmp_path: Path) -> None:
    store, (first, second) = _store(tmp_path)
    with pytest.raises(RuntimeError), store.together():
        store.transition(first, JobState.PLANNED, "kept", expect=JobState.QUEUED)
        raise RuntimeError("the caller's own error")
    assert not store._conn.in_transaction
    assert store.job(first).state is JobState.PLANNED
    assert store.job(second).state is JobState.QUEUED
    assert store.transition(second, JobState.PLANNED, "a write after", expect=JobState.QUEUED)
    store.close()
