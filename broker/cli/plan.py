"""`broker plan FILE|DIR...`: the cheapest compliant placements of each job, explained
(the command's flags; what it does: broker.cli.plan_run)."""

from __future__ import annotations

from pathlib import Path

import typer

from broker.cli.options import (
    CatalogOption,
    FormatOption,
    InputFormat,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    TeamOption,
    WideOption,
)
from broker.cli.plan_run import plan_paths
from broker.cli.render import Output
from broker.cli.session import StateOption


def plan_command(
    paths: list[Path] = typer.Argument(..., help="Manifest files or directories (recursive)."),
    top: int = typer.Option(
        None,
        "--top",
        help="Placements per job [default: 5 for one job; for several, 1: one row per job].",
        show_default=False,
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Show every rejected group of offers and the assumptions."
    ),
    output: Output = OutputOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    input_format: InputFormat = FormatOption,
    team: str = TeamOption,
    wide: bool = WideOption,
    state: str = StateOption,
) -> None:
    """Plan jobs: the cheapest compliant placements, with their cost breakdown.

    A job without a runtime estimate (or `auto`) is planned for what its finished runs
    in the state file took (docs/manifest.md). Exit 3 when a job has no feasible
    placement (with what to relax and its cost).
    """
    plan_paths(
        paths, top, explain, output, catalog, pools, overlays, input_format, team, wide, state
    )
