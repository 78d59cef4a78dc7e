"""The checks of a manifest's values and sections as plain functions (no pydantic).

Each raises ValueError with the message a user reads. The pydantic model
(`broker.manifest.values`, `broker.manifest.sections`) runs them as its validators,
and `broker.manifest.direct` runs the same ones when it builds a JobSpec without
pydantic: one rule, one place, whichever path reads the document.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta

from broker import spec
from pricing.gpus import parse_gpu_request
from pricing.regions import REGION_COUNTRY, Place
from pricing.schema import CLOUDS
from pricing.userio import bounds
from pricing.userio.redact import redact, without_userinfo
from pricing.userio.suggest import suggestion

SCHEMES: tuple[str, ...] = ("s3", "gs", "az", "file")
LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_AMOUNT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(\+?)")
_DURATION = re.compile(r"(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?", re.IGNORECASE)
_REGION_GLOB = re.compile(r"[A-Za-z0-9._*?!\[\]-]+")
_ONPREM_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = re.compile(r"\s")
_TEN_YEARS = f"{bounds.MAX_HOURS:,.0f} hours (ten years)"
_LAST_YEAR = 3000  # absolute deadlines before it: far from where date arithmetic overflows


def label(value: str) -> str:
    if not LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit (at most 63)"
        )
    return value


def amount(value: object) -> spec.Amount:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number, at_least = float(value), False
    elif isinstance(value, str) and (match := _AMOUNT.fullmatch(value.strip())):
        number, at_least = float(match[1]), bool(match[2])
    else:
        raise ValueError(
            f"{value!r} is not an amount: write N for exactly N, or N+ for at least N (e.g. 8+)"
        )
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"must be more than 0 (got {value!r})")
    if number > bounds.MAX_MEMORY_GIB:
        most = f"{bounds.MAX_MEMORY_GIB:g}"
        raise ValueError(f"{value!r} is more than any machine has (at most {most})")
    return spec.Amount(number, at_least)


def one_or_many(value: object) -> object:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return value
    raise ValueError(
        f"expected a GPU such as A100:8, or a list of them in order of preference, got {value!r}"
    )


def gpu_ask(value: object) -> spec.GpuAsk:
    if not isinstance(value, str):
        raise ValueError(f"expected GPU:COUNT such as A100:8, got {value!r}")
    name, count = parse_gpu_request(value.strip())  # UnknownGpu is a ValueError
    if not math.isfinite(count):
        raise ValueError(f"GPU count must be a finite number in {value!r}")
    if count > bounds.MAX_GPUS_PER_NODE:
        raise ValueError(
            f"{value!r} asks more GPUs per node than any node has "
            f"(at most {bounds.MAX_GPUS_PER_NODE}; use nodes for more)"
        )
    return spec.GpuAsk(name, count)


def distinct_gpus(asks: list[spec.GpuAsk]) -> list[spec.GpuAsk]:
    if not asks:
        raise ValueError("list at least one GPU, or leave accelerators out for a CPU-only job")
    seen: set[str] = set()
    for ask in asks:
        if ask.gpu in seen:
            raise ValueError(
                f"{ask.gpu} is listed twice: give each GPU once, in order of preference"
            )
        seen.add(ask.gpu)
    return asks


def place(value: object) -> Place:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"expected cloud:region such as aws:us-east-1, got {value!r}")
    cloud, _, region = (part.strip() for part in value.partition(":"))
    if cloud not in CLOUDS:
        raise ValueError(
            f"unknown cloud {cloud!r} in {value!r}: one of {', '.join(CLOUDS)}"
            f"{suggestion(cloud, CLOUDS)}"
        )
    if not region:
        raise ValueError(f"{value!r} names no region: expected cloud:region such as aws:us-east-1")
    if cloud == "onprem":
        if not _ONPREM_REGION.fullmatch(region):
            raise ValueError(f"{region!r} is not an on-prem region name (see your pools.yaml)")
    elif (cloud, region) not in REGION_COUNTRY:
        known = [r for c, r in REGION_COUNTRY if c == cloud]
        raise ValueError(f"unknown {cloud} region {region!r}{suggestion(region, known)}")
    return Place(cloud, region)


AUTO = "auto"


def estimate_hours(value: object) -> float | None:
    """A number of hours, or `auto` (None: learned from history, broker.learned_runtime)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is not a number of hours: write a number (12, 1.5) or auto")
    if isinstance(value, int) and value > bounds.MAX_HOURS:  # float() of 10**400 overflows
        raise ValueError(f"{value!r} is more than {_TEN_YEARS}")
    hours = float(value)
    if not math.isfinite(hours):
        raise ValueError(f"{value!r} is not a finite number of hours (write a number or auto)")
    if hours <= 0:
        raise ValueError(f"{value!r} must be more than 0 hours (or auto)")
    if hours > bounds.MAX_HOURS:
        raise ValueError(f"{value!r} is more than {_TEN_YEARS}")
    return hours


def deadline(value: object) -> timedelta | datetime | None:
    if value is None:
        return None
    examples = (
        "a duration such as 90m, 36h, 2d or 1d12h, or an RFC 3339 time such as 2026-07-01T18:00:00Z"
    )
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        raise ValueError(f"{value} is a date without a time: write e.g. {value}T18:00:00Z")
    elif isinstance(value, str):
        text = value.strip()
        match = _DURATION.fullmatch(text)
        if text and match:
            days, hours, minutes = (int(group or 0) for group in match.groups())
            if days * 24 + hours + minutes / 60 > bounds.MAX_HOURS:
                raise ValueError(f"deadline {value!r} is more than {_TEN_YEARS} after submission")
            delta = timedelta(days=days, hours=hours, minutes=minutes)
            if delta <= timedelta(0):
                raise ValueError(f"deadline {value!r} must be after submission")
            return delta
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a deadline: write {examples}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value!r} has no unit: write {examples}")
    else:
        raise ValueError(f"{value!r} is not a deadline: write {examples}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        written = value if isinstance(value, str) else moment.isoformat()
        raise ValueError(f"{written!r} has no timezone: add Z for UTC or an offset such as +02:00")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-01:00 is past the last time Python knows
        moment = datetime.max.replace(tzinfo=UTC)
    if moment.year >= _LAST_YEAR:
        raise ValueError(f"deadline {value!r} is not before the year {_LAST_YEAR}")
    return moment


def country(value: object) -> str:
    if isinstance(value, bool):  # the Norway problem: YAML 1.1 reads NO as false
        raise ValueError('YAML read an unquoted country code as true/false: quote it ("NO")')
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z]{2}", value.strip()):
        raise ValueError(f"{value!r} is not a two-letter ISO 3166 country code such as US or DE")
    code = value.strip().upper()
    if code == "UK":
        raise ValueError("the ISO 3166 code of the United Kingdom is GB, not UK")
    if code == "EU":
        raise ValueError("EU is not a country: list its countries, e.g. [DE, FR, NL]")
    return code


def region_glob(value: str) -> str:
    if not _REGION_GLOB.fullmatch(value):
        also = " (choose clouds with placement.clouds)" if ":" in value else ""
        raise ValueError(
            f"{value!r} is not a region name or glob such as us-east-1 or 'europe-*'{also}"
        )
    return value


def uri(value: str) -> str:
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in SCHEMES or _SPACE.search(value):
        hint = suggestion(scheme, SCHEMES) if sep else ""
        raise ValueError(
            f"{value!r} is not a storage URI: use s3://bucket/path, gs://bucket/path, "
            f"az://container/path or file:///path{hint}"
        )
    if scheme == "file" and not rest.startswith("/"):
        raise ValueError(f"{value!r}: a file:// URI takes an absolute path, e.g. file:///data/ckpt")
    if scheme != "file" and not without_userinfo(value).partition("://")[2].split("/", 1)[0]:
        raise ValueError(f"{redact(value)!r} names no bucket, e.g. {scheme}://bucket/path")
    return without_userinfo(value)  # kept without user:password@: never stored, never shown


def env_value(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"environment values are strings: quote it (YAML read {value!r})")
    return value


# --- checks of a section (its fields together) ---------------------------------------


def clouds_allowed(clouds: list[str] | None) -> list[str] | None:
    if clouds is not None and not clouds:
        raise ValueError("an empty allow-list allows nothing: leave clouds out to allow all")
    return clouds


def clouds_excluded(excluded: list[str] | None, clouds: list[str] | None) -> list[str] | None:
    """`placement.exclude_clouds`, given the section's `clouds` (validated before it)."""
    if excluded is not None and clouds is not None:
        raise ValueError("give either clouds (an allow-list) or exclude_clouds, not both")
    if excluded is not None and set(CLOUDS) <= set(excluded):
        raise ValueError("every cloud is excluded: nothing is left to run on")
    return excluded


def spot_not_bool(value: object) -> object:
    if isinstance(value, bool):  # `spot: no` is false in YAML 1.1
        raise ValueError(
            f"YAML read an unquoted yes/no/true/false as {value}: write never, prefer or only"
        )
    return value


def env_names(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if name.startswith("BROKER_"):
            raise ValueError(f"{name}: names starting with BROKER_ are set by the broker")
    return env


def something_to_run(command: str | None, image: str | None, setup: str | None) -> None:
    """A run section runs a command, an image's entrypoint, or both; setup needs a command."""
    if command is None and image is None:
        also = "setup runs before command, not instead of it: " if setup else ""
        raise ValueError(f"{also}give a command, an image (its entrypoint runs), or both")
    if command is None and setup:
        raise ValueError(
            "setup needs a command: an image alone runs its entrypoint, which cannot "
            "follow a setup (give the command the entrypoint runs)"
        )


def plannable(estimate_hours: float, due: timedelta | datetime | None) -> None:
    """Run the planner's own date arithmetic (`RuntimeEstimate.deadline_at`, hours left)
    for a job that waits in the queue as long as a deadline may be away: what
    validates here cannot overflow later, in `broker queue` or `broker run`."""
    latest = datetime.now(UTC) + timedelta(hours=bounds.MAX_HOURS)
    try:
        at = spec.RuntimeEstimate(estimate_hours, due).deadline_at(latest)
        if at is not None:
            (at - latest).total_seconds()
            at + timedelta(hours=estimate_hours)
    except OverflowError:
        raise ValueError("the deadline is beyond the dates the planner can count") from None
