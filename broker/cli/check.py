"""`broker check`: which clouds are usable from here, and if not, the one thing to fix."""

from __future__ import annotations

import typer

from broker.cli.exits import BAD_INPUT, FAILED, fail
from broker.cli.formats import Fixed, flag
from broker.cli.inputs import number_flag
from broker.cli.options import OutputOption, WideOption, split_list
from broker.cli.render import Column, Output, render

COLUMNS = (
    Column("cloud", "CLOUD", keep=3),
    Column("usable", "USABLE", flag, keep=3),
    Column("reason", "REASON", keep=2),
    Column("detail", "DETAIL"),
    Column("seconds", "SECONDS", Fixed(2), keep=0),
)


MAX_TIMEOUT_SECONDS = 3600.0  # an hour per check; more is a typo (or a hang)


def check(
    cloud: list[str] = typer.Option(
        None, "--cloud", help="Clouds to check (repeat or comma-separate); default: all."
    ),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds each check may take."),
    output: Output = OutputOption,
    wide: bool = WideOption,
) -> None:
    """Check credentials and reachability of AWS, GCP and Azure, in parallel.

    Exits 0 when at least one cloud is usable, 1 when none is.
    """
    from providers.checks import CLOUDS, check_clouds

    number_flag(timeout, "--timeout", 0.1, MAX_TIMEOUT_SECONDS)
    clouds = split_list(cloud) or CLOUDS
    unknown = [name for name in clouds if name not in CLOUDS]
    if unknown:
        fail(f"unknown cloud {unknown[0]!r}; known: {', '.join(CLOUDS)}", BAD_INPUT)
    results = check_clouds(clouds, timeout)
    rows = [vars(result) for result in results]
    usable = [r.cloud for r in results if r.usable]
    note = f"usable: {', '.join(usable)}" if usable else "no cloud is usable from here"
    render(rows, COLUMNS, output, title="Cloud access", notes=[note], json_key="clouds", wide=wide)
    if not usable:
        raise typer.Exit(FAILED)
