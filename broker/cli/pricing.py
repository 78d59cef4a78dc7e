"""`broker pricing ...`: manage the offers catalog: import other formats, refresh it from
the clouds' live price sources, and show how fresh each source is."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.exits import BAD_INPUT, FAILED, PROVIDER, fail
from broker.cli.jobs import StateOption
from broker.cli.options import OutputOption, split_list
from broker.cli.render import Column, Output, number, render

if TYPE_CHECKING:
    from pricing.sources.refresh import RefreshResult, Reporter
    from pricing.sources.status import Outcome

app = typer.Typer(help="Manage the offers catalog.", no_args_is_help=True)

FORMATS = ("skypilot",)
AUTO_RETRY_HOURS = 6.0  # after an automatic refresh attempt, wait this long before another

CatalogTarget = typer.Option(
    None,
    "--catalog",
    help="Catalog to refresh or inspect [env: BROKER_CATALOG; default: the user catalog "
    "~/.local/share/broker/offers.csv].",
    show_default=False,
)


@app.command("import")
def import_catalog(
    directory: Path = typer.Argument(..., help="Folder with <cloud>/vms.csv (SkyPilot v8 layout)."),
    format: str = typer.Option("skypilot", "--format", help="Source layout: skypilot."),
    into: Path = typer.Option(
        None,
        "--into",
        help="Catalog file to write [default: the user catalog, which then "
        "takes precedence over the bundled snapshot until removed].",
        show_default=False,
    ),
    cloud: list[str] = typer.Option(None, "--cloud", help="Only these clouds (repeat or comma)."),
    as_of: str = typer.Option(
        None,
        "--as-of",
        help="Date the prices were read (YYYY-MM-DD) [default: each file's modification date].",
        show_default=False,
    ),
) -> None:
    """Import a catalog in another tool's layout into a broker offers catalog."""
    from pricing.catalog import user_catalog_path, write_offers_csv
    from pricing.importers.skypilot import CatalogImportError, import_skypilot

    if format not in FORMATS:
        from pricing.userio.suggest import hint

        fail(f"unknown format {format!r}{hint(format, FORMATS)}", BAD_INPUT)
    if not directory.is_dir():
        fail(f"not a directory: {directory}", BAD_INPUT)
    clouds = split_list(cloud) or None
    if as_of is not None:
        from datetime import date

        try:
            as_of = date.fromisoformat(as_of).isoformat()
        except ValueError:
            fail(f"--as-of must be a date such as 2026-05-20, not {as_of!r}", BAD_INPUT)
    try:
        offers = import_skypilot(directory, clouds=clouds, as_of=as_of)
    except CatalogImportError as exc:
        fail(str(exc), BAD_INPUT)
    if offers.empty:
        fail(f"no <cloud>/vms.csv for aws, gcp or azure found under {directory}", BAD_INPUT)
    target = into or user_catalog_path()
    write_offers_csv(offers, target)
    counts = offers.groupby("cloud", observed=True).size()
    per_cloud = ", ".join(f"{cloud} {n:,}" for cloud, n in counts.items())
    print(f"wrote {len(offers):,} offers ({per_cloud}) to {target}", file=sys.stderr)
    if into is None:
        print(
            "the user catalog now takes precedence over the bundled snapshot; "
            f"remove {target} to go back",
            file=sys.stderr,
        )


# --- refresh --------------------------------------------------------------------------------

OUTCOME_COLUMNS = (
    Column("name", "source"),
    Column("cloud", "cloud"),
    Column("state", "state"),
    Column("rows", "offers", number, numeric=True),
    Column("seconds", "s", number, numeric=True),
    Column("reason", "reason"),
    Column("notes", "notes"),
    Column("endpoint", "endpoint"),
)


@app.command("refresh")
def refresh_command(
    cloud: list[str] = typer.Option(
        None, "--cloud", help="aws, gcp, azure (repeat or comma) [default: all three]."
    ),
    region: list[str] = typer.Option(
        None, "--region", help="Only these regions: names or globs, e.g. 'us-*' [default: all]."
    ),
    catalog: Path = CatalogTarget,
    state: Path = StateOption,
    output: Output = OutputOption,
) -> None:
    """Rebuild the catalog from the clouds' public price sources (docs/catalog.md, Live prices).

    A source that fails keeps its previous rows (with their older as-of date) and is
    reported with its reason; the catalog is written atomically. Exit 1 when a source
    failed, 5 when a cloud named with --cloud could not be read for lack of credentials.
    """
    from pricing.sources.refresh import CLOUDS

    clouds = tuple(c.lower() for c in split_list(cloud)) or CLOUDS
    wrong = [c for c in clouds if c not in CLOUDS]
    if wrong:
        from pricing.userio.suggest import hint

        fail(f"unknown cloud {wrong[0]!r}{hint(wrong[0], CLOUDS)}", BAD_INPUT)
    target = _target(catalog)
    reporter = _reporter()
    try:
        result = run_refresh(target, clouds, split_list(region), reporter, state)
    finally:
        reporter.close()
    _report(result, output)
    if result.failed:
        raise typer.Exit(FAILED)
    if cloud and any(_no_credentials(result, c) for c in clouds):
        raise typer.Exit(PROVIDER)


def _no_credentials(result: RefreshResult, cloud: str) -> bool:
    """Whether none of `cloud`'s price sources was read, for lack of credentials."""
    from pricing.sources.refresh import SOURCES

    mine = [o for o in result.outcomes if o.cloud == cloud and SOURCES[o.name].markets]
    return bool(mine) and not any(o.ok for o in mine) and any(o.state == "skipped" for o in mine)


def run_refresh(
    target: Path,
    clouds: tuple[str, ...],
    regions: tuple[str, ...],
    reporter: Reporter | None,
    state: Path | None = None,
) -> RefreshResult:
    """One refresh of `target` (shared by the command and the automatic refresh)."""
    from pricing.sources.refresh import refresh

    return refresh(
        target,
        clouds=clouds,
        regions=regions,
        reporter=reporter,
        observations=_observations(state),
    )


def _target(flag: Path | None) -> Path:
    from pricing.catalog import user_catalog_path
    from pricing.userio.settings import resolve_path

    return resolve_path("catalog", flag) or user_catalog_path()


def _report(result: RefreshResult, output: Output) -> None:
    err = sys.stderr
    for outcome in result.outcomes:
        for note in outcome.notes:
            print(f"  {outcome.name}: {note}", file=err)
        if outcome.state == "failed":
            print(f"broker: {outcome.name} failed: {outcome.reason}", file=err)
        elif outcome.state == "skipped":
            print(f"broker: {outcome.name} skipped: {outcome.reason}", file=err)
    for note in result.notes:
        print(f"broker: {note}", file=err)
    if result.written:
        print(
            f"wrote {result.rows:,} offers to {result.catalog} ({result.fresh:,} read live, "
            f"{result.kept:,} kept from the {result.base})",
            file=err,
        )
        if result.failed:
            names = ", ".join(o.name for o in result.failed)
            print(f"kept the previous rows of {names}, with their older as-of dates", file=err)
    else:
        print(f"no source succeeded: {result.catalog} is unchanged", file=err)
    rows = [_outcome_row(o) for o in result.outcomes]
    meta = {"catalog": str(result.catalog), "written": result.written, "rows": result.rows}
    columns = OUTCOME_COLUMNS
    if output in (Output.table, Output.markdown):  # notes went to stderr above
        columns = tuple(c for c in columns if c.key not in ("notes", "endpoint"))
    render(rows, columns, output, json_key="sources", meta=meta)


def _outcome_row(outcome: Outcome) -> dict[str, Any]:
    from dataclasses import asdict

    row = asdict(outcome)
    row["notes"] = "; ".join(outcome.notes)
    return row


def _observations(state: Path | None) -> list:
    """What the broker saw of its own spot instances (hours, interruptions), for learned
    interruption rates; [] without a state file."""
    from broker.cli.jobs import state_path

    path = state_path(state)
    if not path.is_file():
        return []
    from broker.clock import SystemClock
    from broker.state import StateStore
    from broker.state.model import AttemptState
    from pricing.sources.interruption import Observation

    found = []
    try:
        store = StateStore.open(path, SystemClock())
    except Exception as exc:  # a newer or broken state file: learn nothing, say so
        print(f"broker: interruption history not read from {path}: {exc}", file=sys.stderr)
        return []
    with store:
        for attempt in store.attempts(states=list(AttemptState)):
            place = attempt.placement
            if attempt.market != "spot" or not attempt.running_at or not attempt.ended_at:
                continue
            hours = (attempt.ended_at - attempt.running_at).total_seconds() / 3600
            interrupted = int(attempt.state == AttemptState.INTERRUPTED)
            key = (place.get("cloud", ""), place.get("region", ""), place.get("instance_type", ""))
            found.append(Observation(*map(str, key), hours, interrupted))
    return found


def _reporter() -> _LineReporter | _RichReporter:
    if sys.stderr.isatty():
        return _RichReporter()
    return _LineReporter()


class _LineReporter:
    """One line per source when it ends (stderr is not a terminal)."""

    def close(self) -> None:
        pass

    def start(self, name: str) -> None:
        pass

    def update(self, name: str, message: str) -> None:
        pass

    def finish(self, outcome: Outcome) -> None:
        detail = f"ok, {outcome.rows:,} rows" if outcome.ok else outcome.state
        print(f"{outcome.name}: {detail} ({outcome.seconds:.1f} s)", file=sys.stderr, flush=True)


class _RichReporter:
    """A live line per source: spinner, what it is reading, elapsed time (stderr)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.fields[name]:<22}"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.tasks: dict[str, Any] = {}
        self.lock = threading.Lock()  # sources report from several threads
        self.progress.start()

    def close(self) -> None:
        self.progress.stop()

    def start(self, name: str) -> None:
        with self.lock:
            self.tasks[name] = self.progress.add_task("starting", name=name, total=None)

    def update(self, name: str, message: str) -> None:
        self.progress.update(self.tasks[name], description=message)

    def finish(self, outcome: Outcome) -> None:
        text = {"ok": f"ok, {outcome.rows:,} rows", "skipped": "skipped"}.get(
            outcome.state, "[red]failed[/red]"
        )
        with self.lock:
            self.progress.update(self.tasks[outcome.name], description=text, total=1, completed=1)


# --- status ---------------------------------------------------------------------------------

STATUS_COLUMNS = (
    Column("source", "source"),
    Column("cloud", "cloud"),
    Column("state", "last attempt"),
    Column("last_success", "last success"),
    Column("age", "age"),
    Column("rows", "offers", number, numeric=True),
    Column("oldest_as_of", "oldest as of"),
    Column("stale", "stale"),
    Column("reason", "reason"),
)


@app.command("status")
def status_command(catalog: Path = CatalogTarget, output: Output = OutputOption) -> None:
    """Each price source: last success, age, offers in the catalog, last failure."""
    from pricing.catalog import load_catalog, status_path
    from pricing.schema import SchemaError
    from pricing.userio.settings import resolve, resolve_path

    path = resolve_path("catalog", catalog)
    if path is not None and not path.is_file():
        fail(f"catalog file not found: {path}", BAD_INPUT)
    try:
        loaded = load_catalog(path)
    except SchemaError as exc:
        fail(str(exc), BAD_INPUT)
    freshness = int(resolve("freshness_days").value)
    now = datetime.now(UTC)
    rows = status_rows(loaded.offers, status_path(loaded.path), now, freshness)
    label = {"bundled": "bundled snapshot", "user": "user catalog", "file": "catalog"}
    title = f"{label[loaded.origin]} {loaded.path}: {len(loaded.offers):,} offers"
    render(rows, STATUS_COLUMNS, output, title=title, json_key="sources", meta={"title": title})


def status_rows(offers: Any, status_file: Path, now: datetime, freshness_days: int) -> list[dict]:
    """One row per live source (from the status file) and per other price source in the
    catalog (the snapshot's pages, an import), with rows and ages."""
    from pricing.sources.interruption import ADVISOR, RATE_TAG
    from pricing.sources.refresh import SOURCES
    from pricing.sources.status import read_status, rows_by_source

    entries = read_status(status_file)
    sources = offers.text("source").tolist()
    counts = rows_by_source(sources, offers.text("as_of").tolist())
    advisor_rows = sum(1 for s in sources if f"{RATE_TAG}{ADVISOR}" in s)
    rows = []
    for name, info in SOURCES.items():
        entry = entries.get(name, {})
        if not entry and name not in counts:
            continue
        rows_now, oldest = counts.get(name, (advisor_rows if not info.markets else 0, ""))
        last = _parse_time(entry.get("last_success"))
        age_days = (now - last).total_seconds() / 86400 if last else None
        rows.append(
            {
                "source": name,
                "cloud": info.cloud,
                "state": entry.get("state", "never"),
                "last_success": entry.get("last_success") or "never",
                "age": _age_text(age_days),
                "rows": rows_now,
                "oldest_as_of": oldest,
                "stale": _stale(oldest, now, freshness_days),
                "reason": entry.get("reason", "") if entry.get("state") != "ok" else "",
            }
        )
    clouds = dict(zip(sources, offers.text("cloud").tolist(), strict=True))
    for name, (rows_now, oldest) in sorted(counts.items()):
        if name in SOURCES:
            continue
        age = _days_since(oldest, now)
        rows.append(
            {
                "source": name,
                "cloud": _cloud_of(name, clouds),
                "state": "static",
                "last_success": oldest,
                "age": _age_text(age),
                "rows": rows_now,
                "oldest_as_of": oldest,
                "stale": _stale(oldest, now, freshness_days),
                "reason": "",
            }
        )
    return rows


def _cloud_of(price_source: str, clouds: dict[str, str]) -> str:
    from pricing.sources.status import price_source as head

    found = {cloud for source, cloud in clouds.items() if head(source) == price_source}
    return ",".join(sorted(found))


def _parse_time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def _days_since(iso_date: str, now: datetime) -> float | None:
    try:
        return float((now.date() - datetime.fromisoformat(iso_date[:10]).date()).days)
    except ValueError:
        return None


def _stale(oldest: str, now: datetime, freshness_days: int) -> bool:
    age = _days_since(oldest, now) if oldest else None
    return age is not None and age > freshness_days


def _age_text(days: float | None) -> str:
    if days is None:
        return "-"
    if days < 1 / 24:
        return f"{max(days * 1440, 0):.0f} min"
    if days < 2:
        return f"{days * 24:.0f} h"
    return f"{days:.0f} d"


# --- automatic refresh ----------------------------------------------------------------------


def auto_refresh(catalog: Path | None = None, now: datetime | None = None) -> RefreshResult | None:
    """Refresh the user catalog before a command when the `auto_refresh_days` setting (off
    by default) says it is due: its sources last succeeded longer ago than that. Only the
    user catalog (not a file given with --catalog or configured), never in CI (the CI
    environment variable is set), never twice within AUTO_RETRY_HOURS of an attempt, and
    never fatal: a failure is one line on stderr and the command goes on."""
    import os

    from pricing.catalog import status_path
    from pricing.sources.status import read_status
    from pricing.userio.settings import resolve, resolve_path

    setting = resolve("auto_refresh_days").value
    if not setting or os.environ.get("CI") or resolve_path("catalog", catalog) is not None:
        return None
    try:
        days = float(setting)
    except (TypeError, ValueError):
        print(f"broker: auto_refresh_days must be a number, not {setting!r}", file=sys.stderr)
        return None
    now = now or datetime.now(UTC)
    target = _target(catalog)
    entries = read_status(status_path(target)).values()
    successes = [t for t in (_parse_time(e.get("last_success")) for e in entries) if t]
    attempts = [t for t in (_parse_time(e.get("last_attempt")) for e in entries) if t]
    if days <= 0 or (successes and (now - max(successes)).total_seconds() < days * 86400):
        return None
    if attempts and (now - max(attempts)).total_seconds() < AUTO_RETRY_HOURS * 3600:
        return None
    print(f"broker: refreshing prices (auto_refresh_days = {days:g})", file=sys.stderr)
    from pricing.sources.refresh import CLOUDS

    try:
        result = run_refresh(target, CLOUDS, (), _LineReporter())
    except Exception as exc:  # never let a price refresh break the command that needed prices
        print(f"broker: automatic refresh failed: {exc}", file=sys.stderr)
        return None
    for outcome in result.failed:
        print(f"broker: {outcome.name} failed: {outcome.reason}", file=sys.stderr)
    return result
