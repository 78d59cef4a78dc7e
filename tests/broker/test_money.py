"""Exact money end to end: billed time in whole seconds, every ledger amount rounded once
to 1e-6 USD, reports adding those amounts exactly, and the commands carrying them as
decimal strings with all 6 places (tables round for display only)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock
from broker.reports.report import build_report
from broker.spec import Checkpoint, DataInput, GpuAsk, JobSpec, Requirements
from broker.state import JobState, StateStore
from broker.state.charges import attempt_charges
from pricing.regions import Place
from tests.cli.runner import run_cli
from tests.fakes.specs import placed
from tests.state_backends import is_postgres, query

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SIX_PLACES = re.compile(r"^-?\d+\.\d{6}$")
MICRO = Decimal("1e-6")
WHERE = {
    "cloud": "aws", "region": "us-west-2", "instance_type": "p5.48xlarge",
    "accelerator": "H100", "accelerator_count": 8.0, "nodes": 1,
}  # fmt: skip


def spec(name: str, input_gb: float, checkpoint_gb: float) -> JobSpec:
    """A job that copies an input from GCP and checkpoints into another AWS region, so
    that its attempts are charged egress as well as time."""
    data = (DataInput("gs://data/corpus/", input_gb, Place("gcp", "us-central1")),)
    checkpoint = Checkpoint("s3://ckpt/x/", 30, checkpoint_gb, Place("aws", "us-east-1"))
    return JobSpec(
        name=name,
        team=f"team-{len(name) % 3}",
        requirements=Requirements(accelerators=(GpuAsk("H100", 8),)),
        checkpoint=checkpoint if checkpoint_gb else None,
        data=data if input_gb else (),
    )


hours = st.floats(min_value=0, max_value=500, allow_nan=False, allow_infinity=False)
prices = st.decimals(min_value="0.0001", max_value=200, places=4) | st.floats(0.0001, 200)
sizes = st.sampled_from([0, 0.5, 1.1, 40, 123.456])
attempt_draws = st.tuples(hours, prices, st.booleans(), sizes, sizes, st.floats(0, 1))


def run_ledger(store: StateStore, clock: FixedClock, drawn: list) -> None:
    """One job per drawn attempt; a reclaimed attempt is followed by a resumed one, and
    records a checkpoint part-way, so reports count lost work."""
    for n, (spent, price, reclaimed, input_gb, ckpt_gb, saved) in enumerate(drawn):
        job_spec = spec(f"job-{n}", input_gb, ckpt_gb)
        job_id = store.submit(job_spec, f"job {n}", f"digest-{n}").job_id
        outcomes = ["interrupted", "succeeded"] if reclaimed else ["succeeded"]
        for outcome in outcomes:
            store.transition(job_id, JobState.PLANNED)
            attempt_id = store.start_attempt(job_id, placed(WHERE, price, "spot", "t", "x"))
            store.attempt_running(attempt_id, {"provider_id": f"i-{attempt_id}"})
            started = clock.now()
            clock.advance(timedelta(hours=spent))
            if outcome == "interrupted":
                store.record_checkpoint(attempt_id, started + timedelta(hours=spent * saved))
            attempt = store.attempt(attempt_id)
            entries = attempt_charges(attempt, spent, job_spec, outcome, store.attempts(job_id))
            to = JobState.QUEUED if outcome == "interrupted" else None
            store.finish_attempt(attempt_id, outcome, 0, "", spent, entries, job_to=to)


def rows(path: Path | str) -> list[tuple[str, str, str, str]]:
    return query(path, "SELECT kind, amount_usd, quantity, unit_price_usd FROM ledger")


SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW_OK)
@given(drawn=st.lists(attempt_draws, min_size=1, max_size=6))
def test_the_ledger_rows_add_up_to_the_report_to_the_cent(new_state_location, drawn):
    """On SQLite and on PostgreSQL: the ledger's decimal text comes back digit for digit,
    and sums exactly (in Python, and on PostgreSQL in SQL as NUMERIC too)."""
    path = new_state_location()
    clock = FixedClock(T0)
    with StateStore.open(path, clock) as store:
        run_ledger(store, clock, drawn)
        report = build_report(store, ["job"])
        by_team = build_report(store, ["team", "kind"])
        attempts = store.attempts()
    written = rows(path)
    if is_postgres(path):
        sql = "SELECT COALESCE(SUM(CAST(amount_usd AS NUMERIC)), 0) FROM ledger"
        ((in_sql,),) = query(path, sql)
        assert in_sql == sum((Decimal(amount) for _, amount, _, _ in written), Decimal(0))
    for kind, amount, quantity, unit_price in written:
        assert SIX_PLACES.match(amount), amount  # rounded once, written with its 6 places
        exact = Decimal(quantity) * Decimal(unit_price)
        assert Decimal(amount) == exact.quantize(MICRO, ROUND_HALF_EVEN)
        if kind != "egress":
            assert SIX_PLACES.match(quantity) and _whole_seconds(Decimal(quantity)), quantity
    for attempt in attempts:
        assert attempt.billed_hours is not None and _whole_seconds(attempt.billed_hours)
    ledger_sum = sum((Decimal(amount) for _, amount, _, _ in written), Decimal(0))
    assert report.totals.total == ledger_sum  # exactly, so also to the cent
    cents = Decimal("0.01")
    assert report.totals.total.quantize(cents) == ledger_sum.quantize(cents)
    assert sum(g.figures.total for g in report.groups) == ledger_sum
    assert sum(g.figures.total for g in by_team.groups) == ledger_sum
    assert 0 <= report.totals.lost <= report.totals.compute + report.totals.onprem


def _whole_seconds(hours: Decimal) -> bool:
    """Hours at 6 places that stand for a whole number of seconds."""
    seconds = (hours * 3600).to_integral_value(ROUND_HALF_EVEN)
    return (seconds / Decimal(3600)).quantize(MICRO, ROUND_HALF_EVEN) == hours


def test_billed_hours_are_whole_seconds_and_money_rounds_once_half_to_even():
    from broker.state.money import billed_hours, money

    assert billed_hours(2.5266200000000003) == Decimal("2.526667")  # 9095.832 s -> 9096 s
    assert billed_hours(billed_hours(2.5266200000000003)) == Decimal("2.526667")
    assert billed_hours(1 / 3600) == Decimal("0.000278") and billed_hours(0) == 0
    assert billed_hours(0.3 / 3600) == Decimal("0.000278")  # a started second is billed
    assert money(Decimal("32.78441047200000389268")) == Decimal("32.784410")
    assert money(Decimal("0.0000005")) == 0 and money(Decimal("0.0000015")) == MICRO * 2


def test_status_the_ledger_and_cost_report_json_carry_six_places(state_location, capsys):
    path = state_location
    clock = FixedClock(T0)
    with StateStore.open(path, clock) as store:
        job_id = store.submit(spec("noisy", 0, 0), "noisy", "d").job_id
        store.transition(job_id, JobState.PLANNED)
        attempt_id = store.start_attempt(job_id, placed(WHERE, "12.9756", "spot", "t", "x"))
        store.attempt_running(attempt_id, {"provider_id": "i-1"})
        clock.advance(timedelta(hours=2.5266200000000003))
        entries = [{"kind": "compute"}, {"kind": "egress", "quantity": 0.1, "unit_price_usd": 0.09}]
        store.finish_attempt(attempt_id, "succeeded", 0, "", 2.5266200000000003, entries)
    # 9096 s = 2.526667 h (6 places) x 12.9756 USD/h = 32.785020 USD; 0.1 GB x 0.09 = 0.009
    assert [(k, a, q) for k, a, q, _ in rows(path)] == [
        ("compute", "32.785020", "2.526667"),
        ("egress", "0.009000", "0.1"),
    ]
    status = run_cli(capsys, "status", "noisy", "--state", str(path), "-o", "json")
    assert status.code == 0, status.stderr
    (shown,) = json.loads(status.stdout)["attempts"]
    assert (shown["billed_hours"], shown["cost_usd"]) == ("2.526667", "32.794020")
    report = run_cli(capsys, "cost-report", "--by", "job", "--state", str(path), "-o", "json")
    assert report.code == 0, report.stderr
    document = json.loads(report.stdout)
    (group,) = document["groups"]
    for figures in (group, document["totals"]):
        assert (figures["total_usd"], figures["compute_usd"], figures["egress_usd"]) == (
            "32.794020", "32.785020", "0.009000",
        )  # fmt: skip
        assert (figures["onprem_usd"], figures["lost_usd"]) == ("0.000000", "0.000000")
        assert figures["gpu_hours"] == "20.213336"  # 8 GPUs x 2.526667 h
    assert [e["amount_usd"] for e in document["egress"]] == ["0.009000"]
    table = run_cli(capsys, "cost-report", "--by", "job", "--state", str(path))
    assert "32.79" in table.stdout and "32.794020" not in table.stdout  # display rounding
    status_table = run_cli(capsys, "status", "noisy", "--state", str(path))
    assert "32.79" in status_table.stdout and "32.794020" not in status_table.stdout
