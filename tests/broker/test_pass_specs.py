"""The specs a controller pass reads in one query (broker.controller.specs): each is the
spec the store gives back for the job alone, and jobs from one template share their
decoded parts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from broker.clock import FixedClock
from broker.controller.specs import Specs
from broker.spec_codec import PARTS
from broker.state import JobState, StateStore
from tests.fakes.specs import job_spec

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _store(tmp_path: Path) -> StateStore:
    store = StateStore.open(tmp_path / "state.db", FixedClock(T0))
    for n in range(6):
        spec = job_spec(f"job-{n}", team=f"team-{n % 2}", clouds=("aws",) if n < 4 else ("gcp",))
        store.submit(spec, f"name: job-{n}\n", f"d{n}")
    return store


def test_specs_read_together_are_those_read_alone(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        queued = store.queued()
        specs = Specs()
        specs.load(store, queued, (JobState.QUEUED,))
        for job in queued:
            assert specs.get(store, job) == store.version(job.id, job.version).spec


def test_jobs_from_one_template_share_their_decoded_parts(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        queued = store.queued()
        specs = Specs()
        specs.load(store, queued, (JobState.QUEUED,))
        by_name = {job.name: specs.get(store, job) for job in queued}
        first, same, other = by_name["job-0"], by_name["job-3"], by_name["job-5"]
        assert all(getattr(first, part) is getattr(same, part) for part in PARTS)
        assert first.requirements is not other.requirements  # aws, not gcp
        assert first.requirements != other.requirements


def test_a_job_not_loaded_is_read_alone(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        job = store.queued()[0]
        assert Specs().get(store, job) == store.version(job.id, job.version).spec
