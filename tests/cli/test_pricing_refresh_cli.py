"""`broker pricing refresh` and `broker pricing status` as a user runs them, against the
price fakes on 127.0.0.1 (tests/fakes/prices.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.cli.pricing_refresh import auto_refresh
from pricing.catalog import read_offer_table
from tests.cli.runner import run_cli
from tests.fakes import prices as fakes
from tests.fakes.offers import write_catalog
from tests.fakes.specs import job_spec, placed

price_fake = fakes.price_fake
REPO = Path(__file__).resolve().parents[2]
REGIONS = "us-east-1,eastus,westeurope,us-central1,europe-west4"


def user_catalog(home: Path) -> Path:
    return home / "data" / "broker" / "offers.csv"


def test_refresh_writes_the_user_catalog_and_offers_show_its_age(
    capsys, price_fake, isolated_user_dirs, monkeypatch
):
    monkeypatch.setenv("BROKER_FRESHNESS_DAYS", "1")
    result = run_cli(capsys, "pricing", "refresh", "--region", REGIONS, "-o", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    states = {s["name"]: s["state"] for s in document["sources"]}
    assert states["azure-retail-prices"] == states["gcp-billing-catalog"] == "ok"
    assert states["aws-price-list"] == "ok" and states["aws-spot-history"] == "skipped"
    assert "aws-spot-history skipped: no AWS credentials" in result.stderr
    assert f"to {user_catalog(isolated_user_dirs)}" in result.stderr
    assert "azure-retail-prices: 2 windows meters left out" in result.stderr

    listed = json.loads(run_cli(capsys, "offers", "--limit", "0", "-o", "json").stdout)
    assert listed["origin"] == "user"
    today = datetime.now(UTC).date().isoformat()
    live = [o for o in listed["offers"] if o["as_of"] == today]
    old = [o for o in listed["offers"] if o["as_of"] != today]
    assert live and not any(o["stale"] for o in live)
    assert old and all(o["stale"] for o in old)  # kept snapshot rows, flagged by their as-of
    assert {o["source"] for o in live} >= {"gcp-billing-catalog", "azure-retail-prices"}


def test_a_failing_source_is_reported_and_its_rows_kept(capsys, price_fake, isolated_user_dirs):
    catalog = write_catalog(isolated_user_dirs / "team.csv")
    price_fake.malformed.add("gcp:1")
    result = run_cli(
        capsys, "pricing", "refresh", "--catalog", str(catalog), "--cloud", "gcp,azure"
    )
    assert result.code == 1
    assert "gcp-billing-catalog failed:" in result.stderr and "malformed page" in result.stderr
    assert "kept the previous rows of gcp-billing-catalog" in result.stderr
    listed = json.loads(run_cli(capsys, "offers", "--catalog", str(catalog), "-o", "json").stdout)
    gcp = {(o["instance_type"], o["as_of"]) for o in listed["offers"] if o["cloud"] == "gcp"}
    assert gcp == {
        ("a2-highgpu-8g", "2026-11-20"),
        ("a2-highgpu-1g", "2020-01-01"),
        ("n1-standard-4", "2026-11-20"),
    }
    status = json.loads(
        run_cli(capsys, "pricing", "status", "--catalog", str(catalog), "-o", "json").stdout
    )
    by_name = {s["source"]: s for s in status["sources"]}
    assert by_name["gcp-billing-catalog"]["state"] == "failed"
    assert by_name["gcp-billing-catalog"]["last_success"] == "never"
    assert "malformed page" in by_name["gcp-billing-catalog"]["reason"]
    assert by_name["azure-retail-prices"]["state"] == "ok"
    assert by_name["azure-retail-prices"]["rows"] == 3
    assert by_name["test"]["state"] == "static" and by_name["test"]["rows"] == 8


def test_status_on_the_bundled_snapshot_shows_its_age(capsys):
    result = run_cli(capsys, "pricing", "status")
    assert result.code == 0, result.stderr
    assert "bundled snapshot" in result.stdout
    document = json.loads(run_cli(capsys, "pricing", "status", "-o", "json").stdout)
    sources = {s["source"]: s for s in document["sources"]}
    aws = sources["https://aws.amazon.com/ec2/pricing/on-demand/"]
    assert aws["state"] == "static" and aws["oldest_as_of"] == "2025-12-01"
    assert aws["age"].endswith(" d") and aws["rows"] > 100


def test_a_cloud_asked_for_without_credentials_exits_5(capsys, price_fake, monkeypatch):
    monkeypatch.delenv("BROKER_GCP_PRICING_API_KEY")
    result = run_cli(capsys, "pricing", "refresh", "--cloud", "gcp")
    assert result.code == 5
    assert "gcp-billing-catalog skipped: no API key" in result.stderr
    assert "no source succeeded" in result.stderr


def test_aws_without_credentials_refreshes_on_demand_and_warns_about_spot(capsys, price_fake):
    result = run_cli(capsys, "pricing", "refresh", "--cloud", "aws", "--region", "us-east-1")
    assert result.code == 0, result.stderr
    assert "aws-spot-history skipped: no AWS credentials" in result.stderr
    # whole, not cut by the redaction ("credentials: WORD" reads as a secret's value)
    said = "spot prices come from EC2 DescribeSpotPriceHistory, which needs them"
    assert said in " ".join(result.stderr.split()) and "***" not in result.stderr


def test_bad_input_exits_2(capsys):
    result = run_cli(capsys, "pricing", "refresh", "--cloud", "azur")
    assert result.code == 2 and "did you mean azure" in result.stderr


def test_a_refresh_killed_mid_way_leaves_the_previous_catalog_intact(
    price_fake, isolated_user_dirs
):
    """SIGKILL a refresh while it waits for Azure's second page: the catalog it was
    refreshing is byte for byte the one before, and no status was written."""
    catalog = write_catalog(isolated_user_dirs / "offers.csv")
    before = catalog.read_bytes()
    price_fake.stall = "azure:1"
    env = dict(os.environ)
    child = subprocess.Popen(
        [sys.executable, "-m", "broker", "pricing", "refresh", "--cloud", "azure,gcp",
         "--catalog", str(catalog)],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert price_fake.stalled.wait(30), "the refresh never reached the stalled page"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    assert catalog.read_bytes() == before
    assert not (isolated_user_dirs / "offers.status.json").exists()
    assert sorted(p.name for p in isolated_user_dirs.iterdir() if p.name.startswith(".")) == []


def test_automatic_refresh_is_off_by_default_never_in_ci_and_not_repeated(
    price_fake, isolated_user_dirs, monkeypatch
):
    monkeypatch.delenv("CI", raising=False)
    assert auto_refresh() is None  # off by default
    monkeypatch.setenv("BROKER_AUTO_REFRESH_DAYS", "7")
    monkeypatch.setenv("CI", "true")
    assert auto_refresh() is None and not user_catalog(isolated_user_dirs).exists()
    monkeypatch.delenv("CI")
    assert auto_refresh(isolated_user_dirs / "team.csv") is None  # a chosen file: never
    done = auto_refresh()
    assert done is not None and done.written and user_catalog(isolated_user_dirs).exists()
    assert auto_refresh() is None  # just refreshed
    later = datetime.now(UTC) + timedelta(days=8)
    assert auto_refresh(now=later) is not None  # a week on, it is due again


def test_a_command_refreshes_a_due_catalog_first(
    capsys, price_fake, isolated_user_dirs, monkeypatch
):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("BROKER_AUTO_REFRESH_DAYS", "7")
    result = run_cli(capsys, "offers", "--gpu", "A100", "-o", "json")
    assert result.code == 0, result.stderr
    assert user_catalog(isolated_user_dirs).exists()  # refreshed before answering
    assert json.loads(result.stdout)["catalog"] == str(user_catalog(isolated_user_dirs))


def test_interruptions_the_broker_saw_become_learned_rates(capsys, price_fake, tmp_path):
    """Two spot attempts on a2-highgpu-8g in the state file, 30 h in all, one interrupted:
    GCP rows of that type and region get 1/30 per hour, marked as learned."""
    from broker.clock import FixedClock
    from broker.state import JobState, StateStore

    clock = FixedClock(datetime(2026, 11, 1, tzinfo=UTC))
    place = {"cloud": "gcp", "region": "us-central1", "instance_type": "a2-highgpu-8g"}
    state = tmp_path / "state.db"
    with StateStore.open(state, clock) as store:
        for name, hours, outcome in (("a", 20, "interrupted"), ("b", 10, "succeeded")):
            job = store.submit(job_spec(name, "ml"), f"name: {name}\n", name).job_id
            store.transition(job, JobState.PLANNED)
            attempt = store.start_attempt(job, placed(place, 13.5, "spot"))
            assert store.attempt_running(attempt, {"provider_id": f"{name}-vm"})
            clock.advance(timedelta(hours=hours))
            assert store.finish_attempt(attempt, outcome, billed_hours=hours)
    catalog = tmp_path / "offers.csv"
    result = run_cli(
        capsys, "pricing", "refresh", "--cloud", "gcp", "--catalog", str(catalog),
        "--state", str(state),
    )  # fmt: skip
    assert result.code == 0, result.stderr
    rows = read_offer_table(catalog).records()  # `broker offers` does not show the rate
    learned = [r for r in rows if r["source"].endswith("+rate:history")]
    assert {(r["region"], r["instance_type"]) for r in learned} == {
        ("us-central1", "a2-highgpu-8g")
    }
    assert learned[0]["spot_interruption_rate"] == pytest.approx(1 / 30)
