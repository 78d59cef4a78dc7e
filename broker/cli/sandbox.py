"""`broker sandbox interrupt`: play a spot reclaim on a sandbox instance, by hand."""

from __future__ import annotations

from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.options import CatalogOption, OverlaysOption, PoolsOption
from broker.cli.session import StateOption, runtime

app = typer.Typer(
    help="The local sandbox's levers (try spot survival without a cloud).",
    no_args_is_help=True,
    add_completion=False,
)


@app.command("interrupt")
def interrupt(
    target: str = typer.Argument(..., help="Job (id, team/name or name) or instance id."),
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
) -> None:
    """Reclaim a running sandbox instance as a cloud would: the job gets SIGTERM (it
    checkpoints and exits), and the next `broker run` pass recovers it elsewhere."""
    from broker.cli.jobref import find_job
    from broker.state import OPEN_ATTEMPT

    with runtime(state, catalog, pools, overlays, mode="update") as rt:
        running = {  # the live instance of an attempt still open (not an earlier one)
            i.provider_id: i
            for i in rt.store.instances(state="running")
            if i.attempt_id and rt.store.attempt(i.attempt_id).state in OPEN_ATTEMPT
        }
        if target not in running:
            job = find_job(rt.store, target)
            mine = [i for i in running.values() if rt.store.attempt(i.attempt_id).job_id == job.id]
            if not mine:
                fail(f"{job.team}/{job.name} has no running instance ({job.state})", BAD_INPUT)
            target = mine[0].provider_id
        from providers.capabilities import PlayedReclaims
        from providers.errors import ProviderError

        notice = None
        if isinstance(rt.provider, PlayedReclaims):
            try:
                notice = rt.provider.interrupt(target)
            except ProviderError:
                notice = None
        if notice is None:
            fail(f"{target} cannot be interrupted here (not a running sandbox instance)", BAD_INPUT)
        print(f"reclaimed {target}: SIGTERM sent, killed at {notice.deadline:%H:%M:%S} if still up")
