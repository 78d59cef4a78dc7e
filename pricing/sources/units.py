"""Prices as published, and the one conversion to USD per hour per offer.

Every live source reads its prices as `Decimal` exactly as the cloud writes them
(AWS "32.7726000000", Azure 3.673, GCP units "2" + nanos 933908000) and hands
them here with the unit the cloud names. `per_hour` turns a unit price into USD
per unit of the resource per hour; `offer_price` adds the parts of one offer
(GCP: vCPUs x core price + GiB x RAM price + GPUs x GPU price) in Decimal; and
`usd_per_hour` is the single place where an offer's total becomes the float64
the offers table stores. Nothing else in `pricing.sources` does arithmetic on
money.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

HOURS_PER_MONTH = Decimal(730)  # the clouds' own convention for monthly prices
NANOS = Decimal(1_000_000_000)

# unit (lower case, spaces squeezed) -> hours it covers; a price per unit is divided by it.
_HOURLY = {"h": 1, "hr": 1, "hrs": 1, "hour": 1, "hours": 1, "1 hour": 1, "1/hour": 1}
_MONTHLY = {"mo", "month", "1/month", "1 month"}
# GCP's per-resource units: "GiBy.h" (per GiB-hour), "GiBy.mo" (per GiB-month).
_PER_GIB = re.compile(r"gib(?:y)?\.(h|mo)")
_N_HOURS = re.compile(r"(\d+) hours?")


class PriceError(ValueError):
    """A price or unit that cannot be read as published (a malformed source page)."""


def decimal(value: str | int | Decimal) -> Decimal:
    """A published price as an exact Decimal; PriceError for text that is not a finite,
    non-negative number (a float is refused: it has already lost the published digits)."""
    if isinstance(value, float) or isinstance(value, bool):
        raise PriceError(f"price {value!r} must be text or Decimal, not a binary float")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise PriceError(f"not a price: {value!r}") from None
    if not number.is_finite() or number < 0:
        raise PriceError(f"not a price: {value!r}")
    return number


def money(units: str | int, nanos: int | str = 0) -> Decimal:
    """GCP's `Money` (google.type.Money): whole `units` plus `nanos` billionths, exact.

    Both parts carry the same sign; nanos lies in (-1e9, 1e9)."""
    try:
        whole, fraction = int(units or 0), int(nanos or 0)
    except (TypeError, ValueError):
        raise PriceError(f"not a Money value: units={units!r} nanos={nanos!r}") from None
    if not -1_000_000_000 < fraction < 1_000_000_000 or whole * fraction < 0:
        raise PriceError(f"not a Money value: units={units!r} nanos={nanos!r}")
    total = Decimal(whole) + Decimal(fraction) / NANOS
    if total < 0:
        raise PriceError(f"negative price: units={units!r} nanos={nanos!r}")
    return total


def per_hour(price: Decimal, unit: str) -> Decimal:
    """USD per unit of the resource per hour, from a price per `unit` as the cloud names it.

    Hours: "Hrs" (AWS), "1 Hour" / "100 Hours" (Azure), "h" (GCP). Months ("mo"):
    divided by 730 hours. GiB-based units ("GiBy.h", "GiBy.mo") stay per GiB: the
    caller multiplies by the offer's GiB (see `offer_price`). PriceError otherwise.
    """
    key = " ".join(unit.strip().lower().split())
    if key in _HOURLY:
        return price
    found = _N_HOURS.fullmatch(key)
    if found and int(found.group(1)) > 0:
        return price / Decimal(found.group(1))
    if key in _MONTHLY:
        return price / HOURS_PER_MONTH
    per_gib = _PER_GIB.fullmatch(key)
    if per_gib:
        return price if per_gib.group(1) == "h" else price / HOURS_PER_MONTH
    raise PriceError(f"unknown price unit {unit!r}")


def offer_price(parts: Iterable[tuple[Decimal, str, Decimal | int | str]]) -> Decimal:
    """An offer's USD per hour: the sum of (unit price, unit, quantity) parts, in Decimal.

    E.g. [(core, "h", vcpus), (ram, "GiBy.h", gib), (gpu, "h", count)] for a GCP
    machine, or [(price, "Hrs", 1)] for an AWS instance."""
    total = Decimal(0)
    for price, unit, quantity in parts:
        total += per_hour(price, unit) * decimal(quantity)
    return total


def usd_per_hour(total: Decimal | None) -> float:
    """The table's float64 for an offer total; NaN (not sold) for None or 0, since a
    price in the offers table is never 0."""
    if total is None or total <= 0:
        return float("nan")
    return float(total)
