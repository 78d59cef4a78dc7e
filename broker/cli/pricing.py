"""`broker pricing ...`: manage the offers catalog: import other formats, refresh it from
the clouds' live price sources, and show how fresh each source is.

The commands are here; how a refresh runs and reports (and the automatic refresh) is in
`broker.cli.pricing_refresh`, the rows of `broker pricing status` in `broker.cli.pricing_status`."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, FAILED, PROVIDER, fail
from broker.cli.inputs import output_path, price_day_flag
from broker.cli.options import OutputOption, WideOption, split_list
from broker.cli.render import Output, render
from broker.cli.session import StateOption

app = typer.Typer(help="Manage the offers catalog.", no_args_is_help=True)

FORMATS = ("skypilot",)

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
    if into is not None:
        sources = tuple(directory / cloud / "vms.csv" for cloud in ("aws", "gcp", "azure"))
        output_path(into, "--into", inputs=sources)
    clouds = split_list(cloud) or None
    if as_of is not None:
        as_of = price_day_flag(as_of, "--as-of").isoformat()
    from broker.cli.progress import bar

    try:
        with bar("importing SkyPilot catalogs", len(clouds or ("aws", "gcp", "azure"))) as step:
            offers = import_skypilot(
                directory, clouds=clouds, as_of=as_of, on_cloud=lambda cloud: step(1)
            )
    except (CatalogImportError, ValueError) as exc:  # ValueError: a cloud it does not know
        fail(str(exc), BAD_INPUT)
    if offers.empty:
        read = [str(directory / c / "vms.csv") for c in clouds or ("aws", "gcp", "azure")
                if (directory / c / "vms.csv").is_file()]  # fmt: skip
        if read:  # files with a header and no rows (or none a GPU offer)
            fail(f"{', '.join(read)}: no offers in {'it' if len(read) == 1 else 'them'}", BAD_INPUT)
        fail(f"no <cloud>/vms.csv for aws, gcp or azure found under {directory}", BAD_INPUT)
    target = into or user_catalog_path()
    try:
        write_offers_csv(offers, target)
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror or exc}", BAD_INPUT)
    counts = offers.groupby("cloud", observed=True).size()
    per_cloud = ", ".join(f"{cloud} {n:,}" for cloud, n in counts.items())
    print(f"wrote {len(offers):,} offers ({per_cloud}) to {target}", file=sys.stderr)
    if into is None:
        print(
            "the user catalog now takes precedence over the bundled snapshot; "
            f"remove {target} to go back",
            file=sys.stderr,
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
    state: str = StateOption,
    output: Output = OutputOption,
) -> None:
    """Rebuild the catalog from the clouds' public price sources (docs/catalog.md, Live prices).

    A source that fails keeps its previous rows (with their older as-of date) and is
    reported with its reason; the catalog is written atomically. Exit 1 when a source
    failed, 5 when a cloud named with --cloud could not be read for lack of credentials.
    """
    from broker.cli.pricing_refresh import (
        catalog_target,
        no_credentials,
        progress_reporter,
        report_refresh,
        run_refresh,
    )
    from pricing.sources.refresh import CLOUDS

    clouds = tuple(c.lower() for c in split_list(cloud)) or CLOUDS
    wrong = [c for c in clouds if c not in CLOUDS]
    if wrong:
        from pricing.userio.suggest import hint

        fail(f"unknown cloud {wrong[0]!r}{hint(wrong[0], CLOUDS)}", BAD_INPUT)
    target = catalog_target(catalog)
    reporter = progress_reporter()
    try:
        result = run_refresh(target, clouds, split_list(region), reporter, state)
    finally:
        reporter.close()
    report_refresh(result, output)
    if result.failed:
        raise typer.Exit(FAILED)
    if cloud and any(no_credentials(result, c) for c in clouds):
        raise typer.Exit(PROVIDER)


@app.command("status")
def status_command(
    catalog: Path = CatalogTarget, output: Output = OutputOption, wide: bool = WideOption
) -> None:
    """Each price source: last success, age, offers in the catalog, last failure."""
    from broker.cli.pricing_status import STATUS_COLUMNS, status_rows
    from pricing.catalog import load_catalog, status_path
    from pricing.schema import SchemaError
    from pricing.userio.settings import resolve_path, resolve_positive_int

    path = resolve_path("catalog", catalog)
    if path is not None and not path.is_file():
        fail(f"catalog file not found: {path}", BAD_INPUT)
    try:
        loaded = load_catalog(path)
    except SchemaError as exc:
        fail(str(exc), BAD_INPUT)
    freshness = resolve_positive_int("freshness_days")
    now = datetime.now(UTC)
    rows = status_rows(loaded.offers, status_path(loaded.path), now, freshness)
    label = {"bundled": "bundled snapshot", "user": "user catalog", "file": "catalog"}
    title = f"{label[loaded.origin]} {loaded.path}: {len(loaded.offers):,} offers"
    meta = {"title": title}
    render(rows, STATUS_COLUMNS, output, title=title, json_key="sources", meta=meta, wide=wide)
