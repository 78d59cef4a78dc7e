"""`refresh`: read the live price sources and rewrite a catalog from them.

One call does it all, in this order:
1. Read the catalog being replaced (the target file, else the bundled snapshot):
   its rows are the fallback, and it lends shapes and AWS regions to the sources.
2. Run the sources of the asked clouds in parallel threads (AWS: the Price List,
   then the spot history for the types it found; plus the Spot Instance Advisor).
   A source ends "ok", "failed" (network, credentials refused, throttling after
   bounded retries, a malformed page: with its reason) or "skipped" (it needs
   credentials and found none).
3. Merge. Each source owns its cloud's markets (`SOURCES`): a source that succeeded
   replaces the previous prices of its markets for the instance types it priced in
   the regions it read; every other previous price stays, with its own older `as_of`
   (a failed source's rows are kept whole; `broker offers` flags them once stale).
4. Fill `spot_interruption_rate` (`pricing.sources.interruption`).
5. Write the catalog atomically, then the spot-history summary, then the status
   file (`pricing.sources.status`). When no source succeeded the catalog is left
   as it is.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pricing.catalog import (
    BUNDLED_CATALOG,
    read_offer_table,
    spot_history_path,
    status_path,
    write_offers_csv,
)
from pricing.schema import COLUMN_NAMES, SchemaError
from pricing.sources import aws, aws_spot, azure, gcp, interruption
from pricing.sources.base import Context, Fetched
from pricing.sources.fetch import Http, MissingCredentials, SourceError
from pricing.sources.shapes import Shape, catalog_shapes
from pricing.sources.status import Outcome, record
from pricing.table import OfferTable
from pricing.userio.atomic import atomic_write
from pricing.userio.redact import redact

CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")
BOTH = ("on-demand", "spot")
PRICE_COLUMN = {"on-demand": "price_on_demand", "spot": "price_spot"}


@dataclass(frozen=True)
class SourceInfo:
    """A live source: its cloud, the markets whose prices it owns, where it reads."""

    name: str
    cloud: str
    markets: tuple[str, ...]
    endpoint: Callable[[], str]


SOURCES: dict[str, SourceInfo] = {
    info.name: info
    for info in (
        SourceInfo(
            aws.ON_DEMAND, "aws", ("on-demand",), lambda: aws.api_endpoint() or aws.bulk_url()
        ),
        SourceInfo(
            aws_spot.SPOT, "aws", ("spot",), lambda: aws_spot.ec2_endpoint() or "ec2 (public)"
        ),
        SourceInfo(azure.NAME, "azure", BOTH, azure.endpoint),
        SourceInfo(gcp.NAME, "gcp", BOTH, gcp.endpoint),
        SourceInfo(interruption.NAME, "aws", (), interruption.endpoint),
    )
}


class Reporter:
    """Progress of a refresh, per source (the CLI shows it; the default shows nothing)."""

    def start(self, name: str) -> None:
        """`name` began."""

    def update(self, name: str, message: str) -> None:
        """`name` is at `message` (a page, a region)."""

    def finish(self, outcome: Outcome) -> None:
        """`outcome.name` ended."""


@dataclass
class RefreshResult:
    """What a refresh did."""

    catalog: Path
    written: bool
    outcomes: list[Outcome]
    rows: int  # in the catalog now
    fresh: int  # rows read live this time
    kept: int  # previous rows kept (whole, or one market of them)
    base: str  # what the previous rows came from
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.state == "failed"]

    @property
    def skipped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.state == "skipped"]


def refresh(
    catalog: Path,
    *,
    clouds: Sequence[str] = CLOUDS,
    regions: Sequence[str] = (),
    http: Http | None = None,
    now: datetime | None = None,
    reporter: Reporter | None = None,
    observations: Iterable[interruption.Observation] = (),
) -> RefreshResult:
    """Refresh `catalog` from the live sources of `clouds` (see the module docstring).

    `regions`: names or globs; empty means every region. `observations`: the broker's
    own spot history, for learned interruption rates. Raises ValueError for an
    unknown cloud."""
    unknown = sorted(set(clouds) - set(CLOUDS))
    if unknown:
        raise ValueError(f"unknown cloud(s): {', '.join(unknown)}; choose from {CLOUDS}")
    http = http or Http()
    now = (now or datetime.now(UTC)).astimezone(UTC)
    reporter = reporter or Reporter()
    previous, base, notes = _previous(catalog)
    bundled = read_offer_table(BUNDLED_CATALOG)
    shapes = {c: catalog_shapes([previous, bundled], c) for c in CLOUDS}
    known_regions = _regions_by_cloud(previous)

    def context(name: str) -> Context:
        return Context(
            http,
            now,
            tuple(regions),
            shapes,
            known_regions,
            lambda message: reporter.update(name, message),
        )

    runs: dict[str, tuple[Outcome, Fetched | None]] = {}

    def run(name: str, call: Callable[[Context], Fetched]) -> None:
        runs[name] = _run(SOURCES[name], call, context(name), reporter)

    def aws_job() -> None:
        run(aws.ON_DEMAND, aws.fetch_on_demand)
        types = _spot_types(runs[aws.ON_DEMAND][1], previous, shapes["aws"])
        run(aws_spot.SPOT, lambda ctx: aws_spot.fetch_spot(ctx, types))

    def advisor_job() -> None:
        run(
            interruption.NAME, lambda ctx: Fetched(extra={"rates": interruption.fetch_advisor(ctx)})
        )

    jobs: list[Callable[[], None]] = []
    if "aws" in clouds:
        jobs += [aws_job, advisor_job]
    if "azure" in clouds:
        jobs.append(lambda: run(azure.NAME, azure.fetch))
    if "gcp" in clouds:
        jobs.append(lambda: run(gcp.NAME, gcp.fetch))
    _run_all(jobs)

    order = [name for name in SOURCES if name in runs]
    outcomes = [runs[name][0] for name in order]
    fetched = {name: runs[name][1] for name in order if runs[name][1] is not None}
    as_of = now.date().isoformat()
    previous_rows = previous.records()
    fresh = [
        offer.row(name, as_of)
        for name, got in fetched.items()
        if SOURCES[name].markets
        for offer in got.offers
    ]
    kept = _kept(previous_rows, fetched, tuple(regions))
    rows = fresh + kept
    advisor = (
        fetched[interruption.NAME].extra["rates"]
        if interruption.NAME in fetched
        else interruption.tagged_rates(previous_rows, interruption.ADVISOR)
    )
    _fill_rates(rows, advisor, interruption.history_rates(observations))
    rows.sort(key=_row_order)
    written = any(SOURCES[name].markets for name in fetched)
    if written:
        table = OfferTable.from_columns({c: [row[c] for row in rows] for c in COLUMN_NAMES})
        write_offers_csv(table, catalog)
        if aws_spot.SPOT in fetched:
            _write_history(spot_history_path(catalog), fetched[aws_spot.SPOT].extra["history"])
    record(status_path(catalog), outcomes, now.isoformat(timespec="seconds"), catalog)
    return RefreshResult(
        catalog,
        written,
        outcomes,
        len(rows) if written else len(previous),
        len(fresh),
        len(kept),
        base,
        notes,
    )


# --- steps -------------------------------------------------------------------------------


def _previous(catalog: Path) -> tuple[OfferTable, str, list[str]]:
    """The rows a refresh starts from: the target catalog, else the bundled snapshot."""
    if catalog.exists():
        try:
            return read_offer_table(catalog), str(catalog), []
        except (SchemaError, OSError, ValueError) as exc:
            note = f"{catalog} could not be read ({exc}); starting from the bundled snapshot"
            return read_offer_table(BUNDLED_CATALOG), "bundled snapshot", [note]
    return read_offer_table(BUNDLED_CATALOG), "bundled snapshot", []


def _regions_by_cloud(table: OfferTable) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {}
    for cloud, region in zip(table.text("cloud"), table.text("region"), strict=True):
        found.setdefault(str(cloud), set()).add(str(region))
    return {cloud: sorted(names) for cloud, names in found.items()}


def _run_all(jobs: list[Callable[[], None]]) -> None:
    """Run `jobs` in parallel daemon threads: Ctrl-C stops the refresh at once instead of
    waiting for a slow endpoint (nothing has been written yet)."""
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(job,), daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _run(
    info: SourceInfo, call: Callable[[Context], Fetched], ctx: Context, reporter: Reporter
) -> tuple[Outcome, Fetched | None]:
    """One source, timed, its failure turned into an Outcome (never an exception)."""
    reporter.start(info.name)
    started = time.monotonic()
    outcome = Outcome(info.name, info.cloud, "ok", endpoint=_safe_endpoint(info))
    got: Fetched | None = None
    try:
        got = call(ctx)
        outcome.rows = len(got.offers) or len(got.extra.get("rates", ()))
        outcome.notes = list(got.notes)
    except MissingCredentials as exc:
        outcome.state, outcome.reason = "skipped", str(exc)
    except SourceError as exc:
        outcome.state, outcome.reason = "failed", str(exc)
    except Exception as exc:  # a bug or an SDK surprise: reported, the other sources go on
        outcome.state, outcome.reason = "failed", f"unexpected {type(exc).__name__}: {exc}"
    outcome.seconds = round(time.monotonic() - started, 3)
    # An error page, an SDK's message or a note may quote the request: keys, tokens.
    outcome.reason, outcome.endpoint = redact(outcome.reason), redact(outcome.endpoint)
    outcome.notes = [redact(note) for note in outcome.notes]
    reporter.finish(outcome)
    return outcome, got


def _safe_endpoint(info: SourceInfo) -> str:
    try:
        return info.endpoint()
    except Exception:  # noqa: BLE001 (a description only)
        return ""


def _spot_types(
    on_demand: Fetched | None, previous: OfferTable, shapes: Mapping[str, Shape]
) -> dict[str, dict[str, Shape]]:
    """region -> GPU type -> shape whose spot history is read: what the Price List just
    priced, else the AWS GPU types the previous catalog lists."""
    types: dict[str, dict[str, Shape]] = {}
    if on_demand is not None:
        for offer in on_demand.offers:
            types.setdefault(offer.region, {})[offer.instance_type] = offer.shape
        return types
    columns = zip(
        previous.text("cloud"), previous.text("region"), previous.text("instance_type"), strict=True
    )
    for cloud, region, name in columns:
        shape = shapes.get(str(name))
        if cloud == "aws" and shape is not None and shape.accelerator:
            types.setdefault(str(region), {})[str(name)] = shape
    return types


def _kept(
    rows: list[dict[str, Any]], fetched: Mapping[str, Fetched], regions: Sequence[str]
) -> list[dict[str, Any]]:
    """The previous rows, less the prices a successful source replaced (see step 3)."""
    import fnmatch

    covered: dict[tuple[str, str], list[tuple[frozenset[str] | None, set[str]]]] = {}
    for name, got in fetched.items():
        info = SOURCES[name]
        types = {offer.instance_type for offer in got.offers}
        for market in info.markets:
            covered.setdefault((info.cloud, market), []).append((got.regions, types))

    def replaced(row: dict[str, Any], market: str) -> bool:
        if regions and not any(fnmatch.fnmatchcase(row["region"], p) for p in regions):
            return False
        for read, types in covered.get((row["cloud"], market), ()):
            if row["instance_type"] in types and (read is None or row["region"] in read):
                return True
        return False

    kept = []
    for row in rows:
        row = dict(row)
        for market, column in PRICE_COLUMN.items():
            if not _missing(row[column]) and replaced(row, market):
                row[column] = math.nan
        if _missing(row["price_on_demand"]) and _missing(row["price_spot"]):
            continue
        kept.append(row)
    return kept


def _fill_rates(
    rows: list[dict[str, Any]],
    advisor: Mapping[interruption.Key, interruption.Rate],
    history: Mapping[interruption.Key, interruption.Rate],
) -> None:
    """Each spot row's interruption rate from the best source (module `interruption`)."""
    for row in rows:
        source = interruption.without_rate_tag(str(row["source"]))
        rate = None
        if not _missing(row["price_spot"]):
            key = (row["cloud"], row["region"], row["instance_type"])
            rate = interruption.choose(key, advisor, history)
        row["spot_interruption_rate"] = rate.per_hour if rate else math.nan
        row["source"] = f"{source}{interruption.RATE_TAG}{rate.source}" if rate else source


def _write_history(path: Path, series: list[aws_spot.SpotSeries]) -> None:
    import csv

    rows = [s.row() for s in series]
    header = list(rows[0]) if rows else ["cloud", "region", "zone", "instance_type", "latest"]

    def write(handle: Any) -> None:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    atomic_write(path, write)


def _row_order(row: dict[str, Any]) -> tuple:
    return (
        row["cloud"],
        row["region"],
        row["zone"],
        row["instance_type"],
        row["accelerator"],
        row["accelerator_count"],
        row["source"],
    )


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
