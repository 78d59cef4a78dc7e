"""Shared cloud-adapter pieces: backoff, cool-down, and the catalog as the account can buy it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.clock import FixedClock
from pricing.catalog import read_offer_table
from providers.cloud import (
    CapacityCooldown,
    Headroom,
    Unavailable,
    cooling_unavailable,
    endpoint_override,
    restrict_offers,
    with_backoff,
)
from providers.errors import InvalidRequest, RateLimited
from tests.fakes.offers import write_catalog


@pytest.fixture
def table(tmp_path):
    return read_offer_table(write_catalog(tmp_path / "offers.csv"))


def rows(table, cloud: str) -> dict[tuple[str, str, str], dict]:
    return {
        (r["region"], r["zone"], r["instance_type"]): r
        for r in table.records()
        if r["cloud"] == cloud
    }


def test_endpoint_override_per_cloud(monkeypatch):
    monkeypatch.setenv("BROKER_GCP_ENDPOINT", "http://127.0.0.1:9")
    assert endpoint_override("gcp") == "http://127.0.0.1:9"
    assert endpoint_override("aws") is None


@given(failures=st.integers(min_value=0, max_value=8), attempts=st.integers(1, 6))
def test_backoff_retries_only_throttling_and_is_bounded(failures, attempts):
    calls, pauses = [], []

    def call():
        calls.append(1)
        if len(calls) <= failures:
            raise RateLimited("aws", "slow down")
        return "done"

    if failures < attempts:
        assert with_backoff(call, attempts=attempts, sleep=pauses.append) == "done"
        assert len(calls) == failures + 1
    else:
        with pytest.raises(RateLimited):
            with_backoff(call, attempts=attempts, sleep=pauses.append)
        assert len(calls) == attempts
    assert len(pauses) == len(calls) - 1
    assert all(0 <= p <= 8.0 for p in pauses)


def test_backoff_does_not_retry_other_errors():
    calls = []

    def call():
        calls.append(1)
        raise InvalidRequest("aws", "no such type")

    with pytest.raises(InvalidRequest):
        with_backoff(call, sleep=lambda _: None)
    assert len(calls) == 1


def test_cooldown_ends_after_its_time():
    start = datetime(2026, 11, 29, tzinfo=UTC)
    clock = FixedClock(start)
    cooldown = CapacityCooldown(clock, seconds=300)
    cooldown.mark("p4d.24xlarge", "us-east-1a", "spot")
    assert cooldown.cooling("p4d.24xlarge", "us-east-1a", "spot")
    assert not cooldown.cooling("p4d.24xlarge", "us-east-1a", "on-demand")
    assert not cooldown.cooling("p4d.24xlarge", "us-east-1b", "spot")
    clock.advance(timedelta(seconds=299))
    assert cooldown.active() == [("p4d.24xlarge", "us-east-1a", "spot")]
    clock.advance(timedelta(seconds=1))
    assert not cooldown.cooling("p4d.24xlarge", "us-east-1a", "spot")
    assert cooldown.active() == []


def test_unavailable_rows_lose_the_market_they_cannot_buy(table):
    restricted, reasons = restrict_offers(
        table,
        "gcp",
        [
            Unavailable("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", "", "not in zone"),
            Unavailable("gcp", "us-central1", "us-central1-a", "n1-standard-4", "spot", "no spot"),
            Unavailable("aws", "us-east-1", "", "g4dn.xlarge", "", "other cloud: ignored"),
        ],
    )
    gcp = rows(restricted, "gcp")
    a2 = gcp[("us-central1", "us-central1-a", "a2-highgpu-8g")]
    assert math.isnan(a2["price_spot"]) and math.isnan(a2["price_on_demand"])
    assert a2["capacity"] == 0
    n1 = gcp[("us-central1", "us-central1-a", "n1-standard-4")]
    assert math.isnan(n1["price_spot"]) and n1["price_on_demand"] == 0.54
    assert math.isnan(n1["capacity"])  # still sold on demand; how many is unknown
    assert repr(rows(restricted, "aws")) == repr(rows(table, "aws"))  # other clouds untouched
    assert [r.reason for r in reasons] == ["not in zone", "no spot", "other cloud: ignored"]
    original = rows(table, "gcp")[("us-central1", "us-central1-a", "a2-highgpu-8g")]
    assert original["price_spot"] == 11.6  # the input table is not changed


def test_quota_headroom_becomes_capacity(table):
    p_family = Headroom(
        "us-east-1", "", "Running On-Demand P instances", 200, "vcpus", lambda t: t[0] == "p"
    )
    g_spot = Headroom(
        "us-east-1", "spot", "All G Spot Instance Requests", 2, "vcpus", lambda t: t[0] == "g"
    )
    restricted, reasons = restrict_offers(table, "aws", headroom=[p_family, g_spot])
    aws = rows(restricted, "aws")
    assert aws[("us-east-1", "", "p4d.24xlarge")]["capacity"] == 2  # 200 // 96 vCPUs
    assert aws[("eu-central-1", "", "p4d.24xlarge")]["capacity"] != 2  # another region
    g4 = aws[("us-east-1", "", "g4dn.xlarge")]
    assert math.isnan(g4["price_spot"]) and g4["price_on_demand"] == 0.526  # 4 vCPUs > 2 free
    assert math.isnan(g4["capacity"])  # on demand is still sold, with no known limit
    assert [(r.instance_type, r.market) for r in reasons] == [("g4dn.xlarge", "spot")]
    assert "2 vcpus free" in reasons[0].reason


def test_gpu_quota_counts_gpus(table):
    a100 = Headroom("us-central1", "", "NVIDIA_A100_GPUS", 4, "gpus", lambda t: "a2" in t)
    restricted, reasons = restrict_offers(table, "gcp", headroom=[a100])
    a2 = rows(restricted, "gcp")[("us-central1", "us-central1-a", "a2-highgpu-8g")]
    assert a2["capacity"] == 0 and math.isnan(a2["price_on_demand"])
    assert reasons[0].reason == "quota NVIDIA_A100_GPUS: 4 gpus free"


def test_places_cooling_down_are_not_sold_until_the_cool_down_ends(table):
    clock = FixedClock(datetime(2026, 11, 29, tzinfo=UTC))
    cooldown = CapacityCooldown(clock, seconds=300)
    cooldown.mark("a2-highgpu-8g", "us-central1-a", "spot")
    cooldown.mark("p4d.24xlarge", "us-east-1", "on-demand")
    items = cooling_unavailable(table, "gcp", cooldown)
    assert [(u.zone, u.instance_type, u.market) for u in items] == [
        ("us-central1-a", "a2-highgpu-8g", "spot")
    ]
    restricted, _ = restrict_offers(table, "gcp", items)
    a2 = rows(restricted, "gcp")[("us-central1", "us-central1-a", "a2-highgpu-8g")]
    assert math.isnan(a2["price_spot"]) and a2["price_on_demand"] == 29.39
    aws = cooling_unavailable(table, "aws", cooldown)
    assert [(u.region, u.zone, u.market) for u in aws] == [("us-east-1", "", "on-demand")]
    clock.advance(timedelta(seconds=300))
    assert cooling_unavailable(table, "gcp", cooldown) == []
