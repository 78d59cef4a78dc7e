"""Azure: the Retail Prices REST API (public, no credentials).

GET https://prices.azure.com/api/retail/prices (override: BROKER_AZURE_PRICES_URL)
with `$filter=serviceName eq 'Virtual Machines' and priceType eq 'Consumption'`
and the GPU families' sizes (`armSkuName` containing "Standard_N"), one region per
--region name when given; pages follow `NextPageLink` until it is empty.

Each item is one meter: a size in a region, in one market. Told apart by:
- Windows: `productName` contains "Windows" -> dropped (prices are Linux);
- low priority (Batch's old market): "Low Priority" in `skuName`/`meterName` -> dropped;
- spot: "Spot" in `skuName` or `meterName` -> the spot column; else on-demand;
- not USD, not per hour, a price of 0, or not the primary meter region -> dropped.
When a (region, size, market) has several meters, the newest `effectiveStartDate`
wins. Sizes come from `shapes.AZURE_SIZES`, else the catalog; zone is "" (Azure
prices per region).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from pricing.sources.base import Context, Fetched, PricedOffer, skipped_note
from pricing.sources.fetch import SourceError, where
from pricing.sources.shapes import AZURE_SIZES, lookup
from pricing.sources.units import PriceError, decimal, per_hour
from pricing.userio.settings import resolve_text

NAME = "azure-retail-prices"
DEFAULT_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
MAX_PAGES = 2000  # a NextPageLink loop would otherwise never end
_SPOT = re.compile(r"\bSpot\b")
_LOW_PRIORITY = re.compile(r"\bLow Priority\b", re.IGNORECASE)


def endpoint() -> str:
    return resolve_text("azure_prices_url") or DEFAULT_URL


def first_url(ctx: Context) -> str:
    """The first page's URL: VM meters of the GPU families, in the asked regions."""
    clauses = [
        "serviceName eq 'Virtual Machines'",
        "priceType eq 'Consumption'",
        "contains(armSkuName, 'Standard_N')",
    ]
    exact = ctx.exact_regions()
    if exact:
        clauses.append("(" + " or ".join(f"armRegionName eq '{r}'" for r in exact) + ")")
    query = urllib.parse.urlencode(
        {"api-version": API_VERSION, "meterRegion": "'primary'", "$filter": " and ".join(clauses)}
    )
    return f"{endpoint()}?{query}"


def fetch(ctx: Context) -> Fetched:
    """Every Linux GPU size's on-demand and spot price per region."""
    best: dict[tuple[str, str, str], tuple[str, Decimal]] = {}  # -> (effective date, price)
    dropped = {"windows": 0, "low priority": 0}
    meters = 0
    for page_number, items in enumerate(_pages(ctx), start=1):
        for item in items:
            meters += 1
            kept = _classify(item, dropped)
            if kept is None:
                continue
            region, size, market, price, since = kept
            if not ctx.wants(region):
                continue
            key = (region, size, market)
            if key not in best or since > best[key][0]:
                best[key] = (since, price)
        ctx.progress(f"page {page_number}, {meters:,} meters")
    shapes = ctx.shapes.get("azure", {})
    prices: dict[tuple[str, str], dict[str, Decimal]] = {}
    for (region, size, market), (_, price) in best.items():
        prices.setdefault((region, size), {})[market] = price
    offers, unknown = [], set()
    for (region, size), markets in sorted(prices.items()):
        shape = lookup(AZURE_SIZES, shapes, size)
        if shape is None:
            unknown.add(size)
            continue
        offers.append(
            PricedOffer(
                "azure", region, "", size, shape, markets.get("on-demand"), markets.get("spot")
            )
        )
    notes = skipped_note("size", unknown)
    notes += [f"{n:,} {kind} meters left out" for kind, n in dropped.items() if n]
    return Fetched(offers, notes)


def _pages(ctx: Context) -> Iterator[list[dict[str, Any]]]:
    url: str | None = first_url(ctx)
    seen = 0
    while url:
        seen += 1
        if seen > MAX_PAGES:
            raise SourceError(f"{where(url)}: more than {MAX_PAGES} pages; NextPageLink loops?")
        page = ctx.http.get_json(url)
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise SourceError(f"{where(url)}: malformed page {seen}: no Items list")
        yield page["Items"]
        url = page.get("NextPageLink") or None


def _classify(item: Any, dropped: dict[str, int]) -> tuple[str, str, str, Decimal, str] | None:
    """(region, size, market, USD per hour, effective date) of a Linux VM meter, or None."""
    try:
        product, sku, meter = item["productName"], item["skuName"], item["meterName"]
        size, region = item["armSkuName"], item["armRegionName"]
        if item.get("currencyCode", "USD") != "USD" or item.get("type") not in (
            None,
            "Consumption",
        ):
            return None
        if item.get("isPrimaryMeterRegion") is False or not size or not region:
            return None
        if "Windows" in product:
            dropped["windows"] += 1
            return None
        if _LOW_PRIORITY.search(sku) or _LOW_PRIORITY.search(meter):
            dropped["low priority"] += 1
            return None
        market = "spot" if _SPOT.search(sku) or _SPOT.search(meter) else "on-demand"
        price = per_hour(decimal(item["retailPrice"]), item["unitOfMeasure"])
    except (KeyError, TypeError, PriceError) as exc:
        raise SourceError(f"malformed meter {_describe(item)}: {exc!r}") from None
    if price <= 0:
        return None
    return region, size, market, price, str(item.get("effectiveStartDate", ""))


def _describe(item: Any) -> str:
    if isinstance(item, dict):
        return repr(item.get("meterId") or item.get("armSkuName") or "?")
    return repr(item)[:60]
