"""Options shared by several commands, declared once (what they read: broker.cli.inputs)."""

from __future__ import annotations

import typer

from broker.cli.inputs import (
    InputFormat,
    catalog_banner,
    load_jobs,
    offers_in_force,
    split_list,
    time_flag,
)
from broker.cli.render import Output

__all__ = [
    "CatalogOption",
    "FormatOption",
    "InputFormat",
    "OutputOption",
    "OverlaysOption",
    "PoolsOption",
    "TeamOption",
    "WideOption",
    "catalog_banner",
    "load_jobs",
    "offers_in_force",
    "split_list",
    "time_flag",
]

CatalogOption = typer.Option(
    None,
    "--catalog",
    help="Offers catalog CSV to use instead of the user or bundled one [env: BROKER_CATALOG].",
    show_default=False,
)
PoolsOption = typer.Option(
    None,
    "--pools",
    help="On-prem pool inventory YAML [env: BROKER_POOLS; default: "
    "~/.config/broker/pools.yaml when present].",
    show_default=False,
)
OverlaysOption = typer.Option(
    None,
    "--overlays",
    help="Negotiated price overlays YAML [env: BROKER_OVERLAYS; default: "
    "~/.config/broker/overlays.yaml when present].",
    show_default=False,
)
OutputOption = typer.Option(Output.table, "--output", "-o", help="Output format.")
WideOption = typer.Option(
    False, "--wide", help="Never cut a table to fit the terminal (long cells, every column)."
)


FormatOption = typer.Option(
    InputFormat.broker,
    "--format",
    help="The files are broker manifests, or SkyPilot task YAML (converted in memory, "
    "as `broker import skypilot` converts them).",
)
TeamOption = typer.Option(
    None,
    "--team",
    help="With --format skypilot: the jobs' team (a SkyPilot task has none; default: your "
    "user name).",
    show_default=False,
)
