"""`broker cost-report`: what was spent, by whom and where, what it saved, what was lost,
and how the ledger compares with the clouds' own bills. Reference: docs/reports.md."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.exits import BAD_INPUT, FAILED, fail
from broker.cli.formats import hours, percent
from broker.cli.inputs import output_path
from broker.cli.options import (
    CatalogOption,
    OutputOption,
    OverlaysOption,
    WideOption,
    split_list,
    time_flag,
)
from broker.cli.render import Column, Output, number, render, usd
from broker.cli.session import StateOption, state_path
from broker.cli.statefile import opened_store

if TYPE_CHECKING:
    from broker.reports.actual import Reconciliation
    from broker.reports.chart import HtmlTable
    from broker.reports.query import Figures
    from broker.reports.report import Report

DEFAULT_BY = "team"
NOTES = (
    "savings: against the on-demand price of the same GPUs in the cheapest region of each "
    "job's first-choice cloud, from the offers in force, leaving out lost work "
    "(docs/reports.md)",
    "lost work: interrupted attempts' time after their last checkpoint (none when the job "
    "saved once told to stop; the whole attempt when it never checkpointed)",
)


FIGURE_COLUMNS = (
    Column("total_usd", "total $", usd, True),
    Column("compute_usd", "compute $", usd, True),
    Column("onprem_usd", "on-prem $", usd, True),
    Column("egress_usd", "egress $", usd, True),
    Column("gpu_hours", "GPU-h", hours),
    Column("spot_share", "spot", percent),
    Column("lost_gpu_hours", "lost GPU-h", hours),
    Column("lost_usd", "lost $", usd, True),
    Column("on_demand_usd", "on-demand $", usd, True),
    Column("savings_usd", "savings $", usd, True),
)
EGRESS_COLUMNS = (
    Column("day", "day"),
    Column("job", "job"),
    Column("attempt", "attempt"),
    Column("sender", "billed by"),
    Column("detail", "what"),
    Column("gb", "GB", number, True),
    Column("usd_per_gb", "$/GB", usd, True),
    Column("amount_usd", "amount $", usd, True),
)
ACTUAL_COLUMNS = (
    Column("cloud", "cloud"),
    Column("instance", "instance"),
    Column("job", "job"),
    Column("attempt", "attempt"),
    Column("planned_usd", "planned $", usd, True),
    Column("billed_usd", "billed $", usd, True),
    Column("difference_usd", "difference $", usd, True),
    Column("difference_pct", "difference %", number, True),
    Column("flag", "flag"),
)


def cost_report(
    by: list[str] = typer.Option(
        None,
        "--by",
        help="Group by, comma-separated or repeated: job, team, queue, cloud, region, gpu, "
        f"market, kind, day, month [default: {DEFAULT_BY}].",
        show_default=False,
        metavar="KEYS",
    ),
    since: str = typer.Option(
        None,
        "--since",
        help="From this UTC date (YYYY-MM-DD) or time, inclusive.",
        metavar="DATE",
    ),
    until: str = typer.Option(
        None,
        "--until",
        help="Up to this UTC date, inclusive (a time: up to, exclusive).",
        metavar="DATE",
    ),
    output: Output = OutputOption,
    wide: bool = WideOption,
    chart: bool = typer.Option(
        False, "--chart", help="Draw daily spend by group (to stderr with json or csv)."
    ),
    html: Path = typer.Option(
        None,
        "--html",
        help="Also write a one-file HTML report with the tables and a chart "
        "(needs the plot extra: pip install 'broker[plot]').",
        show_default=False,
        metavar="FILE",
    ),
    actual: list[Path] = typer.Option(
        None,
        "--actual",
        help="A billing export CSV (AWS CUR, GCP BigQuery export, Azure cost details) to "
        "reconcile planned against billed per instance; repeatable.",
        show_default=False,
        metavar="FILE",
    ),
    state: str = StateOption,
    catalog: Path = CatalogOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Spend from the cost ledger, grouped: totals, savings, spot share, lost work, egress;
    --actual reconciles it with a cloud bill, flagging differences above 5%."""
    from broker.reports.query import UnknownGrouping, parse_by

    try:
        groups = parse_by(split_list(by) or (DEFAULT_BY,))
    except UnknownGrouping as exc:
        fail(str(exc), BAD_INPUT)
    start, end = time_flag(since, "--since"), time_flag(until, "--until", inclusive_day=True)
    if start is not None and end is not None and start >= end:
        fail("--since must be before --until", BAD_INPUT)
    if html is not None:
        output_path(html, "--html", inputs=(*(actual or ()), catalog, overlays))
    bills = _bills(actual or ())
    with opened_store(state_path(state), "read") as store:  # None: nothing ran yet, empty
        report = _build(store, groups, start, end, catalog, overlays)
        reconciled = _reconcile(store, report, bills) if bills else None
        clock = sandbox_clock_notes(store.time_scales(start, end) if store is not None else {})
    _emit(report, reconciled, output, chart, wide, clock)
    if html is not None:
        _write_html(html, report, reconciled, clock)


def _bills(paths):
    from broker.reports.actual import BillError, read_bill

    bills = []
    for path in paths:
        if not path.is_file():
            fail(f"--actual: no such file: {path}", BAD_INPUT)
        try:
            bills.append(read_bill(path))
        except BillError as exc:
            fail(str(exc), BAD_INPUT)
        if not bills[-1].lines:  # a period with no usage exports so; a wrong export too
            print(f"broker: {path}: {bills[-1].format} columns and no lines", file=sys.stderr)
    return bills


def _build(store, groups, start, end, catalog, overlays) -> Report:
    from broker.reports.report import build_report

    if store is None or not store.ledger(since=start, until=end):
        return build_report(store, groups, start, end)
    from broker.cli.options import offers_in_force
    from broker.reports.savings import OnDemandPrices

    view = offers_in_force(catalog, None, overlays)
    return build_report(store, groups, start, end, OnDemandPrices.from_offers(view.index.offers))


def _reconcile(store, report: Report, bills) -> Reconciliation:
    from broker.reports.actual import planned_by_attempt, reconcile

    attempts = report.ledger.attempts
    jobs = {
        attempt.id: f"{job.team}/{job.name}"
        for attempt in attempts.values()
        if (job := report.ledger.jobs.get(attempt.job_id)) is not None
    }
    planned = planned_by_attempt(report.lines, attempts)
    instances = store.instances() if store is not None else []
    return reconcile(bills, instances, planned, jobs, report.since, report.until)


# --- rows: exact text for json/csv; the table formatters round for display --------------


def _text(value: Any) -> Any:
    """A Decimal as exact text with the places it carries."""
    from decimal import Decimal

    return format(value, "f") if isinstance(value, Decimal) else value


def _ledger_text(value: Any) -> Any:
    """Money and hours as the ledger keeps them: exact, with at least its 6 places
    (`"32.784410"`, `"0.000000"`); padding only, never rounding (broker.state.money)."""
    from decimal import Decimal

    from broker.state.money import PLACES, USD_STEP

    if isinstance(value, Decimal) and value.as_tuple().exponent > -PLACES:  # type: ignore[operator]
        value = value.quantize(USD_STEP)
    return _text(value)


def _figures(figures: Figures) -> dict[str, Any]:
    return {
        key: _ledger_text(value) if key.endswith(("_usd", "_hours")) else _text(value)
        for key, value in figures.as_dict().items()
    }


def _group_rows(report: Report) -> list[dict[str, Any]]:
    return [dict(zip(report.by, g.keys, strict=True)) | _figures(g.figures) for g in report.groups]


def _egress_rows(report: Report) -> list[dict[str, Any]]:
    from pricing.userio.redact import redact

    return [
        {
            "day": line.keys["day"],
            "job": line.keys["job"],
            "attempt": line.attempt_id,
            "sender": f"{line.keys['cloud']}:{line.keys['region']}",
            "detail": redact(line.detail),  # a ledger row written before details were redacted
            "gb": _text(line.quantity),
            "usd_per_gb": _text(line.unit_price),
            "amount_usd": _ledger_text(line.amount),
        }
        for line in report.egress
    ]


def _actual_rows(reconciled: Reconciliation) -> list[dict[str, Any]]:
    return [
        {
            "cloud": row.cloud,
            "instance": row.instance,
            "job": row.job,
            "attempt": row.attempt,
            "planned_usd": _text(row.planned),
            "billed_usd": _text(row.billed),
            "difference_usd": _text(row.difference),
            "difference_pct": _text(row.difference_pct),
            "flag": row.flag,
        }
        for row in reconciled.rows
    ]


def _title(report: Report) -> str:
    period = "all time"
    if report.since or report.until:
        start = _shown_time(report.since) if report.since else "the start"
        end = _shown_time(report.until) if report.until else "now"
        period = f"from {start} up to {end} (exclusive)"
    return f"Cost report, USD, by {', '.join(report.by)}: {period}"


def _shown_time(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    if utc == utc.replace(hour=0, minute=0, second=0, microsecond=0):
        return utc.date().isoformat()
    return utc.isoformat(timespec="seconds")


def _chart_label(report: Report) -> str:
    return ", ".join(name for name in report.by if name not in ("day", "month"))


def sandbox_clock_notes(scales: dict[float | None, int]) -> list[str]:
    """Say which attempts were billed on the sandbox's fast clock (their hours are not
    wall hours), and which were recorded before the time scale was."""
    notes = []
    for scale, n in sorted((s, n) for s, n in scales.items() if s not in (None, 1)):
        notes.append(
            f"sandbox time: {n} attempt(s) billed {scale:g} s per wall second "
            "(--sandbox-time-scale; the demo's fast clock is 3600): not wall hours"
        )
    if scales.get(None):
        notes.append(
            f"sandbox time: {scales[None]} attempt(s) recorded before the time scale was "
            "(`broker run` on the sandbox then billed a wall second as an hour)"
        )
    return notes


def _notes(report: Report, reconciled: Reconciliation | None, clock: list[str] = ()) -> list[str]:
    notes = [*NOTES, *clock]
    if report.totals.unpriced:
        notes.append(
            f"{report.totals.unpriced} GPU ledger line(s) have no on-demand price for their "
            "GPUs in the offers in force: left out of savings"
        )
    if reconciled is not None:
        notes.append(
            f"actual: {len(reconciled.flagged)} of {len(reconciled.rows)} instance(s) differ "
            f"by more than 5%; {reconciled.ignored_lines} bill line(s) "
            f"({usd(reconciled.ignored_usd)} USD) are for resources broker does not know"
        )
    return notes


def _emit(
    report: Report,
    reconciled: Reconciliation | None,
    output: Output,
    chart: bool,
    wide: bool,
    clock: list[str],
) -> None:
    keys = tuple(Column(name, name) for name in report.by)
    columns = keys + FIGURE_COLUMNS
    rows, notes = _group_rows(report), _notes(report, reconciled, clock)
    if output == Output.json:
        meta: dict[str, Any] = {"by": list(report.by), "since": _iso(report.since)}
        meta |= {"until": _iso(report.until), "totals": _figures(report.totals)}
        meta |= {"egress": _egress_rows(report), "notes": notes}
        if reconciled is not None:
            meta["actual"] = _actual_rows(reconciled)
        render(rows, columns, output, json_key="groups", meta=meta)
    elif output == Output.csv:
        if reconciled is not None:  # one table per CSV stream: the reconciliation asked for
            render(_actual_rows(reconciled), ACTUAL_COLUMNS, output, notes=notes)
        else:
            render(rows, columns, output, title=_title(report), notes=notes)
    else:
        totals = {report.by[0]: "total"} | _figures(report.totals)
        title = _title(report)
        render([*rows, totals], columns, output, title=title, notes=notes, wide=wide)
        if report.egress:
            render(_egress_rows(report), EGRESS_COLUMNS, output, title="Egress", wide=wide)
        if reconciled is not None:
            title = "Planned (ledger) versus billed, per instance"
            render(_actual_rows(reconciled), ACTUAL_COLUMNS, output, title=title, wide=wide)
    if chart:
        _print_chart(report, sys.stderr if output in (Output.json, Output.csv) else sys.stdout)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _print_chart(report: Report, stream) -> None:
    from rich.console import Console

    from broker.reports.chart import terminal_chart

    console = Console(file=stream, width=None if stream.isatty() else 120)
    if not report.days:
        console.print("no spend in this period: nothing to chart", highlight=False)
        return
    console.print(terminal_chart(report.days, report.series, _chart_label(report)))


def _write_html(
    path: Path, report: Report, reconciled: Reconciliation | None, clock: list[str]
) -> None:
    from broker.reports.chart import MissingExtra, html_report

    keys = tuple(Column(name, name) for name in report.by)
    totals = {report.by[0]: "total"} | _figures(report.totals)
    rows = [*_group_rows(report), totals]
    tables = [_html_table("Spend", keys + FIGURE_COLUMNS, rows, total_row=True)]
    if report.egress:
        tables.append(_html_table("Egress", EGRESS_COLUMNS, _egress_rows(report)))
    if reconciled is not None:
        rows = _actual_rows(reconciled)
        tables.append(_html_table("Planned versus billed", ACTUAL_COLUMNS, rows))
    notes = _notes(report, reconciled, clock)
    try:
        text = html_report(
            _title(report), tables, report.days, report.series, notes, _chart_label(report)
        )
    except MissingExtra as exc:
        fail(str(exc), FAILED)
    from pricing.userio.atomic import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as exc:
        fail(f"--html: cannot write {path}: {exc.strerror or exc}", FAILED)
    print(f"wrote {path}", file=sys.stderr)


def _html_table(title: str, columns, rows, total_row: bool = False) -> HtmlTable:
    from broker.reports.chart import HtmlTable

    shown = [c.cells([row.get(c.key) for row in rows]) for c in columns]
    cells = [list(row) for row in zip(*shown, strict=True)] if rows else []
    numeric = [c.is_numeric for c in columns]
    return HtmlTable(title, [c.header for c in columns], cells, numeric, total_row)
