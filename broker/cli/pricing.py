"""`broker pricing ...`: manage the offers catalog (import other formats; refresh comes later)."""

from __future__ import annotations

from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, fail

app = typer.Typer(help="Manage the offers catalog.", no_args_is_help=True)

FORMATS = ("skypilot",)


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
    import sys

    from broker.cli.options import split_list
    from pricing.catalog import user_catalog_path, write_offers_csv
    from pricing.importers.skypilot import CatalogImportError, import_skypilot

    if format not in FORMATS:
        from pricing.suggest import hint

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
