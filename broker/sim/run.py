"""Building a scenario from command-line inputs and running several policies over it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from broker.sim.engine import Scenario, simulate
from broker.sim.metrics import PolicyResult, relative_to_on_demand
from broker.sim.policies import SimPolicy


def build_scenario(
    jobs: str,
    spot: Sequence[str],
    *,
    seed: int = 0,
    pools: Path | None = None,
    catalog: Path | None = None,
    restart_hours: float = 0.1,
    reconcile_hours: float = 0.25,
) -> Scenario:
    """`jobs`: a job-list file or "synthetic[:N]"; `spot`: availability files/folders or
    "synthetic". Synthetic spot brings its own catalog rows; otherwise the catalog in
    force (bundled, or `catalog`) plus `pools` is sold, with spot only where traced."""
    from broker.sim.synthetic import synthetic_availability, synthetic_jobs, synthetic_offers

    if jobs.startswith("synthetic"):
        written = jobs.partition(":")[2] or "6"
        count = int(written) if written.isascii() and written.isdigit() else -1
        if not 1 <= count <= 100_000:
            raise ValueError(f"--jobs {jobs}: synthetic:N takes N from 1 to 100000 jobs")
        job_list = synthetic_jobs(seed, count)
    else:
        from broker.sim.traces.jobs import read_jobs

        job_list = list(read_jobs(Path(jobs)).jobs)
    pool_gpus: dict[tuple[str, str], float] = {}
    if list(spot) == ["synthetic"]:
        offers, trace = synthetic_offers(), synthetic_availability(seed)
        if pools is not None:
            offers, pool_gpus = _with_pools(offers, pools)
    else:
        from broker.offers import load_offers
        from broker.scheduling import pool_gpus_of
        from broker.sim.traces.spotjson import read_spot

        view = load_offers(catalog, pools)
        offers, trace = view.index.offers, read_spot([Path(s) for s in spot])
        pool_gpus = pool_gpus_of(view.index) if pools is not None else {}
    return Scenario(
        offers=offers,
        spot=trace,
        jobs=job_list,
        restart_hours=restart_hours,
        reconcile_hours=reconcile_hours,
        pool_gpus=pool_gpus,
        name=f"{jobs} x {', '.join(spot)}",
    )


def _with_pools(offers, pools: Path):
    from broker.scheduling import pool_gpus_of
    from onprem.inventory import load_pools
    from onprem.offers import pools_to_offers
    from pricing.query import OfferIndex
    from pricing.table import concat

    table = concat([offers, pools_to_offers(load_pools(pools))])
    return table, pool_gpus_of(OfferIndex(table))


def run_policies(
    scenario: Scenario,
    policies: Sequence[SimPolicy],
    progress: Callable[[str, float], None] | None = None,
    engine: str = "full",
) -> list[PolicyResult]:
    """Each policy's result; `engine` "full" (engine.simulate: the real controller) or
    "scale" (scale.simulate_at_scale: the fleet-scale loop for cluster traces)."""
    from broker.sim.scale import simulate_at_scale

    run = simulate_at_scale if engine == "scale" else simulate
    results = []
    for policy in policies:
        tell = (lambda share, name=policy.name: progress(name, share)) if progress else None
        results.append(run(scenario, policy, progress=tell))
    return relative_to_on_demand(results)
