"""`broker run` (the controller loop) and `broker demo` (the whole product, locally)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from broker.cli.exits import FAILED, fail
from broker.cli.jobs import PolicyOption, StateOption, runtime
from broker.cli.options import CatalogOption, OverlaysOption, PoolsOption
from broker.cli.render import Column, Output, render, usd

REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(
    once: bool = typer.Option(False, "--once", help="One reconcile pass, then exit (CI, cron)."),
    poll: float = typer.Option(0.5, "--poll", help="Seconds between passes."),
    state: Path = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    policy: Path = PolicyOption,
) -> None:
    """The controller: plan queued jobs, launch, watch and finish them, until the queue
    is drained (Ctrl-C stops it cleanly; running jobs keep running)."""
    with runtime(state, catalog, pools, overlays, policy) as rt:
        drive(rt, once=once, poll=poll)


def drive(rt, once: bool = False, poll: float = 0.5, limit_s: float | None = None) -> None:
    """Run passes until nothing is queued or in flight: a live table of the queue on a
    terminal, one plain line per launch and end otherwise (logs, CI)."""
    live = _live_view() if sys.stderr.isatty() and not once else None
    try:
        if live is not None:
            with live:
                _loop(rt, once, poll, limit_s, live)
        else:
            _loop(rt, once, poll, limit_s, None)
    except KeyboardInterrupt:
        print(
            "stopped; running jobs keep running, `broker run` picks them up again", file=sys.stderr
        )


def _live_view():
    from rich.console import Console
    from rich.live import Live

    return Live(console=Console(stderr=True), refresh_per_second=4, transient=False)


def _jobs_table(rows: list[dict]):
    from rich.table import Table

    table = Table(title="broker run", title_justify="left", header_style="bold")
    for header in ("job", "team", "state", "on", "market", "billed h", "cost $"):
        table.add_column(header)
    for row in rows:
        table.add_row(
            row["name"],
            row["team"],
            row["state"],
            row["where"],
            row["market"],
            row["hours"],
            f"{row['cost']:,.2f}",
        )
    return table


def _loop(rt, once: bool, poll: float, limit_s: float | None, live) -> None:
    started = time.monotonic()
    while True:
        report = rt.controller.run_pass()
        if live is not None:
            live.update(_jobs_table(_summary(rt.store)))
        else:
            for name, where in report.launched:
                print(f"launched {name} on {where}", file=sys.stderr)
            for name, outcome in report.finished:
                print(f"{name} {outcome}", file=sys.stderr)
        if once:
            return
        queued, active = rt.store.queued(), rt.controller.active()
        if not active and not queued:
            return
        if not active and not report.launched:
            for name, why in report.waiting.items():
                print(f"{name} waits: {why}", file=sys.stderr)
            fail("the queue is stuck: nothing runs and nothing can start", FAILED)
        if limit_s is not None and time.monotonic() - started > limit_s:
            fail(f"gave up after {limit_s:g} s with work still in flight", FAILED)
        time.sleep(poll)  # the controller polls its providers between passes


def demo(
    state: Path = typer.Option(
        None, "--state", help="State file [default: a fresh temporary one]", show_default=False
    ),
    output: Output = typer.Option(Output.table, "--output", "-o"),
) -> None:
    """Submit the example jobs and run them to the end on the local sandbox (one wall
    second is billed as one hour), then show what happened and what it cost."""
    import tempfile

    from broker.manifest.load import load_manifests
    from broker.submit import submit_manifests

    state = state or Path(tempfile.mkdtemp(prefix="broker-demo-")) / "state.db"
    loaded = load_manifests([REPO_EXAMPLES / "demo"])
    if loaded.errors:
        fail("; ".join(map(str, loaded.errors)))
    with runtime(
        state, None, REPO_EXAMPLES / "pools.yaml", None, REPO_EXAMPLES / "policy.yaml"
    ) as rt:
        submit_manifests(rt.store, loaded.manifests)
        print(f"demo: {len(loaded.manifests)} jobs submitted to {state}", file=sys.stderr)
        drive(rt, poll=0.2, limit_s=60)
        rows = _summary(rt.store)
    columns = (
        Column("name", "job"),
        Column("team", "team"),
        Column("state", "state"),
        Column("where", "ran on"),
        Column("market", "market"),
        Column("hours", "billed h"),
        Column("cost", "cost $", usd, True),
    )
    total = sum(row["cost"] for row in rows)
    render(
        rows,
        columns,
        output,
        title="demo: queue history and cost",
        json_key="jobs",
        notes=[f"total {total:.2f} USD at catalog prices; state kept in {state}"],
    )


def _summary(store) -> list[dict]:
    rows = []
    for job in store.jobs():
        attempts = store.attempts(job.id)
        last = attempts[-1] if attempts else None
        cost = sum(float(e.amount_usd) for e in store.ledger(job_id=job.id))
        hours = sum(float(a.billed_hours or 0) for a in attempts)
        where = (
            "/".join(str(last.placement.get(k, "")) for k in ("cloud", "region", "instance_type"))
            if last
            else ""
        )
        rows.append(
            {
                "name": job.name,
                "team": job.team,
                "state": str(job.state),
                "where": where,
                "market": last.market if last else "",
                "hours": f"{hours:.2f}",
                "cost": cost,
            }
        )
    return rows
