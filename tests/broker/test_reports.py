"""The cost ledger and its reports: what an attempt is charged, ledger integrity after a
run with interruptions, grouped totals against hand-computed figures, savings, lost
work, billing-export reconciliation and charts."""

from __future__ import annotations

import base64
import sys
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock, SystemClock
from broker.reports.actual import BillError, Reconciled, planned_by_attempt, read_bill, reconcile
from broker.reports.chart import MissingExtra, html_report, terminal_chart
from broker.reports.lines import Ledger, lost_share, to_lines
from broker.reports.query import GROUPINGS, Figures, Line, UnknownGrouping, figures, group, parse_by
from broker.reports.report import build_report
from broker.reports.savings import OnDemandPrices, Quote, first_choice_cloud
from broker.spec import Checkpoint, DataInput, GpuAsk, JobSpec, Requirements
from broker.state import AttemptState, JobState, StateStore, UnknownAttempt, schema
from broker.state.charges import attempt_charges
from broker.state.model import Attempt, total
from pricing.regions import Place
from tests.fakes.billing import ledger as fixed
from tests.fakes.offers import write_catalog
from tests.fakes.specs import job_spec, placed
from tests.state_backends import query
from tests.waiting import wait_ended, wait_until

REPO = Path(__file__).resolve().parents[2]
BILLING = REPO / "tests" / "fakes" / "billing"
D = Decimal


def micro(amount: Decimal) -> Decimal:
    """An amount as the ledger rounds it, once: to 1e-6 USD, half to even."""
    return amount.quantize(D("1e-6"), ROUND_HALF_EVEN)


@pytest.fixture
def store(state_location):
    """The fixed ledger in a fresh SQLite file, then in a fresh PostgreSQL database."""
    opened = fixed.build(state_location)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def prices(tmp_path_factory) -> OnDemandPrices:
    from broker.offers import load_offers

    catalog = write_catalog(tmp_path_factory.mktemp("cat") / "offers.csv", fixed.CATALOG_ROWS)
    return OnDemandPrices.from_offers(load_offers(catalog).index.offers)


# --- what an ended attempt is charged ------------------------------------------------------


def attempt(
    number: int = 1,
    cloud: str = "aws",
    region: str = "us-west-2",
    state: AttemptState = AttemptState.RUNNING,
    billed: str | None = None,
) -> Attempt:
    where = {"cloud": cloud, "region": region, "accelerator": "H100", "accelerator_count": 8}
    return Attempt(
        id=f"a-{number}", job_id="j-1", number=number, version=1,
        placed_on=placed(where, "30", "spot", "test", "2026-10-30"),
        market="spot", price_per_hour=D("30"), price_source="test", price_as_of="2026-10-30",
        state=state, started_at=fixed.T0, billed_hours=None if billed is None else D(billed),
    )  # fmt: skip


SPEC = JobSpec(
    name="llama",
    team="nlp",
    requirements=Requirements(accelerators=(GpuAsk("H100", 8),)),
    checkpoint=Checkpoint("s3://ckpt/llama/", 30, 40, Place("aws", "us-east-1")),
    data=(
        DataInput("gs://data/corpus/", 100, Place("gcp", "us-central1")),
        DataInput("s3://data/near/", 500, Place("aws", "us-west-2")),  # same region: free
        DataInput("https://example.org/x", 7, None),  # location unknown: not priced
    ),
)


def test_an_attempt_is_charged_its_time_and_the_data_it_moved():
    reclaimed = attempt(1, state=AttemptState.INTERRUPTED, billed="0.1")  # wrote on notice
    entries = attempt_charges(attempt(number=2), 2.5, SPEC, "interrupted", [reclaimed])
    assert entries[0] == {"kind": "compute"}  # the store prices it at the launch price
    moves = {e["detail"].split(":")[0]: e for e in entries[1:]}
    assert set(moves) == {"input gs", "checkpoint restore s3", "checkpoint writes s3"}
    data_in = moves["input gs"]
    assert (data_in["quantity"], data_in["unit_price_usd"]) == (100, 0.12)  # GCP to internet
    assert (data_in["cloud"], data_in["region"]) == ("gcp", "us-central1")  # the sender bills
    restore = moves["checkpoint restore s3"]
    assert (restore["quantity"], restore["unit_price_usd"], restore["cloud"]) == (40, 0.02, "aws")
    writes = moves["checkpoint writes s3"]  # 2.5 h / 30 min = 5 writes, +1 on the notice
    assert (writes["quantity"], writes["region"]) == (240, "us-west-2")
    assert "6 x 40 GB" in writes["detail"]
    assert all(e["kind"] == "egress" and e["price_source"] for e in entries[1:])


def test_only_a_checkpoint_that_was_written_is_restored():
    first = attempt_charges(attempt(number=1), 0.75, SPEC, "succeeded")
    details = [e["detail"] for e in first[1:]]
    assert len(details) == 2 and not any("restore" in d for d in details)
    assert "1 x 40 GB" in details[1]  # one full interval in 45 minutes
    # earlier attempts that never ran (no capacity) or ran under an interval wrote nothing
    never = attempt(1, state=AttemptState.FAILED, billed="0")
    short = attempt(2, state=AttemptState.FAILED, billed="0.4")
    third = attempt_charges(attempt(number=3), 1, SPEC, "succeeded", [never, short])
    assert not any("restore" in e.get("detail", "") for e in third)
    later = attempt(4, state=AttemptState.SUCCEEDED, billed="9")  # numbered after: ignored
    assert not any("restore" in e.get("detail", "") for e in attempt_charges(
        attempt(number=3), 1, SPEC, "succeeded", [never, short, later]
    ))  # fmt: skip
    ran = attempt(2, state=AttemptState.FAILED, billed="0.5")
    resumed = attempt_charges(attempt(number=3), 1, SPEC, "succeeded", [never, ran])
    assert [e["quantity"] for e in resumed if "restore" in e.get("detail", "")] == [40]


def test_transferred_gigabytes_are_exact():
    from dataclasses import replace

    small = replace(SPEC, checkpoint=replace(SPEC.checkpoint, size_gb=0.1), data=())
    (_, writes) = attempt_charges(attempt(), 1.5, small, "succeeded")
    assert writes["quantity"] == D("0.3") and 0.1 * 3 != 0.3  # 3 writes of 0.1 GB


def test_idle_attempts_are_charged_nothing_and_pools_their_amortised_rate():
    assert attempt_charges(attempt(), 0, SPEC) == []  # never ran: nothing moved either
    assert attempt_charges(attempt(), 1, None) == [{"kind": "compute"}]
    onprem = attempt_charges(attempt(cloud="onprem", region="onprem-us-east"), 1, SPEC)
    assert onprem[0] == {"kind": "onprem"}  # the pool's amortised rate (the attempt's price)
    # the inputs leave their clouds (billed by the sender); checkpoint writes leave the
    # pool, whose network is free
    assert [(e["cloud"], e["quantity"]) for e in onprem[1:]] == [("gcp", 100), ("aws", 500)]


def test_a_failing_ledger_write_leaves_the_attempt_open_and_nothing_billed(
    state_location, monkeypatch
):
    store = fixed.build(state_location)
    job = store.submit(job_spec("crashy", "nlp"), "x", "dx").job_id
    store.transition(job, JobState.PLANNED)
    attempt_id = store.start_attempt(job, placed(fixed.PLACEMENTS["llama-1"], "10", "spot"))
    store.attempt_running(attempt_id, {"provider_id": "i-crash"})
    before = len(store.ledger())
    real = StateStore._insert
    seen: list[str] = []

    def failing(self, table, columns):
        real(self, table, columns)
        seen.append(table)
        if table == "ledger" and seen.count("ledger") == 2:  # after the compute entry
            raise RuntimeError("disk full")

    monkeypatch.setattr(StateStore, "_insert", failing)
    entries = attempt_charges(store.attempt(attempt_id), 2, SPEC)
    with pytest.raises(RuntimeError):
        store.finish_attempt(attempt_id, "succeeded", 0, "", 2, entries)
    monkeypatch.undo()
    assert len(store.ledger()) == before  # not even the compute entry stayed
    assert store.attempt(attempt_id).state is AttemptState.RUNNING
    assert store.job(job).state is JobState.RUNNING
    assert store.finish_attempt(attempt_id, "succeeded", 0, "", 2, entries)
    assert len(store.ledger(job_id=job)) == len(entries)
    store.close()


# --- ledger integrity after a real run on the sandbox ------------------------------------


SPOT_JOB = """\
apiVersion: broker/v1
name: ledger-spot
team: nlp
resources:
  accelerators: H100:8
placement:
  clouds: [aws]
  regions: ["us-*"]
  spot: only
run:
  workdir: {examples}
  command: python3 train.py --steps 400 --step-seconds 0.01 --checkpoint-every 5
runtime:
  estimate_hours: 2
checkpoint:
  uri: s3://acme-ckpt/ledger-spot/
  interval_minutes: 30
  size_gb: 40
  location: aws:us-east-1
data:
  - {{uri: gs://acme-data/corpus/, size_gb: 100, location: gcp:us-central1}}
"""


def test_the_ledger_adds_up_after_a_run_with_an_interruption(tmp_path, state_location, monkeypatch):
    from broker.manifest.load import load_manifests
    from broker.offers import load_offers
    from broker.runtime import open_runtime
    from broker.state.location import parse_location
    from broker.submit import submit_manifests

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a database's sandbox
    view = load_offers(pools_path=REPO / "examples" / "demo" / "pools.yaml")
    state = parse_location(state_location)
    rt = open_runtime(state, view, clock=SystemClock(), time_scale=3600)
    (tmp_path / "spot.yaml").write_text(SPOT_JOB.format(examples=REPO / "examples"))
    paths = [tmp_path / "spot.yaml", REPO / "examples" / "demo" / "onprem.yaml"]
    spot, onprem = (r.job_id for r in submit_manifests(rt.store, load_manifests(paths).manifests))
    try:
        rt.controller.run_pass()
        (first,) = rt.store.attempts(spot)
        instance = rt.store.instances(attempt_id=first.id)[0].provider_id
        written = Path(rt.provider.checkpoint_store(spot, "aws", first.placed_on.region))
        assert wait_until(lambda: (written / "checkpoint.json").exists())
        assert rt.provider.interrupt(instance) is not None  # a spot reclaim
        for _ in range(60):
            if {rt.store.job(j).state for j in (spot, onprem)} == {JobState.SUCCEEDED}:
                break
            rt.controller.run_pass()
            for known in rt.store.instances(state="running"):
                wait_ended(rt.provider, known.provider_id, timeout=10)
        assert rt.store.job(spot).state is JobState.SUCCEEDED
        attempts = rt.store.attempts(spot) + rt.store.attempts(onprem)
        assert [a.state for a in rt.store.attempts(spot)] == ["interrupted", "succeeded"]
        entries = rt.store.ledger()
        hourly = [e for e in entries if e.kind != "egress"]
        egress = [e for e in entries if e.kind == "egress"]
        # every attempt: billed time x the price in force at launch, one hourly entry each
        assert sorted(e.attempt_id for e in hourly) == sorted(a.id for a in attempts)
        for a in attempts:
            (entry,) = [e for e in hourly if e.attempt_id == a.id]
            assert entry.amount_usd == micro(a.price_per_hour * a.billed_hours)
            assert entry.kind == ("onprem" if a.placed_on.cloud == "onprem" else "compute")
            assert (entry.market, entry.price_source) == (a.market, a.price_source)
            assert entry.price_as_of == a.price_as_of and entry.price_as_of
        # transfers: the input on each spot attempt; the sandbox keeps checkpoints in each
        # place's own store (writes and restores are local), so the one checkpoint move is
        # the migration into the second attempt when it runs elsewhere, billed by the first
        for e in egress:
            assert e.amount_usd == micro(e.quantity * e.unit_price_usd)
        first_region = first.placed_on.region
        for a in rt.store.attempts(spot):
            mine = [e for e in egress if e.attempt_id == a.id]
            inputs = [e for e in mine if e.detail.startswith("input")]
            assert [(e.quantity, e.unit_price_usd, e.cloud) for e in inputs] == [
                (100, D("0.12"), "gcp")
            ]
            moved = a.number == 2 and a.placed_on.region != first_region
            assert moved or a.number == 1  # the reclaimed place is closed for a while
            migrations = [(e.quantity, e.cloud, e.region) for e in mine if "migration" in e.detail]
            assert migrations == ([(40, "aws", first_region)] if moved else [])
            assert not [e for e in mine if "restore" in e.detail or "writes" in e.detail]
        assert not [e for e in egress if e.job_id == onprem]  # no data to move
        # the sum of the ledger is the sum of attempt costs and transfers, and the report's
        costs = sum(micro(a.price_per_hour * a.billed_hours) for a in attempts)
        transfers = sum(micro(e.quantity * e.unit_price_usd) for e in egress)
        assert sum(e.amount_usd for e in entries) == costs + transfers
        charged = [
            D(ev.data["charged_usd"])
            for job in (spot, onprem)
            for ev in rt.store.events(job)
            if ev.kind == "attempt_finished"
        ]
        assert sum(charged) == costs + transfers
        report = build_report(rt.store, ["job", "kind"])
        assert report.totals.total == costs + transfers
        # the controller recorded when the reclaimed attempt last checkpointed: the job
        # saved on SIGTERM, after the notice, so nothing it did is lost; without that
        # record, reports would count the time from that checkpoint to the end
        saved = rt.store.checkpoints()[first.id]
        interrupted = rt.store.attempt(first.id)
        assert rt.store.lost_shares() == {first.id: 0}
        assert report.totals.lost == 0 and report.totals.lost_gpu_hours == 0
        assert 0 < lost_share(interrupted, saved) < 1  # the old rule, from the store's times
    finally:
        for known in rt.provider.list_instances():
            rt.provider.terminate(known.id)
        rt.close()


# --- reports on the fixed ledger, against hand-computed figures ---------------------------


@pytest.mark.parametrize("name", GROUPINGS)
def test_every_grouping_matches_the_hand_computed_totals(store, prices, name):
    report = build_report(store, [name], prices=prices)
    assert {g.keys[0]: g.figures.total for g in report.groups} == {
        key: D(value) for key, value in fixed.BY[name].items()
    }
    assert report.totals.total == fixed.TOTAL
    assert sum(g.figures.total for g in report.groups) == fixed.TOTAL


def test_team_figures_savings_spot_share_and_lost_work(store, prices):
    report = build_report(store, ["team"], prices=prices)
    teams = {g.keys[0]: g.figures for g in report.groups}
    nlp = teams["nlp"]
    assert (nlp.compute, nlp.egress, nlp.spot, nlp.gpu_hours) == (
        D("158.3178"), D("24.8"), D("158.3178"), D(40)
    )  # fmt: skip
    # the interrupted attempt lost its last hour (checkpoint at 2 of 3 hours): 8 GPU-hours
    assert (nlp.lost_gpu_hours, nlp.lost) == (D(8), D("32.7726"))
    # on demand: 8 x H100 cheapest in aws us-west-2 at 90/h, for 2 + 2 useful hours
    assert (nlp.baseline, nlp.savings) == (D(360), D("201.6822"))
    vision = teams["vision"]  # detector: gcp only (0.7 x 4); embed: on-prem, any cloud (40.22 x 5)
    assert (vision.onprem, vision.baseline, vision.savings) == (D(44), D("203.9"), D("156.5"))
    assert teams["research"].savings == D("5.7921")  # azure westus2 3.4 x 3 - 4.4079
    totals = report.totals
    assert (totals.savings, totals.unpriced, totals.gpu_hours) == (D("363.9743"), 0, D(87))
    assert totals.spot_share == D("0.7744")  # 162.7257 / 210.1257
    assert totals.as_dict()["savings_usd"] == D("363.9743")


def test_two_groupings_and_a_period(store):
    since, until = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    report = build_report(store, ["team", "cloud"], since, until)
    assert [(g.keys, g.figures.total) for g in report.groups] == [
        (("vision", "gcp"), D("3.4")),
        (("vision", "onprem"), D(44)),
    ]
    assert report.totals.unpriced == 2  # no offers given: no baselines, nothing invented
    assert report.totals.savings == 0
    assert report.days == ["2026-11-02"] and report.series == {
        "vision / gcp": [D("3.4")],
        "vision / onprem": [D(44)],
    }


def test_daily_series_span_every_day_and_sum_to_the_total(store):
    report = build_report(store, ["month", "market"])
    assert report.days[0] == "2026-11-01" and report.days[-1] == "2026-12-01"
    assert len(report.days) == 31
    assert set(report.series) == {"on-demand", "spot"}  # month is the axis, not a group
    assert sum(sum(values) for values in report.series.values()) == fixed.TOTAL
    assert report.series["spot"][1] == 0  # a day without spend is drawn as zero


def test_parse_by_validates_and_suggests():
    assert parse_by(["Team", "cloud", "team"]) == ("team", "cloud")
    with pytest.raises(UnknownGrouping, match="did you mean 'region'"):
        parse_by(["regoin"])


# --- lost work and savings, unit by unit -------------------------------------------------


def test_lost_share_counts_from_the_last_checkpoint_or_the_whole_attempt(store):
    interrupted = store.attempt(fixed.ATTEMPTS["llama-1"])
    checkpoint = store.checkpoints()[interrupted.id]
    assert checkpoint == fixed.T0 + timedelta(hours=2)
    assert lost_share(interrupted, checkpoint) * 3 == pytest.approx(1)
    assert lost_share(interrupted, None) == 1
    assert lost_share(interrupted, fixed.T0 + timedelta(hours=9)) == 0  # reported late
    assert lost_share(store.attempt(fixed.ATTEMPTS["llama-2"]), None) == 0  # succeeded


def test_checkpoints_keep_the_latest_per_attempt(store):
    first = fixed.ATTEMPTS["detector"]
    store.record_checkpoint(first, fixed.T0 + timedelta(days=1, hours=12), "gs://c/1")
    store.record_checkpoint(first, fixed.T0 + timedelta(days=1, hours=11))  # older, later
    assert store.checkpoints()[first] == fixed.T0 + timedelta(days=1, hours=12)
    with pytest.raises(UnknownAttempt):
        store.record_checkpoint("a-nope")


def test_first_choice_cloud_rules():
    listed = JobSpec("x", "t", Requirements(clouds=("onprem", "gcp", "aws")))
    assert first_choice_cloud(listed, "aws") == "gcp"  # the first public cloud listed
    assert first_choice_cloud(JobSpec("x", "t", Requirements()), "azure") == "azure"
    assert first_choice_cloud(None, "onprem") is None  # any public cloud


def test_the_cheapest_on_demand_quote_ignores_pools_and_missing_prices(prices):
    quote = prices.cheapest("aws", "H100", 8)
    assert quote == Quote("aws", "us-west-2", "p5.48xlarge", D(90), "test", "2026-10-30")
    assert prices.cheapest(None, "A100-80GB", 8).cloud == "gcp"
    assert prices.cheapest("azure", "H100", 8) is None


# --- the migration: ledgers written before it still report --------------------------------


def test_a_version_1_ledger_migrates_and_reports_by_the_attempts_place(state_location, monkeypatch):
    path = state_location
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
    clock = FixedClock(fixed.T0)
    with StateStore.open(path, clock) as old:
        job = _job_as_version_1_wrote_it(old, job_spec("old", "nlp"))
        old.transition(job, JobState.PLANNED)
        detector = placed(fixed.PLACEMENTS["detector"], "0.85", "on-demand")
        attempt_id = old.start_attempt(job, detector)
        old._backend.begin(old._conn)
        old._conn.execute(
            "INSERT INTO ledger (job_id, attempt_id, kind, amount_usd, quantity, unit,"
            " unit_price_usd, market, price_source, price_as_of, period_start, period_end,"
            " created_at) VALUES (?, ?, 'compute', '1.7', '2', 'hour', '0.85', 'on-demand',"
            " '', '', ?, ?, ?)",
            (job, attempt_id, *["2026-11-01T00:00:00.000000Z"] * 3),
        )
        old._conn.execute("COMMIT")
    monkeypatch.undo()
    with StateStore.open(path, clock) as new:
        (version,) = query(path, "SELECT MAX(version) FROM schema_migrations")[0]
        assert version == len(schema.MIGRATIONS) == 6
        (entry,) = new.ledger()
        assert (entry.cloud, entry.region, entry.detail) == ("", "", "")
        (line,) = build_report(new, ["cloud"]).lines
        assert (line.keys["cloud"], line.keys["region"]) == ("gcp", "europe-west4")


def _job_as_version_1_wrote_it(store: StateStore, spec) -> str:
    """A queued job's rows as schema version 1 holds them (today's submit writes `run`)."""
    from broker.spec_codec import encode
    from broker.state.model import json_text

    at = "2026-11-01T00:00:00.000000Z"
    store._backend.begin(store._conn)
    store._conn.execute(
        "INSERT INTO jobs VALUES ('j-000000000001', ?, ?, 'default', 0, 'queued', 1, NULL,"
        " ?, ?, ?)",
        (spec.team, spec.name, at, at, at),
    )
    store._conn.execute(
        "INSERT INTO job_versions VALUES ('j-000000000001', 1, 'd', 'x', ?, 'default', 0, ?)",
        (json_text(encode(spec)), at),
    )
    store._conn.execute("COMMIT")
    return "j-000000000001"


# --- hypothesis: any grouping of any lines adds up to the total, exactly ------------------

MONEY = st.integers(0, 10**17).map(lambda n: D(n).scaleb(-10))  # up to 1e7, 10 places


def keys_of(seed: int) -> dict[str, str]:
    """Grouping values from one drawn number (one draw per line keeps hypothesis fast)."""
    keys = {name: "abc"[seed // 3**i % 3] for i, name in enumerate(GROUPINGS)}
    return keys | {"day": f"2026-11-{seed % 28 + 1:02d}"}


KEYS = st.integers(0, 3 ** len(GROUPINGS) - 1).map(keys_of)
LINE = st.tuples(
    st.sampled_from(["compute", "onprem", "egress"]),
    st.sampled_from(["spot", "on-demand"]),
    KEYS,
    MONEY,
    MONEY,
    MONEY,
    st.none() | MONEY,
    st.integers(0, 16),
)


def as_line(n: int, drawn: tuple) -> Line:
    kind, market, keys, amount, quantity, lost, baseline, gpus = drawn
    return Line(
        entry_id=n, attempt_id=f"a-{n}", kind=kind, amount=amount, quantity=quantity,
        unit="hour", unit_price=D(1), market=market, period_end=fixed.T0, keys=keys,
        gpus=D(gpus), lost_hours=lost, lost_usd=lost, baseline_usd=baseline,
    )  # fmt: skip


lines = st.lists(LINE, max_size=20).map(lambda drawn: [as_line(*p) for p in enumerate(drawn)])


MONEY_FIELDS = (
    "total", "compute", "onprem", "egress", "spot", "gpu_hours", "lost_gpu_hours", "lost",
    "baseline", "priced", "savings", "entries", "unpriced",
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(lines, st.lists(st.sampled_from(GROUPINGS), max_size=3, unique=True))
def test_groups_always_sum_to_the_grand_total_exactly(some, by):
    groups = group(some, by)
    whole = figures(some)
    for name in MONEY_FIELDS:
        parts = [getattr(g.figures, name) for g in groups]
        added = sum(parts) if name in ("entries", "unpriced") else total(parts)
        assert added == getattr(whole, name), name
    assert len({g.keys for g in groups}) == len(groups)
    assert sum(len(g.keys) == len(by) for g in groups) == len(groups)


def test_exact_sums_keep_every_digit():
    tiny, big = D("0.000000000000000000000000000001"), D("12345678901234567890")
    line = Line(1, None, "compute", big, D(1), "hour", big, "spot", fixed.T0, {})
    other = Line(2, None, "compute", tiny, D(1), "hour", tiny, "spot", fixed.T0, {})
    assert figures([line, other]).total == D("12345678901234567890.000000000000000000000000000001")
    assert Figures().spot_share is None


# --- billing exports and reconciliation ---------------------------------------------------


def test_the_three_sample_exports_are_read():
    aws = read_bill(BILLING / "aws_cur.csv")
    assert (aws.format, aws.cloud, len(aws.lines)) == ("aws-cur", "aws", 9)
    assert aws.lines[0].attempt_id == fixed.ATTEMPTS["llama-1"]
    assert aws.lines[0].start == fixed.T0
    gcp = read_bill(BILLING / "gcp_billing_export.csv")
    assert (gcp.format, gcp.lines[0].attempt_id) == ("gcp-billing-export", "a-000000000007")
    assert gcp.lines[0].start == datetime(2026, 11, 2, 10, tzinfo=UTC)
    azure = read_bill(BILLING / "azure_cost_details.csv")
    assert (azure.format, azure.lines[0].attempt_id) == ("azure-cost-details", "a-000000000009")
    assert azure.lines[0].start == datetime(2026, 11, 30, tzinfo=UTC)
    assert sum(line.cost for line in azure.lines) == D("4.17")


def reconciled(store, *names: str) -> dict[str, Reconciled]:
    ledger = Ledger.read(store)
    lines = to_lines(ledger)
    planned = planned_by_attempt(lines, ledger.attempts)
    bills = [read_bill(BILLING / name) for name in names]
    result = reconcile(bills, store.instances(), planned, {})
    return {row.attempt: row for row in result.rows}, result


def test_planned_versus_billed_flags_differences_above_five_percent(store):
    rows, result = reconciled(
        store, "aws_cur.csv", "gcp_billing_export.csv", "azure_cost_details.csv"
    )
    a = fixed.ATTEMPTS
    # planned: the hours (the inputs and the restore are billed on the buckets that sent them)
    assert rows[a["llama-1"]].planned == D("98.3178") and rows[a["llama-2"]].planned == 60
    assert rows[a["llama-1"]].billed == D("98.20") and rows[a["llama-1"]].flag == ""  # -0.12%
    second = rows[a["llama-2"]]  # matched by instance id: its tags were not activated
    assert (second.billed, second.flag, second.difference_pct) == (D("66.10"), "over", D("10.17"))
    assert (rows[a["detector"]].billed, rows[a["detector"]].flag) == (D("3.52"), "")  # +3.5%
    assert (rows[a["ablation"]].billed, rows[a["ablation"]].flag) == (D("4.1"), "under")
    assert rows["a-0000000000ff"].flag == "not in the ledger"  # tagged, unknown attempt
    assert a["embed"] not in rows  # on-prem: no bill covers it
    assert (result.ignored_lines, result.ignored_usd) == (5, D("13.976"))  # disks, tax, others
    assert sorted(r.attempt for r in result.flagged) == sorted(
        [a["llama-2"], a["ablation"], "a-0000000000ff"]
    )


def test_an_instance_missing_from_a_bill_of_its_cloud_is_flagged(store, tmp_path):
    bill = tmp_path / "aws.csv"
    bill.write_text("lineItem/ResourceId,lineItem/UnblendedCost,lineItem/UsageStartDate\n")
    rows, result = reconciled(store, str(bill))
    assert {r.flag for r in rows.values()} == {"not billed"}
    assert result.clouds == ("aws",) and len(rows) == 2


def test_the_five_percent_boundary_is_exact():
    def flag(planned: str, billed: str) -> str:
        return Reconciled("aws", "i", "j", "a", D(planned), D(billed)).flag

    assert flag("100", "105") == "" and flag("100", "95") == ""
    assert flag("100", "105.000001") == "over" and flag("100", "94.99") == "under"
    assert flag("0", "0") == "" and flag("0", "0.01") == "not in the ledger"


def test_other_layouts_of_the_exports(tmp_path):
    mca = tmp_path / "azure-mca.csv"
    mca.write_text(
        "date,resourceId,costInBillingCurrency,billingCurrency,costInUsd,tags\n"
        '2026-11-30,/x/virtualMachines/vm-1,92.1,EUR,100.5,"{""broker-attempt"": ""a-9""}"\n'
    )
    (line,) = read_bill(mca).lines  # costInUsd is used: the EUR cost is not
    assert (line.cost, line.attempt_id, line.resource) == (
        D("100.5"),
        "a-9",
        "/x/virtualMachines/vm-1",
    )
    cur2 = tmp_path / "cur2.csv"
    cur2.write_text(
        "line_item_resource_id,line_item_unblended_cost,line_item_usage_start_date,"
        "line_item_currency_code,resource_tags\n"
        'i-1,2.5,2026-11-01T00:00:00Z,USD,"{""user_broker_attempt"": ""a-7""}"\n'
    )
    (line,) = read_bill(cur2).lines
    assert (line.cloud, line.attempt_id, line.cost) == ("aws", "a-7", D("2.5"))
    eur = tmp_path / "eur.csv"
    eur.write_text("cost,currency,usage_start_time,resource.name\n1,EUR,2026-11-01,x\n")
    with pytest.raises(BillError, match="EUR; broker plans in USD"):
        read_bill(eur)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(BillError, match="not a billing export"):
        read_bill(other)
    broken = tmp_path / "broken.csv"
    broken.write_text("cost,usage_start_time,resource.name\nlots,2026-11-01,x\n")
    with pytest.raises(BillError, match="broken.csv:2: not an amount"):
        read_bill(broken)


# --- charts ----------------------------------------------------------------------------


def test_the_terminal_chart_draws_a_bar_per_day_with_a_legend(store):
    from rich.console import Console

    report = build_report(store, ["team"])
    console = Console(width=100, record=True, color_system=None)
    console.print(terminal_chart(report.days, report.series, "team"))
    text = console.export_text()
    assert "Daily spend, USD by team" in text
    assert "2026-11-01" in text and "183.12" in text and "2026-12-01" in text
    assert "nlp" in text and "research" in text and "vision" in text
    bars = [line for line in text.splitlines() if line.startswith("2026-11-01")]
    assert bars and bars[0].count("█") == 48  # the biggest day fills the width


def test_the_html_report_embeds_its_tables_and_a_png(store):
    from broker.reports.chart import HtmlTable

    report = build_report(store, ["team"])
    table = HtmlTable(
        "Spend", ["team", "total $"], [["nlp", "183.12"], ["<b>", "1"]], [False, True]
    )
    page = html_report("Cost <report>", [table], report.days, report.series, ["a note"], "team")
    assert (
        "<h2>Spend</h2>" in page and "<td>nlp</td>" in page and '<td class="n">183.12</td>' in page
    )
    assert "&lt;b&gt;" in page and "Cost &lt;report&gt;" in page  # escaped
    image = page.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n")


def test_without_matplotlib_the_html_report_says_which_extra_to_install(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    report = build_report(store, ["team"])
    with pytest.raises(MissingExtra, match=r"pip install 'broker\[plot\]'"):
        html_report("r", [], report.days, report.series)
