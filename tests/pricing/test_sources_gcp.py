"""GCP Cloud Billing Catalog over HTTP: SKUs combined into per-machine prices."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pricing.sources import gcp
from pricing.sources.base import Context
from pricing.sources.fetch import Http, MissingCredentials, SourceError
from tests.fakes import prices as fakes

price_fake = fakes.price_fake
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def context(regions: tuple[str, ...] = (), pauses: list | None = None) -> Context:
    return Context(Http(sleep=(pauses if pauses is not None else []).append), NOW, regions)


def offers(found) -> dict:
    return {(o.region, o.instance_type, o.shape.accelerator_count): o for o in found.offers}


# (region, machine, GPUs) -> (on-demand, spot), summed by hand from the SKUs in the fake:
# A2 core 0.031611 (spot 0.009483), RAM 0.004237 (0.001271), A100 2.933908 (1.468);
# G2 core 0.024988, RAM 0.002927, L4 0.56; N1 core 0.031611, RAM 0.004237, T4 0.35;
# A2 in europe-west4: core 0.034802, RAM 0.004664, A100 3.23.
HAND = {
    # 96 x 0.031611 + 680 x 0.004237 + 8 x 2.933908 = 3.034656 + 2.88116 + 23.471264
    ("us-central1", "a2-highgpu-8g", 8): ("29.387080", "13.518648"),
    # 12 x 0.031611 + 85 x 0.004237 + 2.933908 = 0.379332 + 0.360145 + 2.933908
    ("us-central1", "a2-highgpu-1g", 1): ("3.673385", "1.689831"),
    # 8 x 0.024988 + 32 x 0.002927 + 0.56 (no G2 spot SKU: no spot price)
    ("us-central1", "g2-standard-8", 1): ("0.853568", None),
    # n1-standard-8 (8 vCPUs, 30 GiB) + one T4: 0.252888 + 0.12711 + 0.35
    ("us-central1", "n1-standard-8", 1): ("0.729998", None),
    # 12 x 0.034802 + 85 x 0.004664 + 3.23
    ("europe-west4", "a2-highgpu-1g", 1): ("4.044064", None),
}


@pytest.mark.parametrize("key", sorted(HAND))
def test_a_machine_costs_the_sum_of_its_skus(price_fake, key):
    found = offers(gcp.fetch(context()))
    on_demand, spot = HAND[key]
    offer = found[key]
    assert offer.on_demand == Decimal(on_demand)
    assert offer.spot == (Decimal(spot) if spot else None)


def test_skus_that_are_not_list_prices_are_ignored(price_fake):
    found = gcp.fetch(context())
    t4 = offers(found)[("us-central1", "n1-standard-8", 1)]
    # the T4 Virtual Workstation (0.55), A2 Custom core (0.099) and the commitment SKU
    # would each change these sums
    assert t4.on_demand == Decimal("0.729998")
    assert offers(found)[("us-central1", "a2-highgpu-8g", 8)].on_demand == Decimal("29.387080")


def test_a_machine_is_offered_only_where_every_part_is_priced(price_fake):
    found = gcp.fetch(context())
    names = {(o.region, o.instance_type) for o in found.offers}
    assert ("europe-west4", "g2-standard-8") not in names  # no G2 or L4 SKU there
    assert not any(n.startswith("a2-ultragpu") for _, n in names)  # no A100 80GB SKU
    assert {o.shape.accelerator for o in found.offers} == {"A100", "L4", "T4"}
    assert price_fake.calls == ["gcp:0", "gcp:1"]  # both pages, via nextPageToken


def test_a_throttled_page_is_retried(price_fake):
    price_fake.throttle["gcp:1"] = 1
    pauses: list[float] = []
    assert gcp.fetch(context(pauses=pauses)).offers
    assert price_fake.calls == ["gcp:0", "gcp:1", "gcp:1"] and pauses == [1.0]


def test_a_malformed_sku_fails_the_source(price_fake):
    broken = fakes.gcp_sku("A2 Instance Core running in Asia", "CPU", "OnDemand", ["x"], 0, 1)
    del broken["pricingInfo"]
    price_fake.gcp_pages[1].append(broken)
    with pytest.raises(SourceError, match="malformed SKU"):
        gcp.fetch(context())


def test_no_key_and_no_application_default_credentials_is_a_skip(price_fake, monkeypatch):
    monkeypatch.delenv("BROKER_GCP_PRICING_API_KEY")
    with pytest.raises(MissingCredentials, match="BROKER_GCP_PRICING_API_KEY"):
        gcp.fetch(context())
    assert price_fake.calls == []


def test_a_wrong_key_is_refused_by_the_api(price_fake, monkeypatch):
    monkeypatch.setenv("BROKER_GCP_PRICING_API_KEY", "wrong")
    with pytest.raises(SourceError, match="HTTP 403"):
        gcp.fetch(context())


def test_regions_are_filtered(price_fake):
    found = gcp.fetch(context(("europe-*",)))
    assert {o.region for o in found.offers} == {"europe-west4"}
