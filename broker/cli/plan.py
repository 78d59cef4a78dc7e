"""`broker plan FILE|DIR...`: the cheapest compliant placements of each job, explained."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, NO_PLACEMENT, fail
from broker.cli.options import (
    CatalogOption,
    FormatOption,
    InputFormat,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    TeamOption,
    catalog_banner,
    load_jobs,
    offers_in_force,
)
from broker.cli.render import Column, Output, number, render, usd

if TYPE_CHECKING:
    from broker.manifest.load import Manifest

PLACEMENT_COLUMNS = (
    Column("rank", "#", numeric=True),
    Column("cloud", "cloud"),
    Column("region", "region"),
    Column("zone", "zone"),
    Column("instance_type", "instance type"),
    Column("gpus", "GPUs"),
    Column("nodes", "nodes", numeric=True),
    Column("market", "market"),
    Column("price_per_hour", "$/h (all nodes)", usd, numeric=True),
    Column("expected_hours", "exp. hours", lambda v: f"{v:.2f}", numeric=True),
    Column("compute", "compute $", usd, numeric=True),
    Column("interruption_overhead", "of which spot overhead $", usd, numeric=True),
    Column("egress", "egress $", usd, numeric=True),
    Column("expected_cost", "expected $", usd, numeric=True),
)
REJECTED_COLUMNS = (Column("reason", "rejected because"), Column("count", "offers", number, True))


def plan_command(
    paths: list[Path] = typer.Argument(..., help="Manifest files or directories (recursive)."),
    top: int = typer.Option(5, "--top", help="Placements to show per job."),
    explain: bool = typer.Option(
        False, "--explain", help="Show every rejected group of offers and the assumptions."
    ),
    output: Output = OutputOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    input_format: InputFormat = FormatOption,
    team: str = TeamOption,
) -> None:
    """Plan jobs: the cheapest compliant placements, with their cost breakdown.

    Exit 3 when a job has no feasible placement (with what to relax and its cost).
    """
    if top < 1:
        fail("--top must be at least 1", BAD_INPUT)
    loaded = load_jobs(paths, input_format, team)
    if loaded.errors:
        for error in loaded.errors:
            print(str(error), file=sys.stderr)
        fail(f"{len(loaded.errors)} error(s) in manifests; nothing planned", BAD_INPUT)
    if not loaded.manifests:
        fail("no broker/v1 manifest found in " + ", ".join(map(str, paths)), BAD_INPUT)
    plan_manifests(loaded.manifests, top, explain, output, catalog, pools, overlays)


def plan_manifests(
    manifests: list[Manifest],
    top: int,
    explain: bool,
    output: Output,
    catalog: Path | None,
    pools: Path | None,
    overlays: Path | None,
) -> None:
    """`broker plan` of manifests already loaded (`submit --dry-run` plans what it read)."""
    from datetime import date

    from broker.clock import SystemClock
    from broker.planner.plan import plan_many
    from pricing.userio.settings import resolve_positive_int

    view = offers_in_force(catalog, pools, overlays)
    now = SystemClock().now()
    jobs = [m.spec for m in manifests]
    decisions = plan_many(jobs, view.index, now, top=top)
    decisions = [
        d if d.placements else _with_hints(d, job, view.index, now)
        for d, job in zip(decisions, jobs, strict=True)
    ]
    banner = catalog_banner(view, date.today(), resolve_positive_int("freshness_days"))
    if output == Output.json:
        documents = [d.as_dict() for d in decisions]
        body = documents[0] if len(documents) == 1 else {"jobs": documents}
        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(banner, file=sys.stderr if output == Output.csv else sys.stdout)
        for decision in decisions:
            _show(decision, output, explain)
    infeasible = [d.job for d in decisions if not d.placements]
    if infeasible:
        fail(f"no feasible placement for: {', '.join(infeasible)}", NO_PLACEMENT)


def _with_hints(decision, job, index, now):
    from dataclasses import replace

    from broker.planner.hints import relaxation_hints

    return replace(decision, hints=relaxation_hints(job, index, now))


def _rows(decision) -> list[dict]:
    rows = []
    for p in decision.placements:
        rows.append(
            {
                **p.as_dict(),
                "gpus": f"{p.accelerator}:{p.accelerator_count:g}" if p.accelerator else "CPU",
                "compute": p.cost.compute,
                "interruption_overhead": p.cost.interruption_overhead,
                "egress": p.cost.egress,
            }
        )
    return rows


def _show(decision, output: Output, explain: bool) -> None:
    title = (
        f"job {decision.job}: {len(decision.placements)} placement(s) "
        f"out of {decision.candidates} offers"
    )
    columns = PLACEMENT_COLUMNS
    if all(not p.zone for p in decision.placements):
        columns = tuple(c for c in columns if c.key != "zone")
    if decision.placements:
        render(_rows(decision), columns, output, title=title)
    else:
        print(f"job {decision.job}: no feasible placement", file=sys.stderr)
        for hint in decision.hints:
            cost = f", expected {hint.cheapest_cost:.2f} USD" if hint.cheapest_cost else ""
            print(f"  relax {hint.constraint}: {hint.suggestion}{cost}", file=sys.stderr)
        if not decision.hints:
            print("  no single relaxation helps; see --explain", file=sys.stderr)
    if explain or not decision.placements:
        rejected = [{"reason": r.reason, "count": r.count} for r in decision.rejected]
        render(rejected, REJECTED_COLUMNS, output, title=f"job {decision.job}: rejected offers")
    if explain and decision.placements:
        best = decision.placements[0]
        for note in best.cost.assumptions:
            print(f"  assumption: {note}", file=sys.stdout if output != Output.csv else sys.stderr)
