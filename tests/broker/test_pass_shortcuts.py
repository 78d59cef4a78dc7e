"""The faster pass changes no decision: passes with its shortcuts, and passes as the
controller made them before (every write its own transaction, each launch recorded
running and each ended attempt closed at once, the sandbox reading every record on
every look, every plan's placements tried for room), over two copies of one state,
launch the same jobs on the same places, write the same events, attempts, charges and
instance rows, and report the same."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.clock import FixedClock
from broker.controller import Controller
from broker.controller.room import Room
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import StateStore
from broker.submit import submit_manifests
from providers.sandbox.records import Workdir
from tests.waiting import wait_ended

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
JOB = """\
apiVersion: broker/v1
name: job-{i}
team: team-{team}
resources:
  accelerators: {gpu}
placement:
  clouds: [gcp, aws]
run:
  command: "{command}"
runtime:
  estimate_hours: 1
"""


def _manifests(folder: Path, jobs: int) -> list:
    folder.mkdir()
    for i in range(jobs):
        gpu = ("L4:1", "T4:1", "A100:1")[i % 3]
        command = "exit 3" if i % 7 == 3 else "true"  # a few fail (and are retried)
        text = JOB.format(i=i, team=i % 4, gpu=gpu, command=command)
        (folder / f"job-{i}.yaml").write_text(text)
    return load_manifests(sorted(folder.glob("*.yaml"))).manifests


@contextmanager
def _as_before(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pass without its shortcuts, as it ran before them."""

    @contextmanager
    def apart(self: StateStore) -> Iterator[None]:  # every write its own transaction
        yield

    start, finish = Controller._start, Controller._finish

    def start_and_record(self, job, attempt, report, up=None):  # recorded running at once
        return start(self, job, attempt, report)

    def finish_now(self, job, attempt, instance, later=None):  # each close written at once
        return finish(self, job, attempt, instance)

    def every_record(self: Workdir) -> list:  # every record read from disk on every look
        records = [self.load(name) for name in self.folders()]
        return [r for r in records if r is not None and r.ended_at is None]

    def every_placement(self: Room, placements):  # no memory of full plans
        return next((p for p in placements if self.fits(p)), None)

    with monkeypatch.context() as patch:
        patch.setattr(StateStore, "together", apart)
        patch.setattr(Controller, "_start", start_and_record)
        patch.setattr(Controller, "_finish", finish_now)
        patch.setattr(Workdir, "live_records", every_record)
        patch.setattr(Room, "first_free", every_placement)
        yield


def _passes(folder: Path, manifests: list, passes: int) -> dict:
    """`passes` controller passes over a fresh state of `manifests` (ids and times made
    the same way each time), each job's process ended before the next; what they left."""
    clock = FixedClock(T0)
    count = itertools.count()
    store = StateStore.open(folder / "state.db", clock, new_id=lambda: f"{next(count):012x}")
    submit_manifests(store, manifests)
    runtime = open_runtime(folder / "state.db", load_offers(), clock=clock, store=store)
    reports = []
    try:
        for _ in range(passes):
            reports.append(asdict(runtime.controller.run_pass()))
            for known in store.instances(state="running"):
                assert wait_ended(runtime.provider, known.provider_id, timeout=30)
            clock.advance(timedelta(minutes=1))
        conn = store._conn
        tables = {
            "events": "SELECT * FROM events ORDER BY job_id, id",
            "attempts": "SELECT * FROM attempts ORDER BY id",
            "ledger": "SELECT * FROM ledger ORDER BY job_id, id",
            "jobs": "SELECT * FROM jobs ORDER BY id",
            "instances": "SELECT * FROM instances ORDER BY provider_id",
        }
        left = {name: [tuple(row) for row in conn.execute(sql)] for name, sql in tables.items()}
        # an event's id is its place among every job's events: batched writes order the
        # jobs' events differently, each job's in the same order
        left["events"] = [row[1:] for row in left["events"]]
    finally:
        for instance in runtime.provider.list_instances():
            runtime.provider.terminate(instance.id)
        runtime.close()
    return {"reports": reports, **left}


def test_the_faster_pass_decides_and_writes_what_the_pass_before_it_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = _manifests(tmp_path / "jobs", 60)
    (tmp_path / "now").mkdir()
    (tmp_path / "before").mkdir()
    now = _passes(tmp_path / "now", manifests, 4)
    with _as_before(monkeypatch):
        before = _passes(tmp_path / "before", manifests, 4)
    assert now["reports"][0]["launched"], "the first pass launches what the sandbox holds"
    assert any(report["finished"] for report in now["reports"])
    assert any(report["waiting"] for report in now["reports"])
    for name in ("reports", "events", "attempts", "ledger", "jobs", "instances"):
        assert now[name] == before[name], name
