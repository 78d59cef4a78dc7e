"""The ledger's precisions: billed time in whole seconds, money rounded once to 1e-6 USD.

Prices enter exactly (`to_decimal`), and a product of exact decimals is exact, but it
has as many digits as its factors together (`2.52662 h x 12.9756 USD/h` has ten
places), and a float's `repr` brings noise (`2.5266200000000003`). So the ledger
fixes two precisions, applied once, where a figure is first written:

- **billed hours**: the billed time rounded to whole seconds, written as hours to 6
  places (`HOURS_STEP`; 1 s is 0.000278 h, and 6 places give the seconds back exactly);
- **money**: an amount (quantity x unit price) rounded to 6 places of a USD
  (`USD_STEP`, a micro-dollar: finer than any cloud bills, so a sum of amounts is the
  bill to the cent).

Both round half to even. Everything after that (sums, groupings, reports) is exact
addition of these values, so totals agree to the last digit; JSON carries them as
decimal strings with all 6 places, and only tables round further, for display.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext

from broker.state.model import to_decimal

PLACES = 6
USD_STEP = Decimal(1).scaleb(-PLACES)  # 0.000001 USD
HOURS_STEP = Decimal(1).scaleb(-PLACES)  # 0.000001 h (3.6 ms), for hours of whole seconds
_SECONDS_PER_HOUR = Decimal(3600)


def billed_hours(hours: Decimal | float | int | str) -> Decimal:
    """Billed time as the ledger keeps it: whole seconds, as hours to 6 places."""
    with localcontext() as ctx:
        ctx.prec = 60
        seconds = (to_decimal(hours) * _SECONDS_PER_HOUR).to_integral_value(ROUND_HALF_EVEN)
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
