"""`broker simulate`: replay a job list and spot traces through the real controller under
several policies, and compare cost, deadlines and completion times (docs/simulate.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, FAILED, fail
from broker.cli.formats import count, hours, percent
from broker.cli.options import WideOption
from broker.cli.render import Column, Output, render, usd

COLUMNS = (
    Column("policy", "policy", keep=3),
    Column("total_cost", "cost USD", usd, keep=3),
    Column("cost_vs_on_demand", "vs on-demand", percent, keep=2),
    Column("finished", "finished", count),
    Column("deadline_misses", "deadline misses", count, keep=2),
    Column("mean_completion_hours", "mean completion h", hours),
    Column("p95_completion_hours", "p95 completion h", hours, keep=0),
    Column("mean_queue_wait_hours", "mean wait h", hours, keep=0),
    Column("preemptions", "preemptions", count, keep=0),
    Column("lost_gpu_hours", "lost GPU-h", hours, keep=0),
    Column("egress_cost", "egress USD", usd, keep=0),
    Column("onprem_utilisation", "on-prem util.", percent, keep=0),
)


def simulate(
    jobs: str = typer.Option(
        ...,
        "--jobs",
        help='Job list (Philly, Gavel, Alibaba PAI pod list, sim CSV) or "synthetic[:N]".',
    ),
    spot: list[str] = typer.Option(
        ..., "--spot", help='Spot availability JSON files or folders, or "synthetic" (repeatable).'
    ),
    policy: str = typer.Option(
        "broker,spot-failover,uniform-progress,on-demand",
        "--policy",
        help="Comma-separated policies: broker, spot-failover, uniform-progress, on-demand, "
        "burst-always; parameters as name:key=value;key=value.",
    ),
    pools: Path = typer.Option(None, "--pools", help="On-prem pool inventory YAML."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic inputs."),
    restart_hours: float = typer.Option(
        0.1, "--restart-hours", help="Hours every (re)start costs."
    ),
    engine: str = typer.Option(
        "full",
        "--engine",
        help="full: the real controller, one pass per event (about a job per second); "
        "scale: the fleet-scale loop for cluster traces (thousands of jobs per second).",
    ),
    output: Output = typer.Option(Output.table, "--output", "-o", help="Output format."),
    plot: Path = typer.Option(
        None, "--plot", help="Draw cumulative cost per policy to this file (.png, .svg or .pdf)."
    ),
    wide: bool = WideOption,
) -> None:
    """Compare policies on a trace-driven simulation (virtual time, the real controller)."""
    from broker.cli.inputs import number_flag, output_path
    from broker.sim import policies as named
    from broker.sim.run import build_scenario, run_policies
    from pricing.userio.bounds import MAX_HOURS

    number_flag(restart_hours, "--restart-hours", 0, MAX_HOURS)
    if plot is not None:
        output_path(plot, "--plot", PLOT_SUFFIXES)
    if engine not in ("full", "scale"):
        fail(f"--engine must be full or scale, got {engine!r}", BAD_INPUT)
    try:
        chosen = named.parse(policy)
        scenario = build_scenario(jobs, spot, seed=seed, pools=pools, restart_hours=restart_hours)
    except (ValueError, OSError, KeyError) as exc:
        fail(str(exc), BAD_INPUT)
    if not scenario.jobs:  # a header and no rows (or no row the trace's reader keeps)
        fail(f"--jobs {jobs}: no jobs in the trace: nothing to simulate", BAD_INPUT)
    if plot is not None:
        _require_matplotlib()
    results = _run_with_progress(scenario, chosen, run_policies, engine)
    rows = [r.as_dict(series=False) for r in results]
    meta = {"scenario": scenario.name, "jobs": len(scenario.jobs), "seed": seed, "engine": engine}
    render(
        rows,
        COLUMNS,
        output,
        title=f"simulation: {len(scenario.jobs)} jobs",
        json_key="policies",
        meta=meta,
        wide=wide,
    )
    if plot is not None:
        _plot(results, plot)
        print(f"cumulative cost plot written to {plot}", file=sys.stderr)


def _run_with_progress(scenario, chosen, run_policies, engine: str):
    if not sys.stderr.isatty():
        return run_policies(scenario, chosen, engine=engine)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        tasks = {p.name: bar.add_task(p.name, total=1.0) for p in chosen}

        def tell(name: str, share: float) -> None:
            bar.update(tasks[name], completed=share)

        return run_policies(scenario, chosen, tell, engine=engine)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("--plot needs matplotlib: pip install 'broker[plot]'", BAD_INPUT)


PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # matplotlib's format is the file's suffix


def _plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for result in results:
        xs = [0.0] + [x for x, _ in result.cumulative_cost]
        ys = [0.0] + [y for _, y in result.cumulative_cost]
        axes.step(xs, ys, where="post", label=result.policy)
    axes.set_xlabel("simulated hours")
    axes.set_ylabel("cumulative cost (USD)")
    axes.legend()
    figure.tight_layout()
    from pricing.userio.atomic import atomic_write

    try:  # the format is the checked suffix's; its folder is made, all or nothing
        atomic_write(
            path,
            lambda handle: figure.savefig(handle, format=path.suffix[1:].lower(), dpi=120),
            binary=True,
        )
    except OSError as exc:
        fail(f"--plot: cannot write {path}: {exc.strerror or exc}", FAILED)
    finally:
        plt.close(figure)
