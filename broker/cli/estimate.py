"""`broker estimate PATH...`: what each job is expected to cost, and the total.

Nothing is written; the state in force is read only for the history of a job whose
runtime is `auto`, as `broker plan` reads it, so the two commands never disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, NO_PLACEMENT, fail
from broker.cli.formats import flag
from broker.cli.options import (
    CatalogOption,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    WideOption,
    catalog_banner,
    offers_in_force,
)
from broker.cli.plan_run import PLACEMENT_COLUMNS
from broker.cli.render import Column, Output, number, render
from broker.cli.session import StateOption

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.offers import OffersInForce

_BY_KEY = {c.key: c for c in PLACEMENT_COLUMNS}  # the headers and formats of `broker plan`


TABLE_COLUMNS = (
    Column("job", "job"),
    Column("team", "team"),
    Column("file", "file"),
    *(_BY_KEY[k] for k in ("cloud", "region", "instance_type", "market")),
    Column("runtime_hours", "runtime est. h", number),
    _BY_KEY["expected_hours"],
    *(_BY_KEY[k] for k in ("interruption_overhead", "egress", "expected_cost")),
)
DATA_COLUMNS = (
    *TABLE_COLUMNS,
    Column("feasible", "feasible", flag),
    _BY_KEY["gpus"],
    _BY_KEY["nodes"],
    _BY_KEY["price_per_hour"],
    _BY_KEY["compute"],
    Column("assumptions", "assumptions"),
)


def estimate_command(
    paths: list[Path] = typer.Argument(..., help="Manifest files or directories (recursive)."),
    output: Output = OutputOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    wide: bool = WideOption,
    state: str = StateOption,
) -> None:
    """Expected cost of each job (its cheapest compliant placement), the assumptions, the total.

    Exit 2 for a bad manifest (nothing estimated), 3 when a job has no feasible placement.
    """
    from broker.cli.plan_run import learned_runtimes
    from broker.clock import SystemClock
    from broker.estimate import estimate, total

    manifests = load_jobs(paths)
    view = offers_in_force(catalog, pools, overlays)
    specs = learned_runtimes([m.spec for m in manifests], state)
    estimates = estimate(manifests, view.index, SystemClock().now(), specs)
    rows = [e.row() for e in estimates]
    infeasible = [f"{e.spec.team}/{e.spec.name}" for e in estimates if not e.feasible]
    grand = total(estimates)
    if output == Output.json:
        meta = {"total_expected_cost": grand, "infeasible": infeasible, "prices": prices(view)}
        render(rows, DATA_COLUMNS, output, json_key="jobs", meta=meta)
    elif output == Output.csv:
        print(prices(view), file=sys.stderr)
        for row in rows:
            row["assumptions"] = "; ".join(row["assumptions"])
        render(rows, DATA_COLUMNS, output)
    else:
        notes = [
            f"{row['team']}/{row['job']}: " + "; ".join(row["assumptions"])
            for row in rows
            if row["assumptions"]
        ]
        notes += [
            f"{job}: no feasible placement (`broker plan` says what to relax)" for job in infeasible
        ]
        print(prices(view))
        title = f"{len(rows)} job(s), expected total {grand:,.2f} USD"
        rows.append({"job": "total", "expected_cost": grand})
        render(rows, TABLE_COLUMNS, output, title=title, notes=notes, wide=wide)
    if infeasible:
        fail(f"no feasible placement for: {', '.join(infeasible)}", NO_PLACEMENT)


def load_jobs(paths: list[Path]) -> list[Manifest]:
    """The manifests under `paths`; any error is printed (file:line) and exits 2."""
    from broker.manifest.load import load_manifests

    loaded = load_manifests(paths)
    if loaded.errors:
        for error in loaded.errors:
            print(error.one_line(), file=sys.stderr)
        fail(f"{len(loaded.errors)} error(s) in manifests; nothing estimated", BAD_INPUT)
    if not loaded.manifests:
        fail("no broker/v1 manifest found in " + ", ".join(map(str, paths)), BAD_INPUT)
    return loaded.manifests


def prices(view: OffersInForce) -> str:
    """The catalog banner (which catalog, how old) for today."""
    from datetime import date

    from pricing.userio.settings import resolve_positive_int

    return catalog_banner(view, date.today(), resolve_positive_int("freshness_days"))
