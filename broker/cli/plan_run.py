"""What `broker plan FILE|DIR...` does, without typer: the cheapest compliant placements
of each job, explained. The command's flags are declared in broker.cli.plan; `broker
plan FILE [-o FORMAT]` runs this straight (broker.cli.direct), without loading typer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from broker.cli.exits import BAD_INPUT, NO_PLACEMENT, fail
from broker.cli.formats import count, hours
from broker.cli.inputs import InputFormat, catalog_banner, load_jobs, offers_in_force
from broker.cli.render import Column, Output, render, usd, write_json

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.spec import JobSpec

# `keep`: what a narrow terminal keeps longest (0: left out first); --wide shows all.
PLACEMENT_COLUMNS = (
    Column("rank", "#", count, keep=3),
    Column("cloud", "cloud", keep=3),
    Column("region", "region", keep=2),
    Column("zone", "zone", keep=0),
    Column("instance_type", "instance type", keep=2),
    Column("gpus", "GPUs", keep=2),
    Column("nodes", "nodes", count, keep=0),
    Column("market", "market", keep=3),
    Column("price_per_hour", "$/h (all nodes)", usd, keep=2),
    Column("expected_hours", "exp. hours", hours),
    Column("compute", "compute $", usd, keep=0),
    Column("interruption_overhead", "of which spot overhead $", usd, keep=0),
    Column("egress", "egress $", usd, keep=0),
    Column("expected_cost", "expected $", usd, keep=3),
)
REJECTED_COLUMNS = (Column("reason", "rejected because"), Column("count", "offers", count))


def plan_paths(
    paths: list[Path],
    top: int | None = None,
    explain: bool = False,
    output: Output = Output.table,
    catalog: Path | None = None,
    pools: Path | None = None,
    overlays: Path | None = None,
    input_format: InputFormat = InputFormat.broker,
    team: str | None = None,
    wide: bool = False,
    state: str | None = None,
) -> None:
    """`broker plan PATHS...` with its flags' values (their defaults when not given)."""
    if top is not None:
        from broker.cli.inputs import number_flag

        number_flag(top, "--top", 1, 1_000_000)
    from broker.collector import collector_paused

    with collector_paused(freeze=True):  # a folder's plan: a million objects, no cycle worth a scan
        loaded = load_jobs(paths, input_format, team)
        if loaded.errors:
            for error in loaded.errors:
                print(str(error), file=sys.stderr)
            fail(f"{len(loaded.errors)} error(s) in manifests; nothing planned", BAD_INPUT)
        if not loaded.manifests:
            fail("no broker/v1 manifest found in " + ", ".join(map(str, paths)), BAD_INPUT)
        if top is None:
            top = 5 if len(loaded.manifests) == 1 else 1
        plan_manifests(
            loaded.manifests, top, explain, output, catalog, pools, overlays, wide, state=state
        )


def plan_manifests(
    manifests: list[Manifest],
    top: int,
    explain: bool,
    output: Output,
    catalog: Path | None,
    pools: Path | None,
    overlays: Path | None,
    wide: bool = False,
    *,
    state: str | None = None,
) -> None:
    """`broker plan` of manifests already loaded (`submit --dry-run` plans what it read);
    `state`: the `--state` flag, whose history `auto` runtimes are learned from."""
    from datetime import date

    from broker.clock import SystemClock
    from broker.planner.plan import plan_many
    from pricing.userio.settings import resolve_positive_int

    view = offers_in_force(catalog, pools, overlays)
    now = SystemClock().now()
    jobs = learned_runtimes([m.spec for m in manifests], state)
    index = view.index
    if view.pools_path is not None and any(job.requirements.nodes > 1 for job in jobs):
        from broker.dispatch.gangs import with_pool_gang_limits
        from onprem.inventory import load_pools

        nodes = [job.requirements.nodes for job in jobs]
        index = with_pool_gang_limits(index, load_pools(view.pools_path), nodes)
    decisions = plan_many(jobs, index, now, top=top)
    decisions = [
        d if d.placements else _with_hints(d, job, index, now)
        for d, job in zip(decisions, jobs, strict=True)
    ]
    banner = catalog_banner(view, date.today(), resolve_positive_int("freshness_days"))
    if output == Output.json:
        documents = _documents(decisions)
        write_json(documents[0] if len(documents) == 1 else {"jobs": documents})
    elif output == Output.csv:
        print(banner, file=sys.stderr)
        _csv(decisions, jobs, explain)
    elif len(decisions) == 1:
        print(banner)
        _show(decisions[0], output, explain, wide)
    else:
        print(banner)
        _show_many(decisions, jobs, top, output, explain, wide)
    infeasible = [d.job for d in decisions if not d.placements]
    if infeasible:
        fail(f"no feasible placement for: {', '.join(infeasible)}", NO_PLACEMENT)


def _documents(decisions) -> list[dict]:
    """Each decision's JSON document (`Decision.as_dict`); the jobs of one shared plan
    (broker.planner.sharing) share its placements' lists, which write_json then writes
    once: 10,000 jobs from one template are a few distinct plans."""
    first: dict[tuple[int, int, int], dict] = {}  # ids of a plan's parts -> its document
    documents = []
    for decision in decisions:
        key = (id(decision.placements), id(decision.rejected), id(decision.hints))
        known = first.get(key)
        if known is None:
            document = first[key] = decision.as_dict()
        else:
            document = dict(known)
            document["job"] = decision.job
        documents.append(document)
    return documents


def _with_hints(decision, job, index, now):
    from dataclasses import replace

    from broker.planner.hints import relaxation_hints

    return replace(decision, hints=relaxation_hints(job, index, now))


def _rows(decision) -> list[dict]:
    """One row per placement: the columns of the table and of the CSV, read straight
    from the placement (no deep copy: `broker plan` of 10,000 jobs makes 50,000)."""
    return [
        {
            "rank": p.rank,
            "cloud": p.cloud,
            "region": p.region,
            "zone": p.zone,
            "instance_type": p.instance_type,
            "gpus": f"{p.accelerator}:{p.accelerator_count:g}" if p.accelerator else "CPU",
            "nodes": p.nodes,
            "market": p.market,
            "price_per_hour": p.price_per_hour,
            "expected_hours": p.expected_hours,
            "compute": p.cost.compute,
            "interruption_overhead": p.cost.interruption_overhead,
            "egress": p.cost.egress,
            "expected_cost": p.expected_cost,
        }
        for p in decision.placements
    ]


JOB_COLUMNS = (Column("job", "job", keep=3), Column("team", "team", keep=0))


def _job_rows(decisions, jobs) -> list[dict]:
    """Every job's placements, each row with its job and team (the rows of a shared
    plan's placements made once: broker.planner.sharing)."""
    placed: dict[int, list[dict]] = {}  # id of a decision's placements -> their rows
    rows = []
    for d, job in zip(decisions, jobs, strict=True):
        own = placed.get(id(d.placements))
        if own is None:
            own = placed[id(d.placements)] = _rows(d)
        rows.extend({"job": d.job, "team": job.team, **row} for row in own)
    return rows


def learned_runtimes(jobs: list[JobSpec], state: str | None) -> list[JobSpec]:
    """`jobs`, each `auto` runtime learned from the history in the state in force
    (broker.learned_runtime); the state is read only for such jobs, and a missing file
    is no history (nothing is created, nothing said)."""
    if not any(job.runtime.auto for job in jobs):
        return jobs
    from dataclasses import replace

    from broker.cli.statefile import reading_store
    from broker.learned_runtime import History, history_estimate

    with reading_store(state, note_missing=False) as store:
        if store is None:
            return jobs
        history = History(store)
        return [
            replace(job, runtime=history_estimate(history, job, None)) if job.runtime.auto else job
            for job in jobs
        ]


def _csv(decisions, jobs, explain: bool) -> None:
    """One CSV table for every job: `job` and `team` columns, then each placement's."""
    for decision in decisions:
        if not decision.placements:
            _no_placement(decision)
    rows = _job_rows(decisions, jobs)
    render(rows, (*JOB_COLUMNS, *PLACEMENT_COLUMNS), Output.csv, empty="")
    if explain:
        print("--explain: the rejected offers are in -o table or -o json", file=sys.stderr)


def _show_many(decisions, jobs, top: int, output: Output, explain: bool, wide: bool) -> None:
    """Several jobs: one table, a row per placement with its job (the best one per job
    by default); then what to relax for each job without a placement."""
    rows = _job_rows(decisions, jobs)
    columns = PLACEMENT_COLUMNS
    if all(not row["zone"] for row in rows):
        columns = tuple(c for c in columns if c.key != "zone")
    feasible = sum(1 for d in decisions if d.placements)
    which = "the cheapest placement of each" if top == 1 else f"up to {top} placements each"
    title = f"{len(decisions)} jobs, {feasible} with a placement: {which}"
    notes = ["--top N shows more placements per job"] if top == 1 else []
    render(rows, (*JOB_COLUMNS, *columns), output, title=title, notes=notes, wide=wide)
    for decision in decisions:
        if not decision.placements or explain:
            if not decision.placements:
                _no_placement(decision)
            rejected = [{"reason": r.reason, "count": r.count} for r in decision.rejected]
            title = f"job {decision.job}: rejected offers"
            render(rejected, REJECTED_COLUMNS, output, title=title, empty="no offer was rejected")


def _no_placement(decision) -> None:
    print(f"job {decision.job}: no feasible placement", file=sys.stderr)
    for hint in decision.hints:
        cost = f", expected {hint.cheapest_cost:.2f} USD" if hint.cheapest_cost else ""
        print(f"  relax {hint.constraint}: {hint.suggestion}{cost}", file=sys.stderr)
    if not decision.hints:
        print("  no single relaxation helps; see --explain", file=sys.stderr)


def _show(decision, output: Output, explain: bool, wide: bool) -> None:
    title = (
        f"job {decision.job}: {len(decision.placements)} placement(s) "
        f"out of {decision.candidates} offers"
    )
    columns = PLACEMENT_COLUMNS
    if all(not p.zone for p in decision.placements):
        columns = tuple(c for c in columns if c.key != "zone")
    if decision.placements:
        render(_rows(decision), columns, output, title=title, wide=wide)
    else:
        _no_placement(decision)
    if explain or not decision.placements:
        rejected = [{"reason": r.reason, "count": r.count} for r in decision.rejected]
        title = f"job {decision.job}: rejected offers"
        render(rejected, REJECTED_COLUMNS, output, title=title, empty="no offer was rejected")
    if explain and decision.placements:
        for note in decision.placements[0].cost.assumptions:
            print(f"  assumption: {note}")
