"""The ledger's precisions (billed time in whole seconds, money rounded once to 1e-6
USD) and the columns of a ledger entry, where they are applied.

Prices enter exactly (`to_decimal`), and a product of exact decimals is exact, but it
has as many digits as its factors together (`2.52662 h x 12.9756 USD/h` has ten
places), and a float's `repr` brings noise (`2.5266200000000003`). So the ledger
fixes two precisions, applied once, where a figure is first written:

- **billed hours**: the billed time in whole seconds, a started second billed whole as
  the clouds bill per second (a run of 0.3 s bills 1 s, never nothing; what a float
  adds below 10 ms is noise, not a started second), written as hours to 6
  places (`HOURS_STEP`; 1 s is 0.000278 h, and 6 places give the seconds back exactly);
- **money**: an amount (quantity x unit price) rounded to 6 places of a USD
  (`USD_STEP`, a micro-dollar: finer than any cloud bills, so a sum of amounts is the
  bill to the cent).

Money rounds half to even. Everything after that (sums, groupings, reports) is exact
addition of these values, so totals agree to the last digit; JSON carries them as
decimal strings with all 6 places, and only tables round further, for display.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

from broker.state.model import (
    LEDGER_KINDS,
    decimal_text,
    multiply,
    placed_of,
    to_decimal,
    ts_text,
)
from pricing.userio.redact import redact

PLACES = 6
USD_STEP = Decimal(1).scaleb(-PLACES)  # 0.000001 USD
HOURS_STEP = Decimal(1).scaleb(-PLACES)  # 0.000001 h (3.6 ms), for hours of whole seconds
_SECONDS_PER_HOUR = Decimal(3600)
_NOISE = Decimal("0.01")  # 6 places of an hour come back within 1.8 ms: not a started second


def billed_hours(hours: Decimal | float | int | str) -> Decimal:
    """Billed time as the ledger keeps it: whole seconds (a started one counts), as
    hours to 6 places."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = (to_decimal(hours) * _SECONDS_PER_HOUR).quantize(_NOISE, ROUND_HALF_EVEN)
        seconds = exact.to_integral_value(ROUND_CEILING)
        return (seconds / _SECONDS_PER_HOUR).quantize(HOURS_STEP, ROUND_HALF_EVEN)


def money(amount: Decimal | float | int | str) -> Decimal:
    """An amount in USD rounded once to the ledger's precision (6 places)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return to_decimal(amount).quantize(USD_STEP, ROUND_HALF_EVEN)


def hours_figure(hours: Decimal) -> Decimal:
    """A derived figure in hours (lost hours, GPU-hours) at the ledger's 6 places."""
    with localcontext() as ctx:
        ctx.prec = 60
        return hours.quantize(HOURS_STEP, ROUND_HALF_EVEN)


def money_text(amount: Decimal | float | int | str) -> str:
    """`money(amount)` as SQL/JSON text with all 6 places (`"32.784410"`)."""
    return _fixed(money(amount))


def hours_text(hours: Decimal | float | int | str) -> str:
    """`billed_hours(hours)` as SQL/JSON text with all 6 places (`"2.526620"`)."""
    return _fixed(billed_hours(hours))


def _fixed(value: Decimal) -> str:
    text = format(value, "f")
    return text[1:] if text.startswith("-") and not value else text  # no "-0.000000"


_LEDGER_KEYS = {
    "kind", "quantity", "unit", "unit_price_usd", "amount_usd", "market", "price_source",
    "price_as_of", "period_start", "period_end", "cloud", "region", "detail",
}  # fmt: skip


def ledger_columns(
    entry: Mapping[str, Any], attempt: Any, hours: Decimal, now: str
) -> dict[str, str]:
    """The ledger columns of one entry of `finish_attempt`, every amount exact.

    Keys: kind (compute|egress|onprem), quantity (hourly kinds: billed hours, kept
    in whole seconds), unit, unit_price_usd, amount_usd (default quantity x unit
    price; rounded once to 1e-6 USD, above), market, price_source,
    price_as_of (default the attempt's: the price in force at launch), period_start
    (default the attempt's start), period_end (default now), cloud and region (the
    place that bills the entry; default the attempt's placement) and detail (free
    text). Compute and onprem entries default to the billed hours at the attempt's
    hourly price; egress entries must give quantity (GB) and unit_price_usd.
    """
    unknown = set(entry) - _LEDGER_KEYS
    if unknown:
        raise ValueError(f"unknown ledger entry keys: {sorted(unknown)}")
    kind = entry.get("kind")
    if kind not in LEDGER_KINDS:
        raise ValueError(f"ledger kind must be one of {LEDGER_KINDS}: {kind!r}")
    by_hour = kind != "egress"
    if not by_hour and ("quantity" not in entry or "unit_price_usd" not in entry):
        raise ValueError(f"a {kind} ledger entry needs quantity and unit_price_usd")
    quantity = to_decimal(entry.get("quantity", hours))
    if by_hour:
        quantity = billed_hours(quantity)  # whole seconds
    unit_price = to_decimal(entry.get("unit_price_usd", attempt["price_per_hour_usd"]))
    given = entry.get("amount_usd")
    amount = to_decimal(given) if given is not None else multiply(quantity, unit_price)

    placed = placed_of(attempt["placement_json"])  # decoded once per text
    return {
        "kind": kind,
        "amount_usd": money_text(amount),  # rounded once, here
        "quantity": hours_text(quantity) if by_hour else decimal_text(quantity),
        "unit": str(entry.get("unit", "hour" if by_hour else "GB")),
        "unit_price_usd": decimal_text(unit_price),
        "market": str(entry.get("market", attempt["market"])),
        "price_source": str(entry.get("price_source", attempt["price_source"])),
        "price_as_of": str(entry.get("price_as_of", attempt["price_as_of"])),
        "period_start": _ts_arg(entry.get("period_start"), attempt["started_at"]),
        "period_end": _ts_arg(entry.get("period_end"), now),
        "cloud": str(entry.get("cloud", placed.cloud)),
        "region": str(entry.get("region", placed.region)),
        "detail": redact(str(entry.get("detail", ""))),
    }


def _ts_arg(value: datetime | str | None, default: str) -> str:
    if value is None:
        return default
    return ts_text(value if isinstance(value, datetime) else datetime.fromisoformat(value))
