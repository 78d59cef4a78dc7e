"""Interruption rates: the advisor's bands, learned history, and how a row names its source."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.sources import interruption as rates
from pricing.sources.base import Context
from pricing.sources.fetch import Http, SourceError
from tests.fakes import prices as fakes

price_fake = fakes.price_fake


def test_bands_become_hourly_rates_by_the_documented_conversion():
    for label, p in (("<5%", 0.05), ("5-10%", 0.10), ("10-15%", 0.15), ("15-20%", 0.20)):
        assert rates.band_rate(label) == pytest.approx(-math.log(1 - p) / 24)
    assert rates.band_rate(">20%") == pytest.approx(-math.log(0.7) / 24)  # open band: 30%
    ordered = [rates.band_rate(r["label"]) for r in fakes.ADVISOR_RANGES]
    assert ordered == sorted(ordered) and len(set(ordered)) == 5
    with pytest.raises(ValueError):
        rates.band_rate("often")


def test_the_advisor_document_gives_linux_rates_per_region_and_type(price_fake):
    ctx = Context(Http(sleep=lambda s: None), datetime(2026, 5, 1, tzinfo=UTC))
    found = rates.fetch_advisor(ctx)
    assert found[("aws", "us-east-1", "p4d.24xlarge")] == rates.Rate(
        rates.band_rate(">20%"), "spot-advisor"
    )
    # g5.xlarge is band 0 on Linux (the fake gives Windows the opposite band)
    assert found[("aws", "us-east-1", "g5.xlarge")].per_hour == rates.band_rate("<5%")
    assert found[("aws", "us-west-2", "p5.48xlarge")].per_hour == rates.band_rate("10-15%")
    assert len(found) == 3


def test_a_malformed_advisor_document_is_reported(price_fake):
    price_fake.advisor = {"ranges": [], "spot_advisor": {"us-east-1": {"Linux": {"x": {}}}}}
    ctx = Context(Http(sleep=lambda s: None), datetime(2026, 5, 1, tzinfo=UTC))
    with pytest.raises(SourceError, match="malformed advisor document"):
        rates.fetch_advisor(ctx)


def test_history_needs_enough_hours_and_never_says_zero():
    seen = [
        rates.Observation("gcp", "us-central1", "a2-highgpu-8g", 30.0, 3),
        rates.Observation("gcp", "us-central1", "a2-highgpu-8g", 10.0, 1),
        rates.Observation("aws", "us-east-1", "g5.xlarge", 48.0, 0),
        rates.Observation("azure", "eastus", "Standard_NC24ads_A100_v4", 5.0, 2),
    ]
    learned = rates.history_rates(seen)
    assert learned[("gcp", "us-central1", "a2-highgpu-8g")] == rates.Rate(4 / 40, "history")
    assert learned[("aws", "us-east-1", "g5.xlarge")].per_hour == 0.5 / 48
    assert ("azure", "eastus", "Standard_NC24ads_A100_v4") not in learned  # only 5 hours


def test_the_advisor_comes_before_history():
    key = ("aws", "us-east-1", "g5.xlarge")
    advisor = {key: rates.Rate(0.002, "spot-advisor")}
    history = {key: rates.Rate(0.1, "history"), ("gcp", "r", "t"): rates.Rate(0.2, "history")}
    assert rates.choose(key, advisor, history).source == "spot-advisor"
    assert rates.choose(("gcp", "r", "t"), advisor, history).source == "history"
    assert rates.choose(("azure", "r", "t"), advisor, history) is None  # planner default


@given(
    st.sampled_from(["aws-price-list", "gcp-billing-catalog", "https://x.test/p"]),
    st.sampled_from(["", "+rate:spot-advisor", "+rate:history"]),
    st.sampled_from(["", "+overlay:/etc/o.yaml"]),
)
def test_the_rate_tag_is_read_and_removed_whatever_follows(head, tag, overlay):
    source = head + tag + overlay
    assert rates.rate_source(source) == tag.removeprefix("+rate:")
    assert rates.without_rate_tag(source) == head + overlay
