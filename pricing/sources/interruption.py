"""Expected spot interruptions per hour, per (cloud, region, instance type).

The planner reads `spot_interruption_rate` from the offers table; a refresh fills
it for rows with a spot price, from the best source available, and says which in
the row's `source` ("...+rate:spot-advisor" or "...+rate:history"):

1. **AWS Spot Instance Advisor** (`spot-advisor`): the public JSON behind the
   advisor page, https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json
   (override: BROKER_SPOT_ADVISOR_URL). For each region and Linux instance type it
   gives a band of the "frequency of interruption" over the trailing month: <5%,
   5-10%, 10-15%, 15-20%, >20%. We read a band as the chance `p` that a spot
   instance is interrupted during one typical run, take its upper edge (30% for the
   open ">20%" band: conservative), and assume a run of `EXPOSURE_HOURS` (one day;
   AWS publishes no lifetimes). With interruptions as a Poisson process,
   1 - exp(-rate x hours) = p, so

       rate = -ln(1 - p) / EXPOSURE_HOURS     (<5%: 0.0021/h ... >20%: 0.0149/h)

   Read over a whole month (720 h) instead, the same bands give 30 times less.
2. **The broker's own history** (`history`): spot attempts in the state store,
   interruptions / running hours per (cloud, region, type), once at least
   `MIN_HISTORY_HOURS` hours were observed; with no interruption yet, half of one
   is counted (never a rate of 0).
3. Otherwise the column stays empty, and the planner uses its documented per-cloud
   default (`broker.planner.cost.DEFAULT_INTERRUPTION_RATE`, shown as
   `default:<cloud>` by `broker plan --explain`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pricing.sources.base import Context
from pricing.sources.fetch import SourceError, where
from pricing.userio.settings import resolve_text

NAME = "aws-spot-advisor"
DEFAULT_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
EXPOSURE_HOURS = 24.0
OPEN_BAND_PERCENT = 30.0  # the ">20%" band has no upper edge
MIN_HISTORY_HOURS = 24.0
ADVISOR, HISTORY = "spot-advisor", "history"
RATE_TAG = "+rate:"
_BAND = re.compile(
    r"\s*(?:<\s*(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)|>\s*(\d+(?:\.\d+)?))\s*%\s*"
)

Key = tuple[str, str, str]  # (cloud, region, instance type)


@dataclass(frozen=True, slots=True)
class Rate:
    """Interruptions per hour and where the figure comes from."""

    per_hour: float
    source: str  # ADVISOR | HISTORY


def endpoint() -> str:
    return resolve_text("spot_advisor_url") or DEFAULT_URL


def band_upper_percent(label: str) -> float:
    """The upper edge of an advisor band label ("<5%" -> 5, "5-10%" -> 10, ">20%" -> 30)."""
    found = _BAND.fullmatch(label)
    if not found:
        raise ValueError(f"not an interruption band: {label!r}")
    below, _, upper, above = found.groups()
    if below or upper:
        return float(below or upper)
    return max(OPEN_BAND_PERCENT, float(above))


def band_rate(label: str) -> float:
    """Interruptions per hour for an advisor band (see the module docstring)."""
    p = band_upper_percent(label) / 100.0
    return -math.log1p(-min(p, 0.999)) / EXPOSURE_HOURS


def fetch_advisor(ctx: Context) -> dict[Key, Rate]:
    """The advisor's bands for every region and Linux type, as rates."""
    url = endpoint()
    document = ctx.http.get_json(url)
    ctx.progress("parsing")
    return parse_advisor(document, where(url), ctx)


def parse_advisor(
    document: Any, origin: str = "advisor", ctx: Context | None = None
) -> dict[Key, Rate]:
    """Rates from the advisor document; SourceError when it is not in the known shape."""
    try:
        bands = {int(r["index"]): band_rate(str(r["label"])) for r in document["ranges"]}
        rates: dict[Key, Rate] = {}
        for region, systems in document["spot_advisor"].items():
            if ctx is not None and not ctx.wants(region):
                continue
            for name, facts in systems.get("Linux", {}).items():
                rates[("aws", region, name)] = Rate(bands[int(facts["r"])], ADVISOR)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SourceError(f"{origin}: malformed advisor document: {exc!r}") from None
    return rates


@dataclass(frozen=True, slots=True)
class Observation:
    """What the broker saw of spot instances of one kind: hours run and interruptions."""

    cloud: str
    region: str
    instance_type: str
    hours: float
    interruptions: int


def history_rates(observations: Iterable[Observation]) -> dict[Key, Rate]:
    """Rates learned from the broker's own spot attempts (see the module docstring)."""
    hours: dict[Key, float] = {}
    count: dict[Key, int] = {}
    for seen in observations:
        key = (seen.cloud, seen.region, seen.instance_type)
        hours[key] = hours.get(key, 0.0) + max(seen.hours, 0.0)
        count[key] = count.get(key, 0) + seen.interruptions
    return {
        key: Rate(max(count[key], 0.5) / total, HISTORY)
        for key, total in hours.items()
        if total >= MIN_HISTORY_HOURS
    }


def tagged_rates(rows: Iterable[Mapping[str, Any]], source: str) -> dict[Key, Rate]:
    """Rates a previous refresh wrote from `source` (kept when that source fails now)."""
    found = {}
    for row in rows:
        rate = row["spot_interruption_rate"]
        if rate == rate and rate_source(str(row["source"])) == source:
            found[(row["cloud"], row["region"], row["instance_type"])] = Rate(float(rate), source)
    return found


def rate_source(source: str) -> str:
    """The rate's source named in an offer's `source` ("" when none)."""
    _, tagged, rest = source.partition(RATE_TAG)
    return rest.split("+", 1)[0] if tagged else ""


def without_rate_tag(source: str) -> str:
    """`source` with its "+rate:..." part removed."""
    head, tagged, rest = source.partition(RATE_TAG)
    if not tagged:
        return source
    _, plus, tail = rest.partition("+")
    return head + (plus + tail if plus else "")


def choose(key: Key, *tables: Mapping[Key, Rate]) -> Rate | None:
    """The first table's rate for `key` (tables in order of preference)."""
    for table in tables:
        if key in table:
            return table[key]
    return None
