"""`broker run`: the controller loop, its live view and its closing lines (`broker demo`,
which drives the same loop over the examples, is broker.cli.demo)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.database_waits import wait_for_database, waited_out
from broker.cli.exits import BAD_INPUT, FAILED, OVER_BUDGET, PROVIDER, fail
from broker.cli.formats import hours
from broker.cli.options import CatalogOption, OverlaysOption, PoolsOption
from broker.cli.render import Column, Output, render, state_colour, usd
from broker.cli.session import PolicyOption, StateOption, runtime, state_path

if TYPE_CHECKING:
    pass


def run(
    once: bool = typer.Option(False, "--once", help="One reconcile pass, then exit (CI, cron)."),
    poll: float = typer.Option(0.5, "--poll", help="Seconds between passes."),
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    policy: Path = PolicyOption,
    reclaim_rate: float = typer.Option(
        0.0,
        "--sandbox-reclaim-rate",
        help="Sandbox only: reclaim spot instances at random, this many times per billed "
        "hour on average (try spot survival without a cloud).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the sandbox's random reclaims."),
    metrics_port: int = typer.Option(
        None,
        "--metrics-port",
        envvar="BROKER_METRICS_PORT",
        help="Serve Prometheus metrics on this port while running (docs/metrics.md) "
        "[env: BROKER_METRICS_PORT].",
        show_default=False,
        show_envvar=False,
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address of the metrics endpoint (0.0.0.0: all)."
    ),
    time_scale: float = typer.Option(
        1.0,
        "--sandbox-time-scale",
        help="Sandbox only: billed seconds per wall second (1: as time passes; 3600 bills "
        "a wall second as an hour, as the demo does). Recorded on each attempt.",
    ),
    lease_seconds: float = typer.Option(
        60.0,
        "--lease-seconds",
        help="How long a claim on a job's next step lasts without a heartbeat; another "
        "controller on the same state takes it over after that (one pass renews it).",
    ),
    controller_id: str = typer.Option(
        "",
        "--controller-id",
        help="This controller's name in leases and events [default: host:pid:random].",
        show_default=False,
    ),
) -> None:
    """The controller: plan queued jobs, launch, watch and finish them, until the queue
    is drained (Ctrl-C stops it cleanly, exit 130; running jobs keep running). Several
    may run on one state: each job's next step is claimed by a lease (docs/state.md)."""
    from broker.cli.inputs import number_flag
    from broker.cli.session import lease_holder
    from broker.reclaims import RandomReclaims
    from pricing.userio.bounds import MAX_RATE_PER_HOUR

    number_flag(lease_seconds, "--lease-seconds", 1, 365 * 86400)
    number_flag(poll, "--poll", 0, 86400)
    number_flag(reclaim_rate, "--sandbox-reclaim-rate", 0, MAX_RATE_PER_HOUR)
    number_flag(time_scale, "--sandbox-time-scale", 0, 1_000_000)
    holder = lease_holder(controller_id, lease_seconds, poll)
    if not time_scale > 0:
        fail("--sandbox-time-scale must be more than 0", BAD_INPUT)
    if time_scale != 1:
        print(sandbox_time(time_scale), file=sys.stderr)
    if metrics_port is not None:
        from broker.metrics.server import PortError, check_port

        try:
            check_port(metrics_port)
        except PortError as exc:
            fail(str(exc), BAD_INPUT)
    hook = RandomReclaims(reclaim_rate, seed) if reclaim_rate else None
    wait_for_database(state_path(state), once)  # down at the start: waited for, as mid-run
    with runtime(state, catalog, pools, overlays, policy, time_scale, holder=holder) as rt:
        served = None if metrics_port is None else _serve_metrics(rt, metrics_port, metrics_host)
        try:
            started = rt.controller.clock.now()
            on_pass = served.controller.observe_pass if served and served.controller else None
            drive(rt, once=once, poll=poll, after_pass=hook, on_pass=on_pass)
            from broker.cli.run_summary import run_summary

            still = len(rt.store.queued()) + len(rt.controller.active())
            print(run_summary(rt.store, started, still), file=sys.stderr)
        finally:
            if served is not None:
                served.close()


def _serve_metrics(rt, port: int, host: str):
    """The metrics endpoint beside the controller (broker.metrics.server): the state's
    metrics read-only on each scrape, and this controller's pass durations."""
    from broker.metrics.server import PortError, read_only_state, serve_metrics

    pools = {pool: gpus for (_cloud, pool), gpus in rt.controller.pool_gpus.items()}
    try:
        served = serve_metrics(port, host, read_only_state(rt.store.path), pools, controller=True)
    except PortError as exc:
        fail(str(exc), BAD_INPUT)
    print(f"broker: serving metrics on {served.url}", file=sys.stderr)
    return served


def sandbox_time(scale: float) -> str:
    """The header line of a run whose sandbox clock is not the wall clock."""
    billed = f"{scale / 3600:g} hour(s)" if scale >= 3600 else f"{scale:g} seconds"
    return f"sandbox time: one wall second is billed as {billed} (--sandbox-time-scale {scale:g})"


def drive(
    rt,
    once: bool = False,
    poll: float = 0.5,
    limit_s: float | None = None,
    after_pass: Callable[[Any], None] | None = None,
    on_pass: Callable[[float], None] | None = None,
) -> None:
    """Run passes until nothing is queued or in flight: a live table of the queue on a
    terminal, one plain line per launch and end otherwise (logs, CI). `after_pass(rt)`
    runs after every pass (the demo injects its spot reclaim there); `on_pass(seconds)`
    is told how long each pass took (the metrics' pass duration)."""
    live = _live_view() if sys.stderr.isatty() and not once else None
    try:
        if live is not None:
            with live:
                _loop(rt, once, poll, limit_s, live, after_pass, on_pass)
        else:
            _loop(rt, once, poll, limit_s, None, after_pass, on_pass)
    except KeyboardInterrupt as exc:  # exit 130, saying what it leaves behind
        raise KeyboardInterrupt(
            "stopped; running jobs keep running, `broker run` picks them up again"
        ) from exc


def _live_view():
    from rich.console import Console
    from rich.live import Live

    return Live(console=Console(stderr=True), refresh_per_second=4, transient=False)


LIVE_COLUMNS = (
    Column("name", "job", keep=3),
    Column("team", "team", keep=2),
    Column("state", "state", keep=3, colour=state_colour),
    Column("where", "on", keep=2),
    Column("market", "market"),
    Column("hours", "billed h", hours),
    Column("cost", "cost $", usd, keep=3),
)


def _jobs_table(rows: list[dict]):
    """The live view's table, drawn by the one renderer (fitted to the terminal)."""
    import io
    import shutil

    from rich.text import Text

    from broker.cli.render import table_width

    buffer = io.StringIO()
    width = table_width(sys.stderr, False) or shutil.get_terminal_size().columns
    render(rows, LIVE_COLUMNS, Output.table, title="broker run", stream=buffer, width=width)
    return Text(buffer.getvalue())


def _loop(
    rt, once: bool, poll: float, limit_s: float | None, live, after_pass, on_pass=None
) -> None:
    started = time.monotonic()
    told: set[tuple[str, str]] = set()  # waits already printed
    while True:
        began = time.perf_counter()
        report = waited_out(rt.controller.run_pass, once)
        if on_pass is not None:
            on_pass(time.perf_counter() - began)
        if report.blocked:  # e.g. credentials: no later pass can do better
            fail(report.blocked[0], PROVIDER)
        if after_pass is not None:
            after_pass(rt)
        if live is not None:
            live.update(_jobs_table(_summary(rt.store)))
        else:
            for name, where in report.launched:
                print(f"launched {name} on {where}", file=sys.stderr)
            for name, outcome in report.finished:
                print(f"{name} {outcome}", file=sys.stderr)
        if once:
            return
        queued, active = waited_out(lambda: (rt.store.queued(), rt.controller.active()), once)
        if not active and not queued:
            return
        pause = poll  # the controller polls its providers between passes
        if not active and not report.launched:
            for name, why in report.waiting.items():
                if (name, why) not in told:
                    told.add((name, why))
                    print(f"{name} waits: {why}", file=sys.stderr)
            if report.wake_at is None:  # nothing will change by itself: name what waits
                waiting = "; ".join(f"{name}: {why}" for name, why in report.waiting.items())
                budget = all(why == "budget" for why in report.waiting_for.values())
                code = OVER_BUDGET if report.waiting and budget else FAILED
                fail(f"the queue is stuck: nothing runs and nothing can start ({waiting})", code)
            # A cool-down is a wait, not a failure: sleep until the first one ends.
            pause = max(poll, (report.wake_at - rt.controller.clock.now()).total_seconds())
        if limit_s is not None:
            left = limit_s - (time.monotonic() - started)
            if left < 0:
                fail(f"gave up after {limit_s:g} s with work still in flight", FAILED)
            pause = min(pause, left + poll)
        time.sleep(pause)


def _summary(store, offers=None) -> list[dict]:
    """One row per job; with the offers in force, lost work, egress and the on-demand
    baseline come from the cost report's figures (one way to count them)."""
    figures = {}
    if offers is not None:
        from broker.reports.report import build_report
        from broker.reports.savings import OnDemandPrices

        report = build_report(store, ["job"], prices=OnDemandPrices.from_offers(offers))
        figures = {group.keys[0]: group.figures for group in report.groups}
    rows = []
    for job in store.jobs():
        attempts = store.attempts(job.id)
        last = attempts[-1] if attempts else None
        cost = sum(float(e.amount_usd) for e in store.ledger(job_id=job.id))
        billed = sum(float(a.billed_hours or 0) for a in attempts)
        seen = figures.get(f"{job.team}/{job.name}")
        where = last.placed_on.where if last else ""
        rows.append(
            {
                "name": job.name,
                "team": job.team,
                "state": str(job.state),
                "where": where,
                "market": last.market if last else "",
                "hours": billed,
                "cost": cost,
                "attempts": len(attempts),
                "lost_hours": float(seen.lost_gpu_hours) / _gpus(last) if seen else None,
                "egress": float(seen.egress) if seen else None,
                "on_demand": _on_demand(seen),
            }
        )
    return rows


def _gpus(attempt) -> float:
    """GPUs of an attempt's placement (lost GPU-hours to lost hours); 1 for CPU jobs."""
    if attempt is None or not attempt.placed_on.accelerator_count:
        return 1.0
    return attempt.placed_on.gpus


def _on_demand(figures) -> float | None:
    """What the job's GPU hours would have cost on demand (None: no such GPUs on sale)."""
    if figures is None or figures.unpriced:
        return None
    return float(figures.baseline)
