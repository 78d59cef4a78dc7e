"""The one renderer behind every `--output table|json|csv|markdown`.

Commands hand over plain rows (dicts) and column specs; this module is the
only place that decides how they look. JSON and CSV carry exact values; only
the table and Markdown views round, for display.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TextIO


class Output(StrEnum):
    """Output formats every data command accepts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@dataclass(frozen=True)
class Column:
    """One column: the row key, its header, and how to show a value to a human."""

    key: str
    header: str
    fmt: Callable[[Any], str] | None = None
    numeric: bool = False


def usd(value: Any) -> str:
    """A price for display: 4 decimals under 1 USD, 2 above; "-" when unknown."""
    if _missing(value):
        return "-"
    value = float(value)
    return f"{value:,.4f}" if 0 < abs(value) < 1 else f"{value:,.2f}"


def number(value: Any) -> str:
    """A count or size for display, without a trailing .0."""
    if _missing(value):
        return "-"
    value = float(value)
    return f"{value:g}"


def _missing(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """A JSON-safe exact value: NaN becomes null, numpy scalars become Python ones."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _shown(column: Column, value: Any) -> str:
    if column.fmt is not None:
        return column.fmt(value)
    return "-" if _missing(value) else str(value)


def render(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    output: Output,
    *,
    title: str = "",
    notes: Sequence[str] = (),
    json_key: str = "rows",
    meta: dict[str, Any] | None = None,
    stream: TextIO | None = None,
) -> None:
    """Write `rows` to `stream` (stdout) in `output` format.

    `title` and `notes` frame the human views; in JSON they travel as `meta`,
    and with CSV they go to stderr so that stdout stays pure data.
    """
    stream = stream or sys.stdout
    if output == Output.json:
        document = dict(meta or {})
        document[json_key] = [{c.key: _plain(row.get(c.key)) for c in columns} for row in rows]
        json.dump(document, stream, indent=2, default=str)
        stream.write("\n")
    elif output == Output.csv:
        import csv

        for line in (title, *notes):
            if line:
                print(line, file=sys.stderr)
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow([c.key for c in columns])
        for row in rows:
            writer.writerow(
                ["" if _plain(row.get(c.key)) is None else _plain(row.get(c.key)) for c in columns]
            )
    elif output == Output.markdown:
        if title:
            stream.write(f"**{title}**\n\n")
        stream.write("| " + " | ".join(c.header for c in columns) + " |\n")
        stream.write("|" + "|".join("---:" if c.numeric else "---" for c in columns) + "|\n")
        for row in rows:
            cells = (_shown(c, row.get(c.key)).replace("|", "\\|") for c in columns)
            stream.write("| " + " | ".join(cells) + " |\n")
        for note in notes:
            stream.write(f"\n{note}\n")
    else:
        _plain_table(rows, columns, title, notes, stream)


# The box of the table view (rich's HEAVY_HEAD look, which this view replaced: importing
# rich cost `broker plan` a fifth of its time budget): top, header row, header rule,
# body row, bottom; each as (left, column rule, separator, right).
_BOX = (
    ("┏━", "━", "━┳━", "━┓"),
    ("┃ ", " ", " ┃ ", " ┃"),
    ("┡━", "━", "━╇━", "━┩"),
    ("│ ", " ", " │ ", " │"),
    ("└─", "─", "─┴─", "─┘"),
)


def _plain_table(rows, columns, title, notes, stream) -> None:
    """A boxed text table, every row whole (no styling, no fitting to the terminal)."""
    header = [c.header for c in columns]
    body = [[_shown(c, row.get(c.key)) for c in columns] for row in rows]
    widths = [max(len(cell) for cell in cells) for cells in zip(header, *body, strict=True)]

    def line(kind: int, cells: Sequence[str] | None = None) -> str:
        left, fill, between, right = _BOX[kind]
        if cells is None:
            parts = [fill * width for width in widths]
        else:
            parts = [
                cell.rjust(width) if column.numeric else cell.ljust(width)
                for cell, width, column in zip(cells, widths, columns, strict=True)
            ]
        return left + between.join(parts) + right + "\n"

    out = [title + "\n"] if title else []
    out += [line(0), line(1, header), line(2)]
    out += [line(3, cells) for cells in body]
    out += [line(4)]
    out += [note + "\n" for note in notes]
    stream.write("".join(out))
