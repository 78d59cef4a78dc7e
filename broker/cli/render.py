"""The one renderer behind every `--output table|json|csv|markdown`.

Commands hand over plain rows (dicts) and column specs; this module is the only place
that decides how they look:
- table: fitted to the terminal (`COLUMNS` honoured, else the terminal's width; a pipe
  is not cut), long text ellipsised, the least important columns left out with a note
  when cutting is not enough, `wide=True` (the commands' `--wide`) never cuts; numbers
  right-aligned with one number of decimals per column (`broker.cli.formats`); bold
  headers and coloured states only on a terminal, never with `NO_COLOR`;
- JSON and CSV carry exact values: whole floats as integers (`8`, not `8.0`), NaN as
  null (empty in CSV), booleans as true/false; one CSV stream is one table, its title
  and notes go to stderr;
- an empty table says so (`empty`), instead of a bare header.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, NamedTuple, TextIO

from broker.cli.formats import ColumnFormat, missing, number, usd

__all__ = ["Column", "Output", "number", "render", "usd", "write_json"]


class Output(StrEnum):
    """Output formats every data command accepts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


class Column(NamedTuple):
    """One column: the row key, its header, how a human sees a value (a `ColumnFormat`
    decides per column; a plain function per value), whether it is a number (default:
    the format's), how important it is when a narrow table must leave columns out
    (higher stays longer: 0 goes first, 3 last), an optional colour per shown value,
    and whether its cells may be cut to fit."""

    key: str
    header: str
    fmt: Callable[[Any], str] | None = None
    numeric: bool | None = None
    keep: int = 1
    colour: Callable[[str], str] | None = None
    cut: bool = True  # False: shown whole or not at all (ids); numbers are never cut

    @property
    def is_numeric(self) -> bool:
        if self.numeric is not None:
            return self.numeric
        return isinstance(self.fmt, ColumnFormat) and self.fmt.numeric

    def cells(self, values: Sequence[Any]) -> list[str]:
        """The column's values as shown to a human."""
        if isinstance(self.fmt, ColumnFormat):
            return _each_float_once(self.fmt.for_values(values), values)
        if self.fmt is not None:
            return [self.fmt(v) for v in values]
        return ["-" if missing(v) else str(v) for v in values]


def _each_float_once(shown: Callable[[Any], str], values: Sequence[Any]) -> list[str]:
    """`[shown(v) for v in values]`, each distinct float formatted once (a plan of
    10,000 jobs repeats a few prices). Zero is not remembered: -0.0 equals 0.0 but
    may show as "-0.00"."""
    memo: dict[float, str] = {}
    cells = []
    for value in values:
        if value.__class__ is float and value:
            cell = memo.get(value)
            if cell is None:
                cell = memo[value] = shown(value)
        else:
            cell = shown(value)
        cells.append(cell)
    return cells


_STATE_COLOURS = {
    "succeeded": "\x1b[32m",
    "running": "\x1b[36m",
    "launching": "\x1b[36m",
    "failed": "\x1b[31m",
    "cancelled": "\x1b[2m",
    "interrupted": "\x1b[33m",
    "migrating": "\x1b[33m",
}


def state_colour(shown: str) -> str:
    """The colour of a job or attempt state (green succeeded, red failed, ...)."""
    return _STATE_COLOURS.get(shown, "")


def plain(value: Any) -> Any:
    """A JSON-safe exact value: NaN becomes None, numpy scalars Python ones, whole floats
    integers (a GPU count is `8`, not `8.0`)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, Decimal):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer() and math.isfinite(value):
            return int(value)
    return value


def _json_ready(value: Any) -> Any:
    """`value` with `plain` applied all the way down (the common types first: a plan of
    10,000 jobs holds a million values)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:  # its plain values done here: a call for each leaf is most of the cost
        ready = {}
        for key, item in value.items():
            leaf = type(item)
            if leaf is str or leaf is int or leaf is bool or item is None:
                ready[key] = item
            elif leaf is float:
                ready[key] = _json_float(item)
            else:
                ready[key] = _json_ready(item)
        return ready
    if kind is float:
        return _json_float(value)
    if kind is list or kind is tuple:
        return [_json_ready(item) for item in value]
    return plain(value)


def _json_float(value: float) -> float | int | None:
    """NaN as None, a whole float as an integer (`8`, not `8.0`)."""
    if value != value:  # NaN
        return None
    return int(value) if value.is_integer() and math.isfinite(value) else value


LONG_LIST = 200  # a list longer than this is written one compact item per line


def write_json(document: Any, stream: TextIO | None = None) -> None:
    """Every JSON document the CLI prints: exact, counts as integers; indented, but a
    long list of rows (`plan` of a folder, `jobs --limit 0`) one compact row per line:
    still readable, and written by the C encoder (ten times faster)."""
    stream = stream or sys.stdout
    if type(document) is dict and any(_long(v) for v in document.values()):
        compact = json.JSONEncoder(default=str, ensure_ascii=True).encode
        parts = []
        for key, value in document.items():
            if _long(value):
                items = ",\n    ".join(_compact_items(value, compact))
                parts.append(f"  {compact(key)}: [\n    {items}\n  ]")
            else:
                text = json.dumps(_json_ready(value), indent=2, default=str)
                parts.append(f"  {compact(key)}: {text.replace(chr(10), chr(10) + '  ')}")
        stream.write("{\n" + ",\n".join(parts) + "\n}\n")
        return
    json.dump(_json_ready(document), stream, indent=2, default=str)
    stream.write("\n")


def _long(value: Any) -> bool:
    return (type(value) is list or type(value) is tuple) and len(value) > LONG_LIST


_CONTAINERS = (list, tuple, dict)


def _compact_items(items: Sequence[Any], compact: Callable[[Any], str]) -> Iterator[str]:
    """Each item's compact JSON (`compact(_json_ready(item))`). An item holding lists or
    mappings is written value by value, and a list or mapping object met again (the
    placements that jobs of one shared plan hold) is encoded once."""
    known: dict[int, str] = {}  # id -> JSON of a container of `items` (alive meanwhile)
    for item in items:
        if type(item) is not dict or not any(type(v) in _CONTAINERS for v in item.values()):
            yield compact(_json_ready(item))
            continue
        if not all(type(key) is str for key in item):
            yield compact(_json_ready(item))
            continue
        fields = []
        for key, value in item.items():
            if type(value) in _CONTAINERS:
                text = known.get(id(value))
                if text is None:
                    text = known[id(value)] = compact(_json_ready(value))
            else:
                text = compact(_json_ready(value))
            fields.append(f"{compact(key)}: {text}")
        yield "{" + ", ".join(fields) + "}"


def _csv_cell(value: Any) -> Any:
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def table_width(stream: TextIO, wide: bool) -> int | None:
    """The width a table must fit: none with --wide, else `COLUMNS`, else the terminal's;
    a table written to a pipe or a file is not cut."""
    if wide:
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if _is_terminal(stream):
        import shutil

        return shutil.get_terminal_size().columns
    return None


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, never with NO_COLOR (https://no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return _is_terminal(stream)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def render(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    output: Output,
    *,
    title: str = "",
    notes: Sequence[str] = (),
    json_key: str = "rows",
    meta: dict[str, Any] | None = None,
    empty: str = "nothing to show",
    wide: bool = False,
    stream: TextIO | None = None,
    width: int | None = None,
) -> None:
    """Write `rows` to `stream` (stdout) in `output` format.

    `title` and `notes` frame the human views; in JSON they travel as `meta`, and with
    CSV they go to stderr so that stdout stays pure data. `empty` is what the human views
    say when there are no rows. `width` fits the table to a width other than the
    stream's (a live view drawn off stdout).
    """
    stream = stream or sys.stdout
    if output == Output.json:
        document = dict(meta or {})
        document[json_key] = [{c.key: row.get(c.key) for c in columns} for row in rows]
        write_json(document, stream)
    elif output == Output.csv:
        import csv

        lines = [title, *notes] + ([empty] if not rows else [])
        for line in lines:
            if line:
                print(line, file=sys.stderr)
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow([c.key for c in columns])
        for row in rows:
            writer.writerow([_csv_cell(row.get(c.key)) for c in columns])
    elif output == Output.markdown:
        _markdown(rows, columns, title, notes, empty, stream)
    else:
        fit = None if wide else (width or table_width(stream, wide))
        _table(rows, columns, title, notes, empty, fit, stream)


def _shown_columns(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> list[list[str]]:
    return [c.cells([row.get(c.key) for row in rows]) for c in columns]


def _markdown(rows, columns, title, notes, empty, stream) -> None:
    if title:
        stream.write(f"**{title}**\n\n")
    if not rows:
        stream.write(f"_{empty}_\n")
    else:
        stream.write("| " + " | ".join(c.header for c in columns) + " |\n")
        stream.write("|" + "|".join("---:" if c.is_numeric else "---" for c in columns) + "|\n")
        shown = _shown_columns(rows, columns)
        for index in range(len(rows)):
            cells = (cells[index].replace("|", "\\|") for cells in shown)
            stream.write("| " + " | ".join(cells) + " |\n")
    for note in notes:
        stream.write(f"\n{note}\n")


def _table(rows, columns, title, notes, empty, width, stream) -> None:
    from broker.cli.table import TextColumn, table

    out = [title + "\n"] if title else []
    notes = list(notes)
    if not rows:
        out.append(empty + "\n")
    else:
        shown = _shown_columns(rows, columns)
        text_columns = [
            TextColumn(c.header, cells, c.is_numeric, c.keep, c.cut, c.colour)
            for c, cells in zip(columns, shown, strict=True)
        ]
        fitted = table(text_columns, width, use_colour(stream))
        out.append(fitted.text)
        if fitted.hidden:
            notes.append(
                f"left out to fit {width} columns: {', '.join(fitted.hidden)} "
                "(--wide shows every column)"
            )
    out += [note + "\n" for note in notes]
    stream.write("".join(out))
