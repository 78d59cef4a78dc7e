"""Azure Retail Prices over HTTP: paging, markets told apart, Windows left out."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pricing.sources import azure
from pricing.sources.base import Context
from pricing.sources.fetch import Http, SourceError
from tests.fakes import prices as fakes
from tests.fakes.prices import azure_item

price_fake = fakes.price_fake

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def context(regions: tuple[str, ...] = (), pauses: list | None = None) -> Context:
    return Context(Http(sleep=(pauses if pauses is not None else []).append), NOW, regions)


def by_place(found) -> dict:
    return {(o.region, o.instance_type): o for o in found.offers}


def test_spot_and_on_demand_meters_of_one_size_land_in_their_columns(price_fake):
    found = azure.fetch(context())
    offers = by_place(found)
    h100 = offers[("eastus", "Standard_ND96isr_H100_v5")]
    assert (h100.on_demand, h100.spot) == (Decimal("98.32"), Decimal("18.1695"))
    a100 = offers[("eastus", "Standard_NC24ads_A100_v4")]
    # the Windows spot meter (4.5) and the older on-demand meter (3.9) are not used
    assert (a100.on_demand, a100.spot) == (Decimal("3.673"), Decimal("0.7467"))
    west = offers[("westeurope", "Standard_NC24ads_A100_v4")]
    assert (west.on_demand, west.spot) == (Decimal("4.04"), None)
    assert (h100.shape.accelerator, h100.shape.accelerator_count) == ("H100", 8)
    assert price_fake.calls == ["azure:0", "azure:1", "azure:2"]  # every NextPageLink followed


def test_windows_and_low_priority_meters_are_left_out_and_counted(price_fake):
    found = azure.fetch(context())
    prices = {o.on_demand for o in found.offers} | {o.spot for o in found.offers}
    assert Decimal("120.5") not in prices and Decimal("9.8") not in prices
    assert "2 windows meters left out" in found.notes
    assert "1 low priority meters left out" in found.notes
    assert any("Standard_NV9000x_Z1_v9" in note for note in found.notes)  # unknown GPU facts
    assert ("westeurope", "Standard_NV9000x_Z1_v9") not in by_place(found)


def test_a_throttled_page_is_retried_with_backoff(price_fake):
    price_fake.throttle["azure:1"] = 1
    pauses: list[float] = []
    found = azure.fetch(context(pauses=pauses))
    assert price_fake.calls == ["azure:0", "azure:1", "azure:1", "azure:2"]
    assert len(pauses) == 1 and pauses[0] > 0
    assert len(found.offers) == 3


def test_a_malformed_page_fails_the_source(price_fake):
    price_fake.malformed.add("azure:2")
    with pytest.raises(SourceError, match="malformed page"):
        azure.fetch(context())


def test_a_meter_without_a_price_is_malformed(price_fake):
    broken = azure_item("Standard_NC24ads_A100_v4", "eastus", "1.0")
    del broken["retailPrice"]
    price_fake.azure_pages[1].append(broken)
    with pytest.raises(SourceError, match="malformed meter"):
        azure.fetch(context())


def test_regions_are_filtered_at_the_api_and_again_here(price_fake):
    query = urllib.parse.parse_qs(
        urllib.parse.urlsplit(azure.first_url(context(("eastus",)))).query
    )
    text = query["$filter"][0]
    assert "serviceName eq 'Virtual Machines'" in text and "priceType eq 'Consumption'" in text
    assert "(armRegionName eq 'eastus')" in text and query["meterRegion"] == ["'primary'"]
    found = azure.fetch(context(("west*",)))  # a glob: filtered here only
    assert {o.region for o in found.offers} == {"westeurope"}


def test_a_spot_meter_is_recognised_by_its_meter_name_alone():
    item = azure_item("Standard_NC24ads_A100_v4", "eastus", "0.75")
    item["retailPrice"] = Decimal("0.75")  # as json.loads(parse_float=Decimal) gives it
    item["skuName"] = "NC24ads A100 v4"
    item["meterName"] = "NC24ads A100 v4 Spot"
    assert azure._classify(item, {"windows": 0, "low priority": 0})[2] == "spot"
    item["meterName"] = "NC24ads A100 v4"
    assert azure._classify(item, {"windows": 0, "low priority": 0})[2] == "on-demand"
