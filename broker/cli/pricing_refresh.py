"""How `broker pricing refresh` runs and reports, and the automatic refresh that other
commands run first when the `auto_refresh_days` setting says the prices are due.

The refresh itself is `pricing.sources.refresh`; this module adds what a person sees:
a progress line per source on stderr, the outcome table, and the broker's own spot
history from the state file for learned interruption rates."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.formats import Fixed, count
from broker.cli.pricing_status import parse_time
from broker.cli.render import Column, Output, render

if TYPE_CHECKING:
    from pricing.sources.refresh import RefreshResult, Reporter
    from pricing.sources.status import Outcome

AUTO_RETRY_HOURS = 6.0  # after an automatic refresh attempt, wait this long before another

OUTCOME_COLUMNS = (
    Column("name", "source"),
    Column("cloud", "cloud"),
    Column("state", "state"),
    Column("rows", "offers", count),
    Column("seconds", "s", Fixed(1)),
    Column("reason", "reason"),
    Column("notes", "notes"),
    Column("endpoint", "endpoint"),
)


def no_credentials(result: RefreshResult, cloud: str) -> bool:
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


def catalog_target(flag: Path | None) -> Path:
    """The catalog a refresh writes: the flag or the `catalog` setting, else the user's."""
    from broker.cli.inputs import output_path
    from pricing.catalog import user_catalog_path
    from pricing.userio.settings import resolve_path

    chosen = resolve_path("catalog", flag)
    if chosen is None:
        return user_catalog_path()  # its folder is made when it is first written
    return output_path(chosen, "--catalog" if flag is not None else "the catalog setting")


def report_refresh(result: RefreshResult, output: Output) -> None:
    """Notes, failures and what was written to stderr; the outcome per source to stdout."""
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


def _observations(state: str | None) -> list:
    """What the broker saw of its own spot instances (hours, interruptions), for learned
    interruption rates; [] without a state file."""
    from broker.cli.session import state_path
    from broker.cli.statefile import check_state

    path = state_path(state)
    found = check_state(path, "read")  # a folder or a foreign file given: exit 2, first
    if found is not None and found.kind in ("missing", "empty"):
        return []
    from broker.clock import SystemClock
    from broker.state import StateStore
    from broker.state.model import AttemptState
    from pricing.sources.interruption import Observation

    found = []
    try:  # read-only: learning from the history never changes it
        store = StateStore.open(path, SystemClock(), read_only=True)
    except Exception as exc:  # a newer or broken state file: learn nothing, say so
        print(f"broker: interruption history not read from {path}: {exc}", file=sys.stderr)
        return []
    with store:
        for attempt in store.attempts(states=list(AttemptState)):
            place = attempt.placed_on
            if attempt.market != "spot" or not attempt.running_at or not attempt.ended_at:
                continue
            hours = (attempt.ended_at - attempt.running_at).total_seconds() / 3600
            interrupted = int(attempt.state == AttemptState.INTERRUPTED)
            key = (place.cloud, place.region, place.instance_type)
            found.append(Observation(*key, hours, interrupted))
    return found


def progress_reporter() -> LineReporter | _RichReporter:
    """A live spinner per source on a terminal, else one line per source when it ends."""
    if sys.stderr.isatty():
        return _RichReporter()
    return LineReporter()


class LineReporter:
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
    target = catalog_target(catalog)
    entries = read_status(status_path(target)).values()
    successes = [t for t in (parse_time(e.get("last_success")) for e in entries) if t]
    attempts = [t for t in (parse_time(e.get("last_attempt")) for e in entries) if t]
    if days <= 0 or (successes and (now - max(successes)).total_seconds() < days * 86400):
        return None
    if attempts and (now - max(attempts)).total_seconds() < AUTO_RETRY_HOURS * 3600:
        return None
    print(f"broker: refreshing prices (auto_refresh_days = {days:g})", file=sys.stderr)
    from pricing.sources.refresh import CLOUDS

    try:
        result = run_refresh(target, CLOUDS, (), LineReporter())
    except Exception as exc:  # never let a price refresh break the command that needed prices
        print(f"broker: automatic refresh failed: {exc}", file=sys.stderr)
        return None
    for outcome in result.failed:
        print(f"broker: {outcome.name} failed: {outcome.reason}", file=sys.stderr)
    return result
