"""The clouds' public price sources, faked on 127.0.0.1 in their real shapes.

One HTTP server (`PriceFake`) answers, under one base URL:
- `/azure/api/retail/prices?...`: Azure Retail Prices pages ({"Items": [...],
  "NextPageLink": ".../prices?...&$skip=N"});
- `/gcp/v1/services/6F81-5844-456A/skus?pageToken=...`: Cloud Billing Catalog pages
  ({"skus": [...], "nextPageToken": "..."}), only with the right X-Goog-Api-Key;
- `/aws/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv`: the Price List bulk file;
- `/advisor/spot-advisor-data.json`: the AWS Spot Instance Advisor document;
- POST anything with `X-Amz-Target: AWSPriceListService.GetProducts`: the Pricing API
  (JSON 1.1), paged with NextToken.
Levers, by route key ("azure:1" is Azure's second page, "gcp:0", "aws-bulk:us-east-1",
"advisor", "pricing-api:0"): `throttle[key] = n` answers 429 n times first,
`malformed` answers a broken body, `stall` holds the answer until `release` is set
(`stalled` is set when it starts holding), `echo` answers an error that quotes the
request back (its URL and its credential headers, as some error pages do: the canary of
tests/cli/test_secrets_canary.py). `calls` lists the keys served, in order.

`seeded_spot_history` seeds moto's DescribeSpotPriceHistory (moto has no API for it;
offline-cloud-testing.md). The `*_world` functions give a small consistent data set.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

GCP_KEY = "AIzaFakeBrokerTestKey0123456789abcdefgh"
AZURE_PAGE = 100  # items per page, as the real API pages
AS_OF_WORLD = "2026-05-01"


@dataclass
class PriceFake:
    url: str = ""
    azure_pages: list[list[dict]] = field(default_factory=list)
    gcp_pages: list[list[dict]] = field(default_factory=list)
    aws_bulk: dict[str, str] = field(default_factory=dict)  # region -> CSV text
    aws_products: list[dict] = field(default_factory=list)  # Pricing API answers
    aws_page_size: int = 2
    advisor: dict | None = None
    throttle: dict[str, int] = field(default_factory=dict)
    malformed: set[str] = field(default_factory=set)
    stall: str = ""
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    echo: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    api_filters: list[list[dict]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The endpoint overrides that point broker's sources here."""
        return {
            "BROKER_AZURE_PRICES_URL": f"{self.url}/azure/api/retail/prices",
            "BROKER_GCP_BILLING_URL": f"{self.url}/gcp",
            "BROKER_GCP_PRICING_API_KEY": GCP_KEY,
            "BROKER_AWS_PRICING_URL": f"{self.url}/aws",
            "BROKER_SPOT_ADVISOR_URL": f"{self.url}/advisor/spot-advisor-data.json",
        }

    # --- routing ---------------------------------------------------------------------

    def get(self, path: str, query: dict[str, str], headers: Any) -> tuple[int, str, bytes]:
        if path == "/azure/api/retail/prices":
            index = int(query.get("$skip", "0")) // AZURE_PAGE
            return self._serve(f"azure:{index}", lambda: self._azure(index, query), headers)
        if path == "/gcp/v1/services/6F81-5844-456A/skus":
            index = int(query.get("pageToken", "tok-0").split("-")[1])
            if headers.get("X-Goog-Api-Key") != GCP_KEY:
                return 403, "application/json", _json({"error": {"message": "API key not valid"}})
            if query.get("currencyCode") != "USD":
                return 400, "application/json", _json({"error": {"message": "currency"}})
            return self._serve(f"gcp:{index}", lambda: self._gcp(index), headers)
        if path.startswith("/aws/offers/v1.0/aws/AmazonEC2/current/"):
            region = path.split("/")[-2]
            if region not in self.aws_bulk:
                return 404, "text/plain", b"NoSuchKey"
            body = self.aws_bulk[region].encode()
            return self._serve(f"aws-bulk:{region}", lambda: (200, "text/csv", body), headers)
        if path == "/advisor/spot-advisor-data.json" and self.advisor is not None:
            document = _json(self.advisor)
            return self._serve("advisor", lambda: (200, "application/json", document), headers)
        return 404, "text/plain", b"not found"

    def post(self, target: str, body: dict, headers: Any = None) -> tuple[int, str, bytes]:
        if target != "AWSPriceListService.GetProducts":
            return 400, "application/x-amz-json-1.1", _json({"__type": "UnknownOperation"})
        index = int(body.get("NextToken") or "0")
        self.api_filters.append(body.get("Filters", []))

        def answer() -> tuple[int, str, bytes]:
            size = self.aws_page_size
            page = self.aws_products[index * size : (index + 1) * size]
            reply: dict[str, Any] = {
                "FormatVersion": "aws_v1",
                "PriceList": [json.dumps(p) for p in page],
            }
            if (index + 1) * size < len(self.aws_products):
                reply["NextToken"] = str(index + 1)
            return 200, "application/x-amz-json-1.1", _json(reply)

        return self._serve(f"pricing-api:{index}", answer, headers)

    def _serve(self, key: str, answer, headers: Any = None) -> tuple[int, str, bytes]:
        self.calls.append(key)
        if key in self.echo:
            return self._echoed(key, headers or {})
        if self.throttle.get(key, 0) > 0:
            self.throttle[key] -= 1
            if key.startswith("pricing-api"):
                error = {"__type": "ThrottlingException", "message": "Rate exceeded"}
                return 400, "application/x-amz-json-1.1", _json(error)
            return 429, "application/json", _json({"error": {"message": "Too many requests"}})
        if self.stall == key:
            self.stalled.set()
            self.release.wait(60)
        if key in self.malformed:
            return 200, "application/json", b'{"Items": [{"unterminated'
        return answer()

    def _echoed(self, key: str, heard: Any) -> tuple[int, str, bytes]:
        """An error quoting the request's credentials back, in the shape of the route."""
        names = ("Authorization", "X-Amz-Security-Token", "X-Amz-Date", "X-Goog-Api-Key")
        quoted = "; ".join(f"{name}: {heard.get(name)}" for name in names if heard.get(name))
        if key.startswith("pricing-api"):
            error = {"__type": "UnrecognizedClientException", "message": f"bad request: {quoted}"}
            return 400, "application/x-amz-json-1.1", _json(error)
        return 403, "application/json", _json({"error": {"message": f"denied: {quoted}"}})

    def _azure(self, index: int, query: dict[str, str]) -> tuple[int, str, bytes]:
        items = self.azure_pages[index] if index < len(self.azure_pages) else []
        nxt = ""
        if index + 1 < len(self.azure_pages):
            following = dict(query) | {"$skip": str((index + 1) * AZURE_PAGE)}
            nxt = f"{self.url}/azure/api/retail/prices?{urllib.parse.urlencode(following)}"
        page = {
            "BillingCurrency": "USD",
            "CustomerEntityId": "Default",
            "CustomerEntityType": "Retail",
            "Items": items,
            "NextPageLink": nxt or None,
            "Count": len(items),
        }
        return 200, "application/json", _json(page)

    def _gcp(self, index: int) -> tuple[int, str, bytes]:
        skus = self.gcp_pages[index] if index < len(self.gcp_pages) else []
        token = f"tok-{index + 1}" if index + 1 < len(self.gcp_pages) else ""
        return 200, "application/json", _json({"skus": skus, "nextPageToken": token})


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


class _Handler(BaseHTTPRequestHandler):
    fake: PriceFake
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        self._send(*self.fake.get(parts.path, query, self.headers))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:  # an EC2 query (form-encoded): not a route of this fake
            body = {}
        self._send(*self.fake.post(self.headers.get("X-Amz-Target", ""), body, self.headers))

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if status == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(fake: PriceFake) -> Iterator[PriceFake]:
    """Run `fake` on 127.0.0.1 (a free port) while inside."""
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def price_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[PriceFake]:
    """A fake with the small world below, its overrides set, and no AWS credentials (the
    AWS on-demand source then reads the bulk files; spot is skipped)."""
    fake = world()
    with serving(fake):
        for name, value in fake.env().items():
            monkeypatch.setenv(name, value)
        no_cloud_credentials(monkeypatch)
        yield fake


def no_cloud_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS or Google credentials anywhere, and no metadata server to ask."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_") or name.startswith("GOOGLE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("CLOUDSDK_CONFIG", "/nonexistent/gcloud")
    # google-auth reads NO_GCE_CHECK once, at import: if another test imported it already
    metadata = sys.modules.get("google.auth.compute_engine._metadata")
    if metadata is not None:
        monkeypatch.setattr(metadata, "_NO_GCE_CHECK", True)


# --- Azure Retail Prices items ----------------------------------------------------------------


def azure_item(
    size: str,
    region: str,
    price: str,
    *,
    spot: bool = False,
    low_priority: bool = False,
    windows: bool = False,
    since: str = "2025-01-01T00:00:00Z",
) -> dict:
    """One meter as the Retail Prices API returns it (price as JSON number text)."""
    short = size.removeprefix("Standard_").replace("_", " ")
    suffix = " Spot" if spot else (" Low Priority" if low_priority else "")
    series = short.split(" ", 1)[-1].replace(" ", "") if " " in short else short
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": float(price),  # JSON writes the shortest digits: `price` itself
        "unitPrice": float(price),
        "armRegionName": region,
        "location": region.upper(),
        "effectiveStartDate": since,
        "meterId": f"meter-{size}-{region}-{suffix.strip() or 'std'}-{windows}",
        "meterName": short + suffix,
        "productId": "DZH318Z0BQ4L",
        "skuId": "DZH318Z0BQ4L/00G1",
        "productName": f"Virtual Machines {series} Series" + (" Windows" if windows else ""),
        "skuName": short + suffix,
        "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "isPrimaryMeterRegion": True,
        "armSkuName": size,
    }


# --- GCP Billing Catalog SKUs -------------------------------------------------------------------


def gcp_sku(
    description: str,
    group: str,
    usage: str,
    regions: list[str],
    units: int,
    nanos: int,
    unit: str = "h",
) -> dict:
    """One Compute Engine SKU as the Cloud Billing Catalog API returns it."""
    sku_id = f"{abs(hash((description, tuple(regions), usage))) % 10**12:012d}"
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": nanos,
                            },
                        }
                    ],
                    "usageUnitDescription": "hour",
                    "baseUnit": "s",
                    "baseUnitConversionFactor": 3600,
                    "baseUnitDescription": "second",
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-05-01T00:00:00Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "MULTI_REGIONAL", "regions": regions},
    }


# --- AWS Price List products -------------------------------------------------------------------


def aws_product(
    instance_type: str,
    region: str,
    price: str,
    vcpu: str,
    memory: str,
    gpu: str,
    *,
    os: str = "Linux",
    tenancy: str = "Shared",
    software: str = "NA",
    capacity: str = "Used",
    license_model: str = "No License required",
) -> dict:
    """One product with its on-demand term, as GetProducts returns it (before json.dumps)."""
    sku = f"SKU{abs(hash((instance_type, region, os, tenancy, software, capacity))) % 10**10}"
    return {
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "instanceType": instance_type,
                "instanceFamily": "GPU instance",
                "regionCode": region,
                "location": region,
                "locationType": "AWS Region",
                "operatingSystem": os,
                "tenancy": tenancy,
                "preInstalledSw": software,
                "capacitystatus": capacity,
                "licenseModel": license_model,
                "marketoption": "OnDemand",
                "vcpu": vcpu,
                "memory": memory,
                "gpu": gpu,
                "gpuMemory": "NA",
                "servicecode": "AmazonEC2",
            },
            "sku": sku,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "offerTermCode": "JRTCKXETXF",
                    "sku": sku,
                    "effectiveDate": "2026-05-01T00:00:00Z",
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": f"${price} per On Demand {os} {instance_type}",
                            "appliesTo": [],
                            "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                            "beginRange": "0",
                            "pricePerUnit": {"USD": price},
                        }
                    },
                    "termAttributes": {},
                }
            }
        },
        "version": "20260501000000",
        "publicationDate": "2026-05-01T00:00:00Z",
    }


_BULK_HEADER = (
    "SKU", "OfferTermCode", "RateCode", "TermType", "PriceDescription", "EffectiveDate",
    "StartingRange", "EndingRange", "Unit", "PricePerUnit", "Currency", "LeaseContractLength",
    "PurchaseOption", "Product Family", "serviceCode", "Location", "Location Type",
    "Instance Type", "Instance Family", "vCPU", "Memory", "Tenancy", "Operating System",
    "License Model", "CapacityStatus", "GPU", "GPU Memory", "MarketOption", "Pre Installed S/W",
    "Region Code",
)  # fmt: skip


def aws_bulk_csv(products: list[dict]) -> str:
    """The regional bulk file (index.csv) holding `products`: on-demand rows, plus a
    reserved row and an upfront fee per product, as the real file interleaves them."""
    out = io.StringIO()
    for key, value in (
        ("FormatVersion", "v1.0"),
        ("Disclaimer", "This pricing list is for informational purposes only."),
        ("Publication Date", "2026-05-01T00:00:00Z"),
        ("Version", "20260501000000"),
        ("OfferCode", "AmazonEC2"),
    ):
        out.write(f'"{key}","{value}"\n')
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(_BULK_HEADER)
    for product in products:
        a = product["product"]["attributes"]
        (term,) = product["terms"]["OnDemand"].values()
        (dimension,) = term["priceDimensions"].values()
        common = {
            "SKU": product["product"]["sku"],
            "Product Family": "Compute Instance",
            "serviceCode": "AmazonEC2",
            "Location": a["location"],
            "Location Type": a["locationType"],
            "Instance Type": a["instanceType"],
            "Instance Family": a["instanceFamily"],
            "vCPU": a["vcpu"],
            "Memory": a["memory"],
            "Tenancy": a["tenancy"],
            "Operating System": a["operatingSystem"],
            "License Model": a["licenseModel"],
            "CapacityStatus": a["capacitystatus"],
            "GPU": a["gpu"],
            "GPU Memory": a["gpuMemory"],
            "MarketOption": "OnDemand",
            "Pre Installed S/W": a["preInstalledSw"],
            "Region Code": a["regionCode"],
        }
        rows = [
            {"TermType": "OnDemand", "Unit": "Hrs",
             "PricePerUnit": dimension["pricePerUnit"]["USD"]},
            {"TermType": "Reserved", "Unit": "Hrs", "PricePerUnit": "0.0100000000",
             "LeaseContractLength": "3yr", "PurchaseOption": "Partial Upfront"},
            {"TermType": "Reserved", "Unit": "Quantity", "PricePerUnit": "2750",
             "LeaseContractLength": "3yr", "PurchaseOption": "Partial Upfront"},
        ]  # fmt: skip
        for row in rows:
            full = {name: "" for name in _BULK_HEADER} | common | {"Currency": "USD"} | row
            writer.writerow([full[name] for name in _BULK_HEADER])
    return out.getvalue()


# --- AWS Spot Instance Advisor ------------------------------------------------------------------

ADVISOR_RANGES = [
    {"index": 0, "label": "<5%", "dots": 0, "max": 5},
    {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
    {"index": 2, "label": "10-15%", "dots": 2, "max": 16},
    {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
    {"index": 4, "label": ">20%", "dots": 4, "max": 100},
]


def advisor_document(bands: dict[str, dict[str, int]]) -> dict:
    """The advisor JSON: region -> Linux type -> band index (Windows gets the other band)."""
    return {
        "global_rate": "<10%",
        "instance_types": {
            name: {"emr": True, "cores": 8, "ram_gb": 32.0}
            for types in bands.values()
            for name in types
        },
        "ranges": ADVISOR_RANGES,
        "spot_advisor": {
            region: {
                "Linux": {name: {"s": 70, "r": band} for name, band in types.items()},
                "Windows": {name: {"s": 50, "r": 4 - band} for name, band in types.items()},
            }
            for region, types in bands.items()
        },
    }


# --- moto: DescribeSpotPriceHistory --------------------------------------------------------------


@contextmanager
def seeded_spot_history(
    points: dict[str, list[dict]], page_size: int = 0, refuse: dict[str, str] | None = None
) -> Iterator[list]:
    """While inside, moto's DescribeSpotPriceHistory answers `points[region]` (records
    with InstanceType, AvailabilityZone, SpotPrice, Timestamp, ProductDescription),
    filtered by the asked InstanceTypes and paged `page_size` at a time with NextToken;
    a region in `refuse` answers that error code instead (e.g. OptInRequired).
    Yields the list of (region, instance types, next token) requests seen."""
    from unittest import mock

    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses.spot_instances import SpotInstances

    seen: list = []

    def answer(self: Any) -> ActionResult:
        types = self._get_param("InstanceTypes", [])
        token = self._get_param("NextToken") or "0"
        seen.append((self.region, tuple(types), token))
        if self.region in (refuse or {}):
            raise EC2ClientError(refuse[self.region], f"refused in {self.region} by the test")
        found = [p for p in points.get(self.region, []) if not types or p["InstanceType"] in types]
        start = int(token)
        size = page_size or len(found) or 1
        result: dict[str, Any] = {"SpotPriceHistory": found[start : start + size]}
        if start + size < len(found):
            result["NextToken"] = str(start + size)
        return ActionResult(result)

    with mock.patch.object(SpotInstances, "describe_spot_price_history", answer):
        yield seen


def spot_point(name: str, zone: str, price: str, when: str) -> dict:
    return {
        "InstanceType": name,
        "AvailabilityZone": zone,
        "SpotPrice": price,
        "ProductDescription": "Linux/UNIX",
        "Timestamp": when,
    }


# --- the small world ----------------------------------------------------------------------------


def azure_world() -> list[list[dict]]:
    """Three pages: ND H100 and NC A100 in eastus and westeurope, on-demand and spot,
    with Windows and low-priority meters of the same sizes, and an unknown size."""
    page1 = [
        azure_item("Standard_ND96isr_H100_v5", "eastus", "98.32"),
        azure_item("Standard_ND96isr_H100_v5", "eastus", "18.1695", spot=True),
        azure_item("Standard_ND96isr_H100_v5", "eastus", "120.5", windows=True),
        azure_item("Standard_ND96isr_H100_v5", "eastus", "9.8", low_priority=True),
    ]
    page2 = [
        azure_item("Standard_NC24ads_A100_v4", "eastus", "3.673"),
        azure_item("Standard_NC24ads_A100_v4", "eastus", "0.7467", spot=True),
        azure_item("Standard_NC24ads_A100_v4", "eastus", "4.5", spot=True, windows=True),
        # an older on-demand price of the same meter: the newer one wins
        azure_item("Standard_NC24ads_A100_v4", "eastus", "3.9", since="2023-01-01T00:00:00Z"),
    ]
    page3 = [
        azure_item("Standard_NC24ads_A100_v4", "westeurope", "4.04"),
        azure_item("Standard_NV9000x_Z1_v9", "westeurope", "1.5"),  # no known GPU facts
    ]
    return [page1, page2, page3]


def gcp_world() -> list[list[dict]]:
    """Two pages of Compute Engine SKUs for us-central1 and europe-west4: A2, G2 and N1
    cores and RAM, A100 / L4 / T4 GPUs, on-demand and spot, plus SKUs to ignore."""
    us, eu = ["us-central1"], ["europe-west4"]
    page1 = [
        gcp_sku("A2 Instance Core running in Americas", "CPU", "OnDemand", us, 0, 31611000),
        gcp_sku("A2 Instance Ram running in Americas", "RAM", "OnDemand", us, 0, 4237000, "GiBy.h"),
        gcp_sku("Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", us,
                0, 9483000),
        gcp_sku("Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", us,
                0, 1271000, "GiBy.h"),
        gcp_sku("Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", us, 2, 933908000),
        gcp_sku("Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
                "GPU", "Preemptible", us, 1, 468000000),
        gcp_sku("Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", us,
                0, 19915000),
        gcp_sku("A2 Custom Instance Core running in Americas", "CPU", "OnDemand", us, 0, 99000000),
        gcp_sku("G2 Instance Core running in Americas", "CPU", "OnDemand", us, 0, 24988000),
        gcp_sku("G2 Instance Ram running in Americas", "RAM", "OnDemand", us, 0, 2927000, "GiBy.h"),
        gcp_sku("Nvidia L4 GPU running in Americas", "GPU", "OnDemand", us, 0, 560000000),
    ]  # fmt: skip
    page2 = [
        gcp_sku("N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", us,
                0, 31611000),
        gcp_sku("N1 Predefined Instance Ram running in Americas", "N1Standard", "OnDemand", us,
                0, 4237000, "GiBy.h"),
        gcp_sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand", us, 0, 350000000),
        gcp_sku("Nvidia Tesla T4 Virtual Workstation GPU running in Americas", "GPU", "OnDemand",
                us, 0, 550000000),
        gcp_sku("A2 Instance Core running in EMEA", "CPU", "OnDemand", eu, 0, 34802000),
        gcp_sku("A2 Instance Ram running in EMEA", "RAM", "OnDemand", eu, 0, 4664000, "GiBy.h"),
        gcp_sku("Nvidia Tesla A100 GPU running in EMEA", "GPU", "OnDemand", eu, 3, 230000000),
        gcp_sku("Storage PD Capacity", "PDStandard", "OnDemand", us, 0, 40000000, "GiBy.mo"),
    ]  # fmt: skip
    return [page1, page2]


def aws_world() -> list[dict]:
    """GPU products in us-east-1 and us-west-2, plus rows the filter must drop."""
    return [
        aws_product("p4d.24xlarge", "us-east-1", "21.9576000000", "96", "1152 GiB", "8"),
        aws_product("g5.xlarge", "us-east-1", "1.0060000000", "4", "16 GiB", "1"),
        aws_product("g5.xlarge", "us-east-1", "1.8100000000", "4", "16 GiB", "1", os="Windows"),
        aws_product("g5.xlarge", "us-east-1", "1.2100000000", "4", "16 GiB", "1",
                    tenancy="Dedicated"),
        aws_product("g5.xlarge", "us-east-1", "0.0000000000", "4", "16 GiB", "1",
                    capacity="UnusedCapacityReservation"),
        aws_product("g5.xlarge", "us-east-1", "1.1200000000", "4", "16 GiB", "1",
                    software="SQL Web"),
        aws_product("g4ad.xlarge", "us-east-1", "0.3790000000", "4", "16 GiB", "1"),
        aws_product("p5.48xlarge", "us-west-2", "55.0400000000", "192", "2048 GiB", "8"),
        aws_product("g5.xlarge", "us-west-2", "1.0060000000", "4", "16 GiB", "1"),
    ]  # fmt: skip


def world() -> PriceFake:
    products = aws_world()
    bulk: dict[str, list[dict]] = {}
    for product in products:
        bulk.setdefault(product["product"]["attributes"]["regionCode"], []).append(product)
    return PriceFake(
        azure_pages=azure_world(),
        gcp_pages=gcp_world(),
        aws_bulk={region: aws_bulk_csv(items) for region, items in bulk.items()},
        aws_products=products,
        advisor=advisor_document(
            {"us-east-1": {"p4d.24xlarge": 4, "g5.xlarge": 0}, "us-west-2": {"p5.48xlarge": 2}}
        ),
    )
