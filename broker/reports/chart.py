"""Daily spend by group as a picture: a terminal chart (rich) and a one-file HTML report.

The HTML report draws its chart with matplotlib, the optional `plot` extra,
imported only here and only when asked for; it embeds the PNG as base64 so the
file stands alone. Both take the series of `broker.reports.query.daily`; neither
prints or writes: they return a renderable, bytes or text for the CLI to place.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

COLORS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_black", "white")
# A different fill per group as well as a colour, so that NO_COLOR charts still read.
FILLS = ("█", "▓", "▒", "░", "▞", "▚", "▖", "▘")
PLOT_HINT = "pip install 'broker[plot]'"


class MissingExtra(ImportError):
    """An optional extra needed for this output is not installed."""


def terminal_chart(
    days: Sequence[str],
    series: Mapping[str, Sequence[Decimal]],
    grouped_by: str = "",
    width: int = 48,
) -> RenderableType:
    """One stacked bar per day (groups in legend order) with the day's total."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    labels = list(series)
    per_day = [sum((series[label][i] for label in labels), Decimal(0)) for i in range(len(days))]
    top = max(per_day, default=Decimal(0))
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("day", no_wrap=True)
    table.add_column("bar", no_wrap=True)
    table.add_column("usd", justify="right", no_wrap=True)
    for i, day in enumerate(days):
        bar, running, drawn = Text(), Decimal(0), 0
        for k, label in enumerate(labels):
            running += series[label][i]
            end = round(float(running / top) * width) if top > 0 else 0
            bar.append(FILLS[k % len(FILLS)] * (end - drawn), style=COLORS[k % len(COLORS)])
            drawn = end
        table.add_row(day, bar, f"{float(per_day[i]):,.2f}")
    legend = Text()
    for k, label in enumerate(labels):
        legend.append(FILLS[k % len(FILLS)] * 2, style=COLORS[k % len(COLORS)])
        legend.append(f" {label}   ")
    title = Text(f"Daily spend, USD{' by ' + grouped_by if grouped_by else ''}")
    return Group(title, table, legend)


def daily_png(
    days: Sequence[str], series: Mapping[str, Sequence[Decimal]], grouped_by: str = ""
) -> bytes:
    """A stacked bar chart of daily spend per group, as PNG bytes."""
    import io

    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtra(f"the HTML report draws with matplotlib: {PLOT_HINT}") from exc

    figure = Figure(figsize=(10, 4.5), dpi=100)
    axes = figure.add_subplot()
    positions = list(range(len(days)))
    bottom = [0.0] * len(days)
    for label, values in series.items():
        heights = [float(value) for value in values]
        axes.bar(positions, heights, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    step = max(1, -(-len(days) // 12))  # at most about 12 labelled days
    ticks = positions[::step]
    axes.set_xticks(ticks, [days[p] for p in ticks], rotation=30, ha="right")
    axes.set_ylabel("USD per day")
    axes.set_title(f"Daily spend{' by ' + grouped_by if grouped_by else ''}")
    if len(series) > 1:
        axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class HtmlTable:
    """A table as the report shows it: headers and display text, numeric columns right."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    numeric: Sequence[bool]
    total_row: bool = False  # the last row is a total: shown in bold


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f2f2f2; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: bold; } p.note { color: #555; font-size: 0.9em; }
"""


def html_report(
    title: str,
    tables: Sequence[HtmlTable],
    days: Sequence[str],
    series: Mapping[str, Sequence[Decimal]],
    notes: Sequence[str] = (),
    grouped_by: str = "",
) -> str:
    """A one-file HTML report: the tables, the daily chart (embedded PNG) and notes."""
    import base64

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if days:
        image = base64.b64encode(daily_png(days, series, grouped_by)).decode("ascii")
        parts.append(f'<img alt="Daily spend by group" src="data:image/png;base64,{image}">')
    for table in tables:
        parts.append(_table(table))
    parts += [f'<p class="note">{html.escape(note)}</p>' for note in notes]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(table: HtmlTable) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    body = []
    for n, row in enumerate(table.rows, start=1):
        cells = "".join(
            f'<td class="n">{html.escape(cell)}</td>'
            if numeric
            else f"<td>{html.escape(cell)}</td>"
            for cell, numeric in zip(row, table.numeric, strict=True)
        )
        total = table.total_row and n == len(table.rows)
        body.append(f'<tr class="total">{cells}</tr>' if total else f"<tr>{cells}</tr>")
    return (
        f"<h2>{html.escape(table.title)}</h2>\n<table><thead><tr>{head}</tr></thead>"
        f"<tbody>\n" + "\n".join(body) + "\n</tbody></table>"
    )
