"""AWS: on-demand from the AWS Price List, spot per zone from the spot price history.

**On-demand** (source `aws-price-list`), one of two ways to the same Price List:
- with AWS credentials (boto3's standard chain): the Pricing API `GetProducts`
  (endpoint: BROKER_AWS_QUOTAS_ENDPOINT, else BROKER_AWS_ENDPOINT, like the AWS
  adapter; else the public one in us-east-1), filtered server-side to Linux, shared
  tenancy, no pre-installed software, capacity status Used, "GPU instance" family;
- without: the public bulk offer file of each region,
  `<base>/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv` (base:
  BROKER_AWS_PRICING_URL, default https://pricing.us-east-1.amazonaws.com), the CSV
  form of `index.json`, streamed line by line (hundreds of MB per region: minutes).
  Regions: --region, else those the catalog already lists for AWS.
Either way a product is kept when `_wanted` says so, and its GPU model comes from
`shapes.AWS_FAMILY_GPU` (the Price List gives vCPUs, memory and a GPU count only).
Rows are per region (zone ""), on-demand only.

**Spot** (source `aws-spot-history`) is `pricing.sources.aws_spot`'s.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from pricing.regions import REGION_COUNTRY
from pricing.sources.aws_session import client_config, client_error, session_with_credentials
from pricing.sources.base import Context, Fetched, PricedOffer, skipped_note
from pricing.sources.fetch import NotFound, SourceError, where
from pricing.sources.shapes import AWS_FAMILY_GPU, aws_shape, lookup
from pricing.sources.units import PriceError, decimal, per_hour
from pricing.userio.settings import resolve_text

ON_DEMAND = "aws-price-list"
DEFAULT_BULK_URL = "https://pricing.us-east-1.amazonaws.com"
# Price List attribute -> required value (None: absent is fine).
_REQUIRED = {
    "operatingSystem": ("Linux",),
    "tenancy": ("Shared",),
    "preInstalledSw": ("NA",),
    "capacitystatus": ("Used",),
    "licenseModel": ("No License required", None),
    "locationType": ("AWS Region", None),
    "marketoption": ("OnDemand", None),
}
_API_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "instanceFamily": "GPU instance",
}
# Bulk CSV header -> Price List attribute name.
_CSV_ATTRIBUTES = {
    "Instance Type": "instanceType",
    "Operating System": "operatingSystem",
    "Tenancy": "tenancy",
    "Pre Installed S/W": "preInstalledSw",
    "CapacityStatus": "capacitystatus",
    "License Model": "licenseModel",
    "Location Type": "locationType",
    "MarketOption": "marketoption",
    "Region Code": "regionCode",
    "vCPU": "vcpu",
    "Memory": "memory",
    "GPU": "gpu",
}
_CSV_TERMS = ("TermType", "Unit", "PricePerUnit", "Currency")
_AWS_REGION = re.compile(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d+")
_CSV_OPTIONAL = ("MarketOption", "Region Code", "Location Type", "License Model")


def bulk_url() -> str:
    return (resolve_text("aws_pricing_url") or DEFAULT_BULK_URL).rstrip("/")


def api_endpoint() -> str | None:
    return resolve_text("aws_quotas_endpoint") or resolve_text("aws_endpoint")


# --- on-demand ------------------------------------------------------------------------------


def fetch_on_demand(ctx: Context) -> Fetched:
    """GPU instances' on-demand prices per region (see the module docstring)."""
    session = session_with_credentials()
    notes: list[str] = []
    read: set[str] | None = None
    if session is not None:
        found, how = _from_api(ctx, session), "Pricing API"
    else:
        read = set()
        found, how = _from_bulk(ctx, bulk_regions(ctx), read, notes), "bulk offer files"
    offers: dict[tuple[str, str], PricedOffer] = {}
    unknown, fallback = set(), ctx.shapes.get("aws", {})
    for region, attributes, price in found:
        name = attributes.get("instanceType", "")
        if not ctx.wants(region):
            continue
        shape = aws_shape(
            name,
            attributes.get("vcpu", ""),
            attributes.get("memory", ""),
            attributes.get("gpu", ""),
        ) or lookup({}, fallback, name)
        if shape is None:
            unknown.add(name)
            continue
        key = (region, name)  # two Linux products of one type (rare): the cheaper one
        if key not in offers or price < offers[key].on_demand:  # type: ignore[operator]
            offers[key] = PricedOffer("aws", region, "", name, shape, price, None)
    notes = [f"on-demand from the {how}", *notes, *skipped_note("instance type", unknown)]
    return Fetched(list(offers.values()), notes, regions=None if read is None else frozenset(read))


def _wanted(attributes: Mapping[str, Any]) -> bool:
    """Linux, shared tenancy, no pre-installed software, capacity Used, a GPU family."""
    for name, allowed in _REQUIRED.items():
        if attributes.get(name) not in allowed and not (
            None in allowed and not attributes.get(name)
        ):
            return False
    return str(attributes.get("instanceType", "")).partition(".")[0] in AWS_FAMILY_GPU


def _hourly(unit: str, usd: Any) -> Decimal:
    return per_hour(decimal(usd), unit)


def _from_api(ctx: Context, session: Any) -> Iterator[tuple[str, dict, Decimal]]:
    from botocore.exceptions import BotoCoreError, ClientError

    client = session.client(
        "pricing", region_name="us-east-1", endpoint_url=api_endpoint(), config=client_config()
    )
    filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in _API_FILTERS.items()]
    exact = [r for r in ctx.exact_regions() or () if _AWS_REGION.fullmatch(r)]
    if ctx.exact_regions() and not exact:
        return  # only other clouds' regions were asked for
    per_region = [[{"Type": "TERM_MATCH", "Field": "regionCode", "Value": r}] for r in exact]
    products = 0
    try:
        paginator = client.get_paginator("get_products")
        for extra in per_region or [[]]:
            pages = paginator.paginate(
                ServiceCode="AmazonEC2", Filters=filters + extra, FormatVersion="aws_v1"
            )
            for number, page in enumerate(pages, start=1):
                for text in page.get("PriceList", []):
                    products += 1
                    found = _api_product(text, number)
                    if found is not None:
                        yield found
                ctx.progress(f"Pricing API page {number}, {products:,} products")
    except ClientError as exc:
        raise SourceError(f"Pricing API: {client_error(exc)}") from None
    except BotoCoreError as exc:
        raise SourceError(f"Pricing API: {exc}") from None


def _api_product(text: Any, page: int) -> tuple[str, dict, Decimal] | None:
    try:
        product = json.loads(text, parse_float=Decimal) if isinstance(text, str) else text
        attributes = product["product"]["attributes"]
        if not _wanted(attributes):
            return None
        prices = [
            _hourly(dimension["unit"], dimension["pricePerUnit"]["USD"])
            for term in product["terms"]["OnDemand"].values()
            for dimension in term["priceDimensions"].values()
        ]
        region = attributes["regionCode"]
    except (ValueError, KeyError, TypeError, AttributeError, PriceError) as exc:
        raise SourceError(f"Pricing API: malformed product on page {page}: {exc!r}") from None
    prices = [p for p in prices if p > 0]
    return (region, attributes, min(prices)) if prices else None


def bulk_regions(ctx: Context) -> list[str]:
    """Regions whose bulk file is read: --region (globs over known AWS regions), else the
    AWS regions of the catalog being refreshed."""
    known = sorted({r for c, r in REGION_COUNTRY if c == "aws"})
    if ctx.regions:
        named = [r for r in ctx.regions if _AWS_REGION.fullmatch(r) and r not in known]
        return [r for r in known if ctx.wants(r)] + named
    return sorted(ctx.known_regions.get("aws", ()))


def _from_bulk(
    ctx: Context, regions: list[str], read: set[str], notes: list[str]
) -> Iterator[tuple[str, dict, Decimal]]:
    """Each region's bulk file; `read` gets the regions that have one, `notes` the others."""
    if not regions and ctx.regions:
        return  # only other clouds' regions were asked for
    if not regions:
        raise SourceError("no AWS region to read: pass --region (the bulk files are per region)")
    for index, region in enumerate(regions, start=1):
        url = f"{bulk_url()}/offers/v1.0/aws/AmazonEC2/current/{region}/index.csv"
        ctx.progress(f"bulk file {index}/{len(regions)}: {region}")
        try:
            for attributes, price in _bulk_rows(ctx, url):
                yield region, attributes, price
        except NotFound:
            notes.append(f"{region}: no price file (not an AWS region?)")
            continue
        read.add(region)


def _bulk_rows(ctx: Context, url: str) -> Iterator[tuple[dict, Decimal]]:
    lines = ctx.http.lines(url)
    header = None
    for line in lines:  # metadata lines (FormatVersion, Disclaimer, ...) precede the header
        if line.startswith('"SKU"') or line.startswith("SKU,"):
            header = next(csv.reader([line]))
            break
    if header is None:
        raise SourceError(f"{where(url)}: malformed bulk file: no header row")
    missing = [c for c in (*_CSV_ATTRIBUTES, *_CSV_TERMS) if c not in header]
    missing = [c for c in missing if c not in _CSV_OPTIONAL]
    if missing:
        raise SourceError(f"{where(url)}: malformed bulk file: no column {missing[0]!r}")
    at = {name: header.index(name) for name in (*_CSV_ATTRIBUTES, *_CSV_TERMS) if name in header}
    for number, row in enumerate(csv.reader(lines), start=1):
        if number % 200_000 == 0:
            ctx.progress(f"{where(url)}: {number:,} rows")
        if len(row) != len(header):
            raise SourceError(
                f"{where(url)}: malformed bulk file: row {number} has {len(row)} fields"
            )
        if row[at["TermType"]] != "OnDemand" or row[at["Currency"]] not in ("USD", ""):
            continue
        attributes = {_CSV_ATTRIBUTES[c]: row[i] for c, i in at.items() if c in _CSV_ATTRIBUTES}
        if not _wanted(attributes):
            continue
        try:
            price = _hourly(row[at["Unit"]], row[at["PricePerUnit"]])
        except PriceError as exc:
            raise SourceError(f"{where(url)}: malformed bulk file, row {number}: {exc}") from None
        if price > 0:
            yield attributes, price
