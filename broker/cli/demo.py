"""`broker demo`: the whole product, locally. The example jobs are submitted and run to
the end on the sandbox's fast clock through the controller loop of `broker run`; the
spot fine-tune is reclaimed and crosses clouds; then what happened and what it cost."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.formats import count, hours
from broker.cli.options import WideOption
from broker.cli.render import Column, Output, render, usd
from broker.cli.run import _summary, drive, sandbox_time
from broker.cli.session import runtime

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

    from broker.cli.statefile import check_state
    from broker.manifest.load import load_manifests
    from broker.reclaims import ReclaimOnce
    from broker.state.location import parse_location
    from broker.submit import prepare, submit_manifests

    given = state or str(Path(tempfile.mkdtemp(prefix="broker-demo-")) / "state.db")
    location = parse_location(given)  # printed as itself: a URL's password masked
    if isinstance(location, Path):  # its jobs' workdirs and checkpoints are file:// URIs
        location = location.absolute()
        given = str(location)
    check_state(location, "write")  # refused before anything is packed beside it
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
