"""`broker demo` plays the product's signature: a spot reclaim, then a spot capacity
crunch on that cloud, so the job resumes on another cloud, its checkpoint crossing with
its egress charged and shown; on a state file and on a PostgreSQL database."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from broker.clock import SystemClock
from broker.state import StateStore
from pricing.egress import egress_price
from pricing.regions import Place
from tests.cli.runner import run_cli
from tests.state_backends import is_postgres

CHECKPOINT_GB = 40  # examples/demo/finetune-spot.yaml
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_reclaimed_job_resumes_on_another_cloud_with_its_egress_charged(
    capsys, tmp_path, state_location, monkeypatch
):
    """On a state file, then on a PostgreSQL database (`--state postgresql://...`)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a database's sandbox
    state = state_location
    demo = run_cli(capsys, "demo", "--state", str(state))
    assert demo.code == 0, demo.stderr
    password = urlsplit(str(state)).password if is_postgres(state) else None
    if password:
        assert password not in demo.stdout + demo.stderr
        assert "postgres:***@" in demo.stderr  # where the jobs went, its password masked
    status = run_cli(capsys, "status", "llama-ft", "--state", str(state), "-o", "json")
    first, last = json.loads(status.stdout)["attempts"]
    assert (first["state"], last["state"]) == ("interrupted", "succeeded")
    before, after = first["where"].split("/"), last["where"].split("/")
    assert before[0] == "aws" and after[0] != "aws"  # crossed clouds
    assert f"demo: spot capacity crunch on {before[0]} (played)" in demo.stderr
    with StateStore.open(state, SystemClock()) as store:
        (job,) = [j for j in store.jobs() if j.name == "llama-ft"]
        moves = [e for e in store.ledger(job_id=job.id) if "checkpoint migration" in e.detail]
    price = egress_price(Place(before[0], before[1]), Place(after[0], after[1])).price_per_gb
    expected = Decimal(str(price)) * CHECKPOINT_GB
    assert expected > 0 and sum(e.amount_usd for e in moves) == expected
    assert [e.cloud for e in moves] == [before[0]]  # billed by the sending cloud
    note = next(line for line in demo.stdout.splitlines() if line.startswith("llama-ft was"))
    assert f"reclaimed on {before[0]}/{before[1]}" in note
    assert f"crunch on {before[0]} left {after[0]} as the cheapest compliant place" in note
    assert f"{after[0]}/{after[1]}" in note and f"{expected:.2f} USD egress charged" in note


def test_a_state_that_holds_jobs_is_refused_and_left_unchanged(
    capsys, tmp_path, state_location, monkeypatch
):
    """The demo's jobs would be 'unchanged' there and nothing would run: it says so, exit 2,
    instead of reporting every job of that state as the demo's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    state = str(state_location)
    submitted = run_cli(capsys, "submit", str(EXAMPLES / "demo" / "eval-eu.yaml"), "--state", state)
    assert submitted.code == 0, submitted.stderr
    with StateStore.open(state_location, SystemClock()) as store:
        before = store.job_counts()
    demo = run_cli(capsys, "demo", "--state", state)
    assert demo.code == 2, demo.stderr
    assert "the demo needs an empty state" in demo.stderr and "already holds jobs" in demo.stderr
    assert "Traceback" not in demo.stderr and demo.stdout == ""
    with StateStore.open(state_location, SystemClock()) as store:
        assert store.job_counts() == before
