"""The sandbox workdir's memory of its records (providers/sandbox/records.py): what it
answers is what reading every record file gives, while other providers on the same
workdir (other controllers) launch, stop and reclaim; an ended record is read once."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.clock import SystemClock
from pricing.catalog import read_offer_table
from providers.sandbox import SandboxProvider
from providers.sandbox.records import RECORD, Record
from tests.fakes.offers import write_catalog
from tests.providers.test_sandbox import request

PLACE = ("aws", "us-east-1")
LIMIT = 4  # nodes at once per region


@pytest.fixture
def pair(tmp_path):
    """Two providers on one workdir, as two controllers; every process ended after."""
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    made = [
        SandboxProvider(offers, tmp_path / "sandbox", SystemClock(), LIMIT, terminate_grace=2.0)
        for _ in range(2)
    ]
    yield made
    for provider in made:
        for instance in provider.list_instances():
            provider.terminate(instance.id)


def on_disk(root: Path) -> list[Record]:
    """Every record file, read now (what the workdir read on every look before)."""
    found = [Record.from_json(path.read_text()) for path in sorted(root.glob(f"*/{RECORD}"))]
    return [record for record in found if record is not None]


def held(provider: SandboxProvider, root: Path) -> int:
    """Nodes running at PLACE by the record files and the processes, read afresh."""
    live = [r for r in on_disk(root) if r.ended_at is None and provider._processes.running(r)]
    return sum(r.nodes for r in live if (r.cloud, r.region) == PLACE)


def test_the_records_are_what_the_files_say_while_another_provider_changes_them(pair):
    first, second = pair
    root = first.workdir
    first.launch(request("a-1", "sleep 30"))
    done = first.launch(request("a-2", "true", job_id="j-2"))
    second.launch(request("a-3", "sleep 30", job_id="j-3"))
    assert first.wait(done.id, 30).state == "succeeded"
    assert first.free_nodes()[PLACE] == LIMIT - 2 == LIMIT - held(first, root)  # a-1, a-3
    assert first._dir.records() == on_disk(root)

    second.terminate("sbx-a-1")  # the other controller stops one and reclaims the other
    second.interrupt("sbx-a-3")
    assert first._dir.records() == on_disk(root)
    assert first.free_nodes()[PLACE] == LIMIT - held(first, root)
    assert second.wait("sbx-a-3", 30).state == "interrupted"
    assert first.free_nodes()[PLACE] == LIMIT
    assert first._dir.records() == on_disk(root)
    assert [n.instance_id for n in first.interruptions()] == ["sbx-a-3"]

    second.launch(request("a-4", "sleep 30", job_id="j-4"))  # a record this one never saw
    assert first.free_nodes()[PLACE] == LIMIT - 1
    assert first._dir.records() == on_disk(root)


def test_an_ended_record_is_read_once(pair, monkeypatch):
    first, _ = pair
    done = first.launch(request("a-1", "true"))
    first.launch(request("a-2", "sleep 30", job_id="j-2"))
    assert first.wait(done.id, 30).state == "succeeded"
    first._dir.records()
    decoded: list[str] = []
    real = Record.from_json.__func__

    def counted(cls, text: str) -> Record | None:
        record = real(cls, text)
        decoded.append(record.attempt_id if record is not None else "")
        return record

    monkeypatch.setattr(Record, "from_json", classmethod(counted))
    assert [r.attempt_id for r in first._dir.records()] == ["a-1", "a-2"]
    assert decoded == ["a-2"]  # the live one, read afresh; the ended one is final
    decoded.clear()
    first.free_nodes()
    assert decoded == []  # the live record's place is known: its process is asked
