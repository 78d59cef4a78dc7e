"""`broker run` (the controller loop) and `broker demo` (the whole product, locally)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.database_waits import wait_for_database, waited_out
from broker.cli.exits import BAD_INPUT, FAILED, OVER_BUDGET, PROVIDER, fail
from broker.cli.formats import count, hours
from broker.cli.options import CatalogOption, OverlaysOption, PoolsOption, WideOption
from broker.cli.render import Column, Output, render, state_colour, usd
from broker.cli.session import PolicyOption, StateOption, runtime, state_path

if TYPE_CHECKING:
    from broker.state.location import StateLocation

PACKAGED_EXAMPLES = "_examples"  # examples/ as the wheel carries it (pyproject's force-include)


def examples_dir() -> Path:
    """The examples the demo runs: the package data of an installed wheel, else (a
    source checkout, an editable install) the repository's examples/ folder."""
    from importlib.resources import files

    packaged = files("broker") / PACKAGED_EXAMPLES
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "examples"


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
    from broker.cli.session import lease_holder
    from broker.reclaims import RandomReclaims

    holder = lease_holder(controller_id, lease_seconds, poll)
    if reclaim_rate < 0:
        fail("--sandbox-reclaim-rate must be 0 or more", BAD_INPUT)
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


def demo(
    state: str = typer.Option(
        None,
        "--state",
        help="An empty state file or postgresql:// URL [default: a fresh temporary file]",
        show_default=False,
    ),
    output: Output = typer.Option(Output.table, "--output", "-o"),
    wide: bool = WideOption,
) -> None:
    """Submit the example jobs and run them to the end on the local sandbox, on its fast
    clock (one wall second is billed as one hour): the spot fine-tune is reclaimed mid-run
    and a spot capacity crunch on its cloud sends it, checkpoint and all, to another
    cloud. Then show what happened and what it cost."""
    import tempfile

    from broker.manifest.load import load_manifests
    from broker.reclaims import ReclaimOnce
    from broker.state.location import parse_location
    from broker.submit import prepare, submit_manifests

    given = state or str(Path(tempfile.mkdtemp(prefix="broker-demo-")) / "state.db")
    location = parse_location(given)  # printed as itself: a URL's password masked
    examples = examples_dir()
    loaded = load_manifests([examples / "demo"])
    if loaded.errors:
        fail("; ".join(map(str, loaded.errors)))
    ready, refused = prepare(loaded.manifests, location, ())
    if refused:
        fail("; ".join(refused))
    # The demo's pools all use the local executor: no Slurm, no SSH node needed.
    pools = examples / "demo" / "pools.yaml"
    with runtime(
        given,
        None,
        pools,
        None,
        examples / "policy.yaml",
        DEMO_TIME_SCALE,
        sandbox_only=True,  # the demo never launches on a real cloud, whatever is enabled
    ) as rt:
        if rt.store.job_counts():  # its jobs would be "unchanged": nothing would run
            fail(f"the demo needs an empty state; {location} already holds jobs", BAD_INPUT)
        submit_manifests(rt.store, ready)
        print(f"demo: {len(loaded.manifests)} jobs submitted to {location}", file=sys.stderr)
        print(f"demo: {sandbox_time(DEMO_TIME_SCALE)}", file=sys.stderr)
        drive(rt, poll=0.2, limit_s=90, after_pass=ReclaimOnce(DEMO_RECLAIMED, crunch=True))
        rows = _summary(rt.store, rt.controller.index_of(rt.provider).offers)
    columns = (
        Column("name", "job"),
        Column("team", "team"),
        Column("state", "state"),
        Column("where", "ran on"),
        Column("market", "market"),
        Column("attempts", "attempts", count),
        Column("hours", "billed h", hours),
        Column("lost_hours", "lost h", hours),
        Column("egress", "egress $", usd, True),
        Column("cost", "cost $", usd, True),
        Column("on_demand", "on-demand $", usd, True),
    )
    total = sum(row["cost"] for row in rows)
    baseline = sum(row["on_demand"] or 0 for row in rows)
    render(
        rows,
        columns,
        output,
        title=f"demo: queue history and cost; {sandbox_time(DEMO_TIME_SCALE)}",
        json_key="jobs",
        wide=wide,
        notes=[
            f"total {total:.2f} USD at catalog prices; the same GPU hours on demand in each "
            f"job's cheapest region: {baseline:.2f} USD",
            _recovery_note(rt_store_path=location),
            f"state kept in {location}",
        ],
    )


DEMO_RECLAIMED = "llama-ft"
DEMO_TIME_SCALE = 3600.0  # the demo's fast clock: its jobs run seconds and bill hours


def _recovery_note(rt_store_path: StateLocation) -> str:
    """What happened to the reclaimed job, from its recorded events and ledger: where it
    was reclaimed, where it resumed, and what moving its checkpoint was charged."""
    from broker.clock import SystemClock
    from broker.state import StateStore

    store = StateStore.open(rt_store_path, SystemClock())
    try:
        jobs = [j for j in store.jobs() if j.name == DEMO_RECLAIMED]
        events = store.events(jobs[0].id) if jobs else []
        ledger = store.ledger(job_id=jobs[0].id) if jobs else []
    finally:
        store.close()
    finished = (e.data.get("outcome") for e in events if e.kind == "attempt_finished")
    if "interrupted" not in finished:
        return f"{DEMO_RECLAIMED} was not reclaimed this time (it ended first)"
    moved = [e.data for e in events if e.kind == "checkpoint_migrated"]
    if not moved:
        return (
            f"{DEMO_RECLAIMED} was reclaimed once mid-run (a played spot interruption) and "
            "resumed in the same region, from its own checkpoint store"
        )
    source, target = moved[0]["from"], moved[0]["to"]
    egress = sum(
        (e.amount_usd for e in ledger if e.kind == "egress" and "checkpoint migration" in e.detail),
        Decimal(0),
    )
    across = source.split("/")[0] != target.split("/")[0]
    why = (
        f"; a played spot capacity crunch on {source.split('/')[0]} left "
        f"{target.split('/')[0]} as the cheapest compliant place"
        if across
        else ""
    )
    return (
        f"{DEMO_RECLAIMED} was reclaimed on {source} mid-run (a played spot interruption){why}: "
        f"its checkpoint was copied from {source} to {target} and the job resumed there, "
        f"{egress:.2f} USD egress charged for the move"
    )


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
