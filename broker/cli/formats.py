"""How a column's values look to a human: one decision per column, not per cell.

A `ColumnFormat` is callable on one value (for a sentence, or the HTML report) and,
given every value of a column, returns the formatter of that column
(`for_values`): money shows 2 decimals, or 4 when every amount in the column is below
1 USD; a figure column shows the same number of decimals on every row. Numbers are
right-aligned (`numeric`). Only the table and Markdown views use these: JSON and CSV
carry the exact values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any


def missing(value: Any) -> bool:
    """No value: None, "", or NaN."""
    if value.__class__ is str:  # most cells of a text column: one test
        return not value
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def minute_text(moment: Any) -> str:
    """`2026-11-01 03:00`: the year always four digits (glibc's `%Y` drops the leading
    zeros of years before 1000)."""
    return f"{moment.year:04d}-{moment:%m-%d %H:%M}"


def _floats(values: Iterable[Any]) -> list[float]:
    found = []
    for value in values:
        if value.__class__ is float:  # nearly every value of a numeric column
            if value == value:  # not NaN
                found.append(value)
            continue
        if missing(value):
            continue
        try:
            found.append(float(value))
        except (TypeError, ValueError):
            continue  # a label in a numeric column (e.g. "total"): shown as written
    return found


def _shown(value: Any, spec: str) -> str:
    """`value` as a number in format `spec`; "-" when missing; a label as written."""
    if value.__class__ is float:  # nearly every cell of a numeric column
        return "-" if value != value else format(value, spec)  # NaN is not equal to itself
    if value is None or value == "":
        return "-"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "-" if number != number else format(number, spec)  # NaN is not equal to itself


class ColumnFormat:
    """A format that decides once per column; subclasses say how one number looks."""

    numeric = True

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        """The formatter of a column holding `values`."""
        return self

    def __call__(self, value: Any) -> str:
        return self.for_values([value])(value)


class Money(ColumnFormat):
    """USD: `1,234.50`, or `0.7467` when every non-zero amount of the column is below 1."""

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        amounts = [abs(x) for x in _floats(values) if x]
        spec = ",.4f" if amounts and max(amounts) < 1 else ",.2f"
        return lambda value: _shown(value, spec)


class Figure(ColumnFormat):
    """A count or size: integers when every value is whole, else one or two decimals for
    the whole column (`0.5` and `8.0`, never `0.5` and `8`)."""

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        spec = f".{max((_places(x) for x in _floats(values)), default=0)}f"
        return lambda value: _shown(value, spec)


def _places(value: float) -> int:
    """Decimals (0 to 2) that show `value` to two decimals without trailing zeros."""
    for places in (0, 1):
        if round(value, places) == round(value, 2):
            return places
    return 2


class Count(ColumnFormat):
    """Whole numbers (jobs, attempts, GPUs): `8`, never `8.0`."""

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        return lambda value: _shown(value, ".0f")


class Fixed(ColumnFormat):
    """A fixed number of decimals (hours: `1.25`)."""

    def __init__(self, places: int) -> None:
        self.places = places

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        spec = f",.{self.places}f"
        return lambda value: _shown(value, spec)


class Percent(ColumnFormat):
    """A share in [0, 1] as a percentage with one decimal: `61.4%`."""

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        return lambda value: _shown(value, ".1%")


class Flag(ColumnFormat):
    """A boolean as yes/no (CSV writes true/false)."""

    numeric = False

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        return lambda value: "-" if missing(value) else ("yes" if value else "no")


class When(ColumnFormat):
    """A time, to the minute in UTC (`2026-11-01 03:00`); data views carry ISO 8601."""

    numeric = False

    def for_values(self, values: Iterable[Any]) -> Callable[[Any], str]:
        from datetime import UTC, datetime

        def shown(value: Any) -> str:
            if missing(value):
                return "-"
            if isinstance(value, str):
                value = datetime.fromisoformat(value)
            return minute_text(value.astimezone(UTC))

        return shown


usd = Money()
number = Figure()
count = Count()
hours = Fixed(2)
percent = Percent()
flag = Flag()
when = When()
