"""AWS spot prices (source `aws-spot-history`, credentials required): EC2
`DescribeSpotPriceHistory` per region (endpoint BROKER_AWS_ENDPOINT), Linux/UNIX, the
last 30 days, for the GPU types of that region. Rows are per zone, spot only: the
latest price of each (type, zone). The history is summarised per (type, zone) in
`SpotSeries` (min, max, time-weighted mean and deviation, changes) for volatility.
On-demand prices are `pricing.sources.aws`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pricing.sources.aws_session import client_config, client_error, session_with_credentials
from pricing.sources.base import Context, Fetched, PricedOffer
from pricing.sources.fetch import MissingCredentials, SourceError
from pricing.sources.shapes import Shape
from pricing.sources.units import PriceError, decimal
from pricing.userio.settings import resolve_text

SPOT = "aws-spot-history"
HISTORY_DAYS = 30
SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
TYPES_PER_CALL = 50
# What EC2 answers in an opt-in region the account has not enabled.
_REGION_NOT_ENABLED = ("OptInRequired", "AuthFailure")


def ec2_endpoint() -> str | None:
    return resolve_text("aws_endpoint")


@dataclass(frozen=True)
class SpotSeries:
    """30 days of one (type, zone)'s spot price: enough to judge how much it moves."""

    region: str
    zone: str
    instance_type: str
    latest: Decimal
    minimum: Decimal
    maximum: Decimal
    mean: float  # time-weighted over the window
    stdev: float  # time-weighted
    changes: int  # price changes in the window
    since: str  # window start (ISO)
    last_change: str  # ISO time of the latest price

    def row(self) -> dict[str, Any]:
        return {
            "cloud": "aws",
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "latest": str(self.latest),
            "min": str(self.minimum),
            "max": str(self.maximum),
            "mean": round(self.mean, 6),
            "stdev": round(self.stdev, 6),
            "changes": self.changes,
            "since": self.since,
            "last_change": self.last_change,
        }


def summarise(
    region: str,
    zone: str,
    name: str,
    points: Iterable[tuple[datetime, Decimal]],
    start: datetime,
    end: datetime,
) -> SpotSeries:
    """A SpotSeries from (time, price) points; a price holds until the next one."""
    ordered = sorted(points)
    weights: list[tuple[float, float]] = []
    for i, (when, price) in enumerate(ordered):
        until = ordered[i + 1][0] if i + 1 < len(ordered) else end
        span = (min(until, end) - max(when, start)).total_seconds()
        if span > 0:
            weights.append((span, float(price)))
    total = sum(w for w, _ in weights)
    if total > 0:
        mean = sum(w * p for w, p in weights) / total
        stdev = (sum(w * (p - mean) ** 2 for w, p in weights) / total) ** 0.5
    else:
        mean, stdev = float(ordered[-1][1]), 0.0
    prices = [p for _, p in ordered]
    changes = sum(1 for a, b in zip(prices, prices[1:], strict=False) if a != b)
    return SpotSeries(
        region, zone, name, prices[-1], min(prices), max(prices), mean, stdev, changes,
        start.isoformat(), ordered[-1][0].isoformat(),
    )  # fmt: skip


def fetch_spot(ctx: Context, types: Mapping[str, Mapping[str, Shape]]) -> Fetched:
    """Latest spot price per (type, zone) for `types` (region -> type -> shape), and the
    30-day summaries in `extra["history"]`. MissingCredentials without AWS credentials."""
    session = session_with_credentials()
    if session is None:
        raise MissingCredentials(
            "no AWS credentials (spot prices come from EC2 DescribeSpotPriceHistory, which "
            "needs them: any read-only IAM user)"
        )
    from botocore.exceptions import BotoCoreError, ClientError

    end = ctx.now.astimezone(UTC)
    start = end - timedelta(days=HISTORY_DAYS)
    offers, series, notes, read = [], [], [], set()
    regions = sorted(r for r in types if ctx.wants(r))
    for index, region in enumerate(regions, start=1):
        ctx.progress(f"region {index}/{len(regions)}: {region}")
        try:
            points = _region_history(session, region, sorted(types[region]), start, end)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in _REGION_NOT_ENABLED:
                raise SourceError(f"{region}: {client_error(exc)}") from None
            notes.append(f"{region}: not enabled for this account ({code}); skipped")
            continue
        except BotoCoreError as exc:
            raise SourceError(f"{region}: {exc}") from None
        read.add(region)
        for (zone, name), found in sorted(points.items()):
            summary = summarise(region, zone, name, found, start, end)
            series.append(summary)
            shape = types[region][name]
            offers.append(PricedOffer("aws", region, zone, name, shape, None, summary.latest))
    if regions and not read:  # every region refused: the credentials, not the regions
        raise SourceError(f"every region refused DescribeSpotPriceHistory: {'; '.join(notes)}")
    return Fetched(offers, notes, {"history": series}, frozenset(read))


def _region_history(
    session: Any, region: str, names: list[str], start: datetime, end: datetime
) -> dict[tuple[str, str], list[tuple[datetime, Decimal]]]:
    """(zone, type) -> [(time, price)] of Linux spot prices in one region."""
    client = session.client(
        "ec2", region_name=region, endpoint_url=ec2_endpoint(), config=client_config()
    )
    paginator = client.get_paginator("describe_spot_price_history")
    points: dict[tuple[str, str], list[tuple[datetime, Decimal]]] = {}
    for first in range(0, len(names), TYPES_PER_CALL):
        pages = paginator.paginate(
            InstanceTypes=names[first : first + TYPES_PER_CALL],
            ProductDescriptions=list(SPOT_PRODUCTS),
            StartTime=start,
            EndTime=end,
        )
        for page in pages:
            for item in page.get("SpotPriceHistory", []):
                _add_point(points, item, region)
    return points


def _add_point(points: dict, item: Mapping[str, Any], region: str) -> None:
    try:
        if not str(item["ProductDescription"]).startswith("Linux/UNIX"):
            return
        when = item["Timestamp"]
        if isinstance(when, str):
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        key = (str(item["AvailabilityZone"]), str(item["InstanceType"]))
        points.setdefault(key, []).append((when.astimezone(UTC), decimal(item["SpotPrice"])))
    except (KeyError, TypeError, ValueError, PriceError) as exc:
        raise SourceError(f"{region}: malformed spot price record: {exc!r}") from None
