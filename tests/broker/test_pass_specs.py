"""The specs a controller pass reads in one query (broker.controller.specs): each is the
spec the store gives back for the job alone, jobs that differ only in name and team share
one `spec_key` and one decode, and rows written before spec keys are decoded whole; on
SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.controller.specs import Specs
from broker.spec_codec import PARTS, encode, spec_key
from broker.state import JobState, StateStore
from tests.fakes.specs import job_spec
from tests.state_backends import execute, query

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _store(location: Any) -> StateStore:
    store = StateStore.open(location, FixedClock(T0))
    for n in range(6):
        spec = job_spec(f"job-{n}", team=f"team-{n % 2}", clouds=("aws",) if n < 4 else ("gcp",))
        store.submit(spec, f"name: job-{n}\n", f"d{n}")
    return store


def _loaded(store: StateStore) -> tuple[Specs, list[list[tuple[str, int]]]]:
    """Specs of the queue loaded in one go, and the versions whose text it asked for."""
    asked: list[list[tuple[str, int]]] = []
    texts = store.spec_texts

    def spy(versions):
        asked.append(sorted(versions))
        return texts(asked[-1])

    store.spec_texts = spy  # type: ignore[method-assign]
    specs = Specs()
    specs.load(store, store.queued(), (JobState.QUEUED,))
    return specs, asked


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1)


@given(name=names, team=names)
def test_a_spec_key_leaves_out_only_the_name_and_team(name: str, team: str) -> None:
    assert spec_key(encode(job_spec(name, team))) == spec_key(encode(job_spec("a", "b")))
    assert spec_key(encode(job_spec(name, team, priority=1))) != spec_key(encode(job_spec()))
    assert spec_key(encode(job_spec(name, team, clouds=("aws",)))) != spec_key(
        encode(job_spec(name, team))
    )


def test_specs_read_together_are_those_read_alone(state_location: Path) -> None:
    with _store(state_location) as store:
        specs, _ = _loaded(store)
        for job in store.queued():
            alone = store.version(job.id, job.version)
            assert specs.get(store, job) == alone.spec
            assert (specs.get(store, job).name, specs.get(store, job).team) == (job.name, job.team)
            assert specs.submitted_at(store, job.id, job.version) == alone.submitted_at


def test_one_text_is_read_and_decoded_per_spec_key(state_location: Path) -> None:
    with _store(state_location) as store:
        specs, asked = _loaded(store)
        assert len(asked) == 1 and len(asked[0]) == 2  # aws jobs, gcp jobs: two keys
        by_name = {job.name: specs.get(store, job) for job in store.queued()}
        first, same, other = by_name["job-0"], by_name["job-3"], by_name["job-5"]
        assert all(getattr(first, part) is getattr(same, part) for part in PARTS)
        assert first.requirements is not other.requirements  # aws, not gcp
        assert first.requirements != other.requirements
        store.submit(job_spec("job-6", clouds=("aws",)), "name: job-6\n", "d6")
        specs.load(store, store.queued(), (JobState.QUEUED,))  # a known key: no text read
        assert len(asked) == 1
        job = next(job for job in store.queued() if job.name == "job-6")
        assert specs.get(store, job) == store.version(job.id, job.version).spec


def test_versions_written_before_spec_keys_are_decoded_whole(state_location: Path) -> None:
    with _store(state_location) as store:
        old = [job for job in store.queued() if job.name in ("job-1", "job-4")]
        for job in old:  # as a broker before schema version 6 wrote them
            sql = "UPDATE job_versions SET spec_key = NULL WHERE job_id = ?"
            execute(state_location, sql, (job.id,))
        specs, asked = _loaded(store)
        assert {job_id for job_id, _ in asked[0]} >= {job.id for job in old}
        for job in store.queued():
            assert specs.get(store, job) == store.version(job.id, job.version).spec


def test_a_new_run_keeps_its_versions_spec_key(state_location: Path) -> None:
    with _store(state_location) as store:
        job = store.queued()[0]
        store.transition(job.id, JobState.CANCELLED, "done with it")
        again = store.rerun(job.id)
        sql = "SELECT spec_key FROM job_versions WHERE job_id = ?"
        (before,), (after,) = (
            query(state_location, sql, (job.id,)),
            query(state_location, sql, (again.job_id,)),
        )
        assert before == after == (spec_key(encode(store.version(job.id).spec)),)
        assert _spec_loaded(store, again.job_id) == store.version(job.id).spec


def _spec_loaded(store: StateStore, job_id: str) -> Any:
    specs = Specs()
    specs.load(store, store.queued(), (JobState.QUEUED,))
    return specs.get(store, store.job(job_id))


def test_a_job_not_loaded_is_read_alone(tmp_path: Path) -> None:
    with _store(tmp_path / "state.db") as store:
        job = store.queued()[0]
        assert Specs().get(store, job) == store.version(job.id, job.version).spec
        assert Specs().submitted_at(store, job.id, job.version) == T0
