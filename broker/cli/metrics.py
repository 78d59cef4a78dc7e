"""`broker metrics serve`: the state's Prometheus metrics, for a dashboard host with no
controller (`broker run --metrics-port` serves them beside a running controller)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.options import PoolsOption
from broker.cli.session import StateOption

app = typer.Typer(
    help="Prometheus metrics of the queue, the runs and the spend (docs/metrics.md).",
    no_args_is_help=True,
    add_completion=False,
)

PORT_HELP = "Port of the metrics endpoint (http://HOST:PORT/metrics)."
HOST_HELP = "Address to listen on (0.0.0.0: every interface)."


@app.command("serve")
def serve(
    port: int = typer.Option(9464, "--port", help=PORT_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    state: str = StateOption,
    pools: Path = PoolsOption,
) -> None:
    """Serve the metrics of the state file until stopped (Ctrl-C): counted from the
    state on every scrape, read-only, so they equal what the controller serves."""
    from broker.cli.statefile import check_state, state_path
    from broker.metrics.server import PortError, check_port, read_only_state, serve_metrics

    try:
        check_port(port)
    except PortError as exc:
        fail(str(exc), BAD_INPUT)
    path = state_path(state)
    check_state(path, "read")  # a foreign or damaged file: one line, exit 2
    opener = read_only_state(path)
    with opener():  # one read now: a state this broker cannot read stops here
        pass
    try:
        served = serve_metrics(port, host, opener, pool_gpus(pools))
    except PortError as exc:
        opener.close()
        fail(str(exc), BAD_INPUT)
    print(f"broker: serving metrics of {path} on {served.url}", file=sys.stderr)
    try:
        served.thread.join()
    finally:
        served.close()


def pool_gpus(pools: Path | None) -> dict[str, float]:
    """The on-prem pools' GPUs by pool name, as the controller counts them (from the
    pools file in force: --pools, BROKER_POOLS, the default file)."""
    from broker.cli.options import offers_in_force
    from broker.scheduling import pool_gpus_of

    view = offers_in_force(None, pools, None)
    return {pool: gpus for (_cloud, pool), gpus in pool_gpus_of(view.index).items()}
