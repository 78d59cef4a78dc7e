"""AWS over real HTTP: the Price List (bulk file and Pricing API) and moto's spot history."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pricing.sources import aws, aws_spot
from pricing.sources.base import Context
from pricing.sources.fetch import Http, MissingCredentials, SourceError
from pricing.sources.shapes import aws_shape
from tests.fakes import aws as aws_fakes
from tests.fakes import prices as fakes
from tests.fakes.prices import seeded_spot_history, spot_point

moto_server, aws_clients, aws_env = aws_fakes.moto_server, aws_fakes.aws_clients, aws_fakes.aws_env
price_fake = fakes.price_fake
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def context(regions: tuple[str, ...] = ("us-east-1", "us-west-2")) -> Context:
    return Context(Http(sleep=lambda s: None), NOW, regions)


def by_place(found) -> dict:
    return {(o.region, o.zone, o.instance_type): o for o in found.offers}


def test_bulk_files_give_linux_shared_on_demand_prices(price_fake):
    found = aws.fetch_on_demand(context())
    offers = by_place(found)
    assert set(offers) == {
        ("us-east-1", "", "p4d.24xlarge"),
        ("us-east-1", "", "g5.xlarge"),
        ("us-west-2", "", "p5.48xlarge"),
        ("us-west-2", "", "g5.xlarge"),
    }
    # Windows 1.81, Dedicated 1.21, a capacity reservation, SQL Web 1.12 and the
    # reserved rows of the bulk file are all left out
    assert offers[("us-east-1", "", "g5.xlarge")].on_demand == Decimal("1.0060000000")
    p4d = offers[("us-east-1", "", "p4d.24xlarge")]
    assert (p4d.on_demand, p4d.spot) == (Decimal("21.9576000000"), None)
    assert (p4d.shape.accelerator, p4d.shape.accelerator_count) == ("A100", 8)
    assert (p4d.shape.vcpus, p4d.shape.memory_gib) == (96, 1152)
    assert found.regions == {"us-east-1", "us-west-2"}
    assert "on-demand from the bulk offer files" in found.notes
    assert price_fake.calls == ["aws-bulk:us-east-1", "aws-bulk:us-west-2"]


def test_a_region_without_a_bulk_file_is_noted_not_fatal(price_fake):
    found = aws.fetch_on_demand(context(("us-east-1", "eu-south-9")))
    assert found.regions == {"us-east-1"}
    assert any(n.startswith("eu-south-9: no price file") for n in found.notes)


def test_a_malformed_bulk_file_fails_the_source(price_fake):
    price_fake.aws_bulk["us-east-1"] = '"FormatVersion","v1.0"\n"no","header"\n'
    with pytest.raises(SourceError, match="malformed bulk file: no header row"):
        aws.fetch_on_demand(context(("us-east-1",)))


def test_the_pricing_api_is_used_with_credentials_paged_and_retried(
    price_fake, aws_env, monkeypatch
):
    monkeypatch.setenv("BROKER_AWS_QUOTAS_ENDPOINT", f"{price_fake.url}/")
    price_fake.throttle["pricing-api:2"] = 1
    found = aws.fetch_on_demand(context(("us-east-1",)))
    offers = by_place(found)
    assert set(offers) == {("us-east-1", "", "p4d.24xlarge"), ("us-east-1", "", "g5.xlarge")}
    assert offers[("us-east-1", "", "g5.xlarge")].on_demand == Decimal("1.0060000000")
    assert "on-demand from the Pricing API" in found.notes
    # 9 products, 2 a page: 5 pages, the third throttled once and retried by botocore
    pages = [c for c in price_fake.calls if c.startswith("pricing-api")]
    assert pages == [f"pricing-api:{i}" for i in (0, 1, 2, 2, 3, 4)]
    sent = {(f["Field"], f["Value"]) for f in price_fake.api_filters[0]}
    assert {("operatingSystem", "Linux"), ("tenancy", "Shared"), ("preInstalledSw", "NA")} <= sent
    assert {("capacitystatus", "Used"), ("regionCode", "us-east-1")} <= sent


SHAPE = aws_shape("p4d.24xlarge", "96", "1152 GiB", "8")
G5 = aws_shape("g5.xlarge", "4", "16 GiB", "1")
POINTS = {
    "us-east-1": [
        spot_point("p4d.24xlarge", "us-east-1a", "8.000000", "2026-04-10T00:00:00.000Z"),
        spot_point("p4d.24xlarge", "us-east-1a", "10.000000", "2026-04-20T00:00:00.000Z"),
        spot_point("p4d.24xlarge", "us-east-1b", "7.500000", "2026-03-01T00:00:00.000Z"),
        spot_point("g5.xlarge", "us-east-1a", "0.436100", "2026-04-30T12:00:00.000Z"),
        {**spot_point("p4d.24xlarge", "us-east-1a", "99", "2026-04-25T00:00:00.000Z"),
         "ProductDescription": "Windows"},
    ],
    "us-west-2": [spot_point("g5.xlarge", "us-west-2c", "0.391000", "2026-04-28T00:00:00.000Z")],
}  # fmt: skip


def test_spot_prices_per_zone_are_the_latest_of_30_days(aws_env):
    types = {"us-east-1": {"p4d.24xlarge": SHAPE, "g5.xlarge": G5}, "us-west-2": {"g5.xlarge": G5}}
    with seeded_spot_history(POINTS, page_size=2) as seen:
        found = aws_spot.fetch_spot(context(), types)
    offers = by_place(found)
    assert offers[("us-east-1", "us-east-1a", "p4d.24xlarge")].spot == Decimal("10.000000")
    assert offers[("us-east-1", "us-east-1b", "p4d.24xlarge")].spot == Decimal("7.500000")
    assert offers[("us-west-2", "us-west-2c", "g5.xlarge")].spot == Decimal("0.391000")
    assert all(o.on_demand is None for o in found.offers)  # spot rows carry spot only
    assert len(found.offers) == 4
    assert [s[0] for s in seen].count("us-east-1") == 3  # 5 records, 2 a page: paged
    history = {(s.zone, s.instance_type): s for s in found.extra["history"]}
    a = history[("us-east-1a", "p4d.24xlarge")]
    # 8.00 held 10 days, 10.00 held 11 days: time-weighted mean (80 + 110) / 21
    assert (a.minimum, a.maximum, a.changes) == (Decimal("8.000000"), Decimal("10.000000"), 1)
    assert a.mean == pytest.approx(190 / 21)
    assert a.stdev == pytest.approx(
        ((10 * (8 - 190 / 21) ** 2 + 11 * (10 - 190 / 21) ** 2) / 21) ** 0.5
    )
    b = history[("us-east-1b", "p4d.24xlarge")]
    assert (b.mean, b.stdev, b.changes) == (7.5, 0.0, 0)  # set before the window, held throughout


def test_a_region_the_account_has_not_enabled_is_skipped_not_fatal(aws_env):
    # (us-west-2 plays the opt-in region: a region moto has not loaded yet costs seconds)
    types = {"us-east-1": {"p4d.24xlarge": SHAPE}, "us-west-2": {"g5.xlarge": G5}}
    with seeded_spot_history(POINTS, refuse={"us-west-2": "OptInRequired"}):
        found = aws_spot.fetch_spot(context(("*",)), types)
    assert found.regions == {"us-east-1"}
    assert found.notes == ["us-west-2: not enabled for this account (OptInRequired); skipped"]
    with seeded_spot_history(POINTS, refuse={"us-east-1": "AuthFailure"}):
        with pytest.raises(SourceError, match="every region refused"):
            aws_spot.fetch_spot(context(), {"us-east-1": {"p4d.24xlarge": SHAPE}})


def test_spot_needs_credentials(price_fake):
    with pytest.raises(MissingCredentials, match="DescribeSpotPriceHistory"):
        aws_spot.fetch_spot(context(), {"us-east-1": {"p4d.24xlarge": SHAPE}})


def test_spot_refused_by_ec2_says_why(aws_env):
    with aws_fakes.failing_ec2("describe_spot_price_history", "UnauthorizedOperation"):
        with pytest.raises(SourceError, match="UnauthorizedOperation.*permission denied"):
            aws_spot.fetch_spot(context(), {"us-east-1": {"p4d.24xlarge": SHAPE}})


def test_gpu_families_map_to_canonical_gpus():
    assert aws_shape("p5.48xlarge", "192", "2048 GiB", "8").accelerator == "H100"
    assert aws_shape("g6e.xlarge", "4", "32 GiB", "1").accelerator == "L40S"
    assert aws_shape("g6e.xlarge", "4", "32 GiB", "1").accelerator_memory_gib == 48
    assert aws_shape("g4ad.xlarge", "4", "16 GiB", "1") is None  # Radeon: no GPU facts
    assert aws_shape("p4d.24xlarge", "96", "NA", "8") is None  # not a number
