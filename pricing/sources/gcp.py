"""GCP: the Cloud Billing Catalog API, Compute Engine's SKUs, combined into offers.

GET https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus
(override the base: BROKER_GCP_BILLING_URL) with `currencyCode=USD`, paged with
`nextPageToken`. Credentials: an API key (BROKER_GCP_PRICING_API_KEY, else
GOOGLE_API_KEY; sent as the X-Goog-Api-Key header, never in the URL), else
application default credentials (google-auth, `gcloud auth application-default login`).

GCP bills a GPU machine as its parts, so an offer's price is, per region and market
(usageType "OnDemand" = on-demand, "Preemptible" = spot), in Decimal:

    vCPUs x "<Family> Instance Core" + GiB x "<Family> Instance Ram" + GPUs x "<GPU> GPU"

with the machine's vCPUs, GiB and GPUs from `shapes.gcp_machines()`, each unit price
the first tier's `units + nanos` (`units.money`), converted once by `units.offer_price`.
A market is missing when any part lacks a SKU in that region. Commitments, custom,
sole-tenant, reserved, premium, DWS and virtual-workstation SKUs are ignored.
Offers are per region (zone "").
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from pricing.sources.base import Context, Fetched, PricedOffer
from pricing.sources.fetch import MissingCredentials, SourceError, where
from pricing.sources.shapes import gcp_machines
from pricing.sources.units import PriceError, money, offer_price, per_hour
from pricing.userio.settings import resolve_text

NAME = "gcp-billing-catalog"
DEFAULT_URL = "https://cloudbilling.googleapis.com"
SERVICE = "services/6F81-5844-456A"  # Compute Engine
PAGE_SIZE = 5000
MAX_PAGES = 500
SCOPE = "https://www.googleapis.com/auth/cloud-billing.readonly"
USAGE_MARKET = {"OnDemand": "on-demand", "Preemptible": "spot"}

# "<Family> Instance Core|Ram running in <place>", spot ones prefixed "Spot Preemptible ".
_HOST = re.compile(
    r"^(?:Spot Preemptible )?(A2|A3|G2|N1 Predefined) Instance (Core|Ram) running in"
)
_HOST_FAMILY = {"A2": "a2", "A3": "a3", "G2": "g2", "N1 Predefined": "n1"}
# GPU SKU spelling -> the importer's accelerator name (`_GCP_FIXED`, `_N1_GPU_LIMITS`).
_GPUS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), name)
    for pattern, name in (
        (r"\bH100 (?:80GB Mega|Mega 80GB|80GB Plus) GPU\b", "H100-MEGA"),
        (r"\bH100 80GB GPU\b", "H100"),
        (r"\bH200 141GB GPU\b", "H200"),
        (r"\bA100 80GB GPU\b", "A100-80GB"),
        (r"\bA100 GPU\b", "A100"),
        (r"\bL4 GPU\b", "L4"),
        (r"\bT4 GPU\b", "T4"),
        (r"\bV100 GPU\b", "V100"),
        (r"\bP100 GPU\b", "P100"),
        (r"\bP4 GPU\b", "P4"),
    )
)
_IGNORED = re.compile(
    r"commit|custom|sole tenancy|reserved|premium|\bDWS\b|workstation|extended|calendar",
    re.IGNORECASE,
)


def endpoint() -> str:
    return (resolve_text("gcp_billing_url") or DEFAULT_URL).rstrip("/")


def auth_headers() -> dict[str, str]:
    """An API key header, else a bearer token from application default credentials."""
    key = resolve_text("gcp_pricing_api_key") or os.environ.get("GOOGLE_API_KEY")
    if key:
        return {"X-Goog-Api-Key": key}
    try:
        import google.auth
        import google.auth.transport.requests
        from google.auth.exceptions import DefaultCredentialsError, RefreshError
    except ImportError:
        raise MissingCredentials(
            "no API key (BROKER_GCP_PRICING_API_KEY or GOOGLE_API_KEY) and google-auth is "
            "not installed for application default credentials"
        ) from None
    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        credentials.refresh(google.auth.transport.requests.Request())
    except DefaultCredentialsError:
        raise MissingCredentials(
            "no API key (BROKER_GCP_PRICING_API_KEY or GOOGLE_API_KEY) and no application "
            "default credentials (gcloud auth application-default login)"
        ) from None
    except RefreshError as exc:
        raise SourceError(f"application default credentials refused: {exc}") from None
    return {"Authorization": f"Bearer {credentials.token}"}


def fetch(ctx: Context) -> Fetched:
    """Every GPU machine's on-demand and spot price per region."""
    headers = auth_headers()
    # (family or GPU, "core" | "ram" | "gpu", market, region) -> (unit price, unit)
    rates: dict[tuple[str, str, str, str], tuple[Decimal, str]] = {}
    skus = 0
    for page_number, page in enumerate(_pages(ctx, headers), start=1):
        for sku in page:
            skus += 1
            for key, rate in _rates(sku):
                if ctx.wants(key[3]):
                    rates.setdefault(key, rate)
        ctx.progress(f"page {page_number}, {skus:,} SKUs")
    regions = sorted({key[3] for key in rates})
    offers = []
    for machine in gcp_machines():
        shape = machine.shape
        for region in regions:
            prices = {}
            for market in ("on-demand", "spot"):
                parts = (
                    rates.get((machine.family, "core", market, region)),
                    rates.get((machine.family, "ram", market, region)),
                    rates.get((machine.gpu_sku, "gpu", market, region)),
                )
                if all(p is not None for p in parts):
                    quantities = (shape.vcpus, shape.memory_gib, shape.accelerator_count)
                    prices[market] = offer_price(
                        (price, unit, quantity)
                        for (price, unit), quantity in zip(parts, quantities, strict=True)
                    )
            if prices:
                offers.append(
                    PricedOffer(
                        "gcp",
                        region,
                        "",
                        machine.instance_type,
                        shape,
                        prices.get("on-demand"),
                        prices.get("spot"),
                    )
                )
    return Fetched(offers, [])


def _pages(ctx: Context, headers: dict[str, str]) -> Iterator[list[Any]]:
    base = f"{endpoint()}/v1/{SERVICE}/skus"
    token = ""
    for number in range(1, MAX_PAGES + 1):
        query = {"currencyCode": "USD", "pageSize": str(PAGE_SIZE)}
        if token:
            query["pageToken"] = token
        url = f"{base}?{urllib.parse.urlencode(query)}"
        page = ctx.http.get_json(url, headers)
        if not isinstance(page, dict) or not isinstance(page.get("skus", []), list):
            raise SourceError(f"{where(url)}: malformed page {number}: no skus list")
        yield page.get("skus", [])
        token = page.get("nextPageToken") or ""
        if not token:
            return
    raise SourceError(f"{where(base)}: more than {MAX_PAGES} pages; nextPageToken loops?")


def _rates(sku: Any) -> list[tuple[tuple[str, str, str, str], tuple[Decimal, str]]]:
    """The (part, kind, market, region) unit prices one SKU sets (none when unused)."""
    try:
        description = sku["description"]
        category = sku["category"]
        market = USAGE_MARKET.get(category.get("usageType", ""))
        if market is None or category.get("resourceFamily") != "Compute":
            return []
        if _IGNORED.search(description):
            return []
        host = _HOST.match(description)
        if host:
            part, kind = _HOST_FAMILY[host.group(1)], host.group(2).lower()
        elif category.get("resourceGroup") == "GPU":
            names = [name for pattern, name in _GPUS if pattern.search(description)]
            if not names:
                return []
            part, kind = names[0], "gpu"
        else:
            return []
        expression = sku["pricingInfo"][0]["pricingExpression"]
        tiers = sorted(
            expression["tieredRates"], key=lambda t: Decimal(str(t.get("startUsageAmount", 0)))
        )
        price = tiers[0]["unitPrice"]
        if price.get("currencyCode", "USD") != "USD":
            raise PriceError(f"currency {price.get('currencyCode')!r}, not USD")
        amount, unit = money(price.get("units", "0"), price.get("nanos", 0)), _unit(expression)
        per_hour(amount, unit)  # a unit we cannot convert is a malformed page, found now
        regions = list(sku["serviceRegions"])
    except (KeyError, IndexError, TypeError, AttributeError, PriceError) as exc:
        name = sku.get("skuId", "?") if isinstance(sku, dict) else "?"
        raise SourceError(f"malformed SKU {name}: {exc!r}") from None
    if amount <= 0:
        return []
    return [((part, kind, market, region), (amount, unit)) for region in regions]


def _unit(expression: dict) -> str:
    """GCP's usageUnit: "h" (per vCPU- or GPU-hour) or "GiBy.h" (per GiB-hour)."""
    return str(expression["usageUnit"])
