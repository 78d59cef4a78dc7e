"""The discrete-event loop: the real controller, one pass per event, on a FixedClock.

Events: a job's submission, a trace step that changes spot capacity or price, an
instance ending, and (while jobs wait in the queue) the reconcile interval. At each,
the clock moves there, the provider plays what happened up to now, and
`Controller.run_pass()` observes, sweeps, plans and launches, exactly as in
production. Job and attempt ids come from a counter and every order is sorted, so
the same scenario gives the same result byte for byte.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from broker.dispatch.cadence import grid_after
from broker.sim.manifests import label, manifest_text, parsed
from broker.sim.model import SimJob, SpotTrace
from broker.sim.policies import SimPolicy

if TYPE_CHECKING:
    from broker.sim.metrics import PolicyResult
    from pricing.table import OfferTable

ORIGIN = datetime(2026, 1, 5, tzinfo=UTC)
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Scenario:
    """What one simulation replays: catalog rows, spot traces, jobs and settings.

    `restart_hours`: boot + restore time of every (re)start. `reconcile_hours`: the
    controller's pass interval while jobs wait. `horizon_hours`: stop there (jobs still
    open count as missed). `pool_gpus`: on-prem pools {(\"onprem\", region): GPUs}."""

    offers: OfferTable
    spot: SpotTrace
    jobs: Sequence[SimJob]
    restart_hours: float = 0.1
    reconcile_hours: float = 0.25
    horizon_hours: float = 24.0 * 365
    clouds: tuple[str, ...] = ()
    untraced_spot: str = "closed"
    pool_gpus: dict[tuple[str, str], float] = field(default_factory=dict)
    name: str = "scenario"


def job_names(jobs: Sequence[SimJob]) -> list[str]:
    """Unique manifest names, stable: the submission order's index plus the trace name."""
    width = max(4, len(str(len(jobs))))
    return [f"j{i:0{width}d}-{label(job.name)}"[:63].strip("-") for i, job in enumerate(jobs)]


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    progress: Callable[[float], None] | None = None,
    workdir: Path | None = None,
    every_step: bool = False,
    reference: bool = False,
) -> PolicyResult:
    """Run `scenario` under `policy`; `progress` is told the share of jobs finished.
    `every_step`: pass at every step of the reconcile grid while a job is unfinished
    (the reference for the passes `broker.sim.cadence` skips; slow). `reference`: the
    production store and planner as they are and a pass at every trace step (the
    reference for the shortcuts of `broker.sim.store`, `broker.sim.plans` and
    `Cadence.idle_at`; slower, same result)."""
    if workdir is None:
        shm = Path("/dev/shm")
        root = shm if shm.is_dir() and _writable(shm) else None
        with tempfile.TemporaryDirectory(prefix="broker-sim-", dir=root) as tmp:
            # the folder goes with the run: its state need not be written out
            return _run(scenario, policy, progress, Path(tmp), every_step, reference, kept=False)
    return _run(scenario, policy, progress, workdir, every_step, reference)


def _writable(path: Path) -> bool:
    import os

    return os.access(path, os.W_OK)


def _run(
    scenario: Scenario,
    policy: SimPolicy,
    progress,
    workdir: Path,
    every_step: bool,
    reference: bool = False,
    kept: bool = True,
) -> PolicyResult:
    from broker.clock import FixedClock
    from broker.controller import Controller
    from broker.sim.adjusted import remembered_adjustments
    from broker.sim.cadence import Cadence
    from broker.sim.metrics import collect
    from broker.sim.plans import remembered_plan_many
    from broker.sim.provider import SimulatedProvider, Work
    from broker.sim.store import SimStateStore
    from broker.state import StateStore
    from pricing.gpus import GPU_MODELS

    clock = FixedClock(ORIGIN)
    counter = itertools.count(1)
    new_id = lambda: f"{next(counter):012x}"  # noqa: E731
    path = workdir / "state.db"
    if reference:
        store = StateStore.open(path, clock, new_id=new_id)
    else:
        store = SimStateStore.open_fast(path, clock, new_id=new_id, kept=kept)
    speed = {m.name: m.relative_throughput for m in GPU_MODELS}
    provider = SimulatedProvider(
        scenario.offers,
        scenario.spot,
        clock,
        ORIGIN,
        workdir,
        restart_hours=scenario.restart_hours,
        untraced_spot=scenario.untraced_spot,
        speed=speed,
    )
    controller = Controller(
        store,
        provider,
        clock,
        _index_of(policy),
        pool_gpus=dict(scenario.pool_gpus),
        settings=policy.settings(scenario.restart_hours, scenario.reconcile_hours),
        planner=None if reference else remembered_plan_many,
        adjuster=None if reference else remembered_adjustments(store),
    )
    cadence = Cadence(controller, provider, ORIGIN, scenario.reconcile_hours, every_step,
                      shortcuts=not reference)  # fmt: skip
    order = sorted(range(len(scenario.jobs)), key=lambda i: (scenario.jobs[i].submit_hours, i))
    names = job_names(scenario.jobs)
    pending = [(scenario.jobs[i], names[i]) for i in order]
    ids: dict[str, SimJob] = {}
    submitted = finished = 0
    now = 0.0
    try:
        while True:
            while submitted < len(pending) and pending[submitted][0].submit_hours <= now + 1e-9:
                job, name = pending[submitted]
                text = manifest_text(job, policy.spot, scenario.clouds, name=name)
                manifest = parsed(text)
                result = store.submit(manifest.spec, text, manifest.digest)
                every = job.checkpoint_minutes / 60 if job.checkpoint_minutes else None
                provider.work[result.job_id] = Work(job.hours, job.gpu, every)
                ids[result.job_id] = job
                submitted += 1
            provider.sync()
            controller.run_pass()
            done = len(store.jobs(states=_terminal_states()))
            if progress is not None and done != finished:
                progress(done / max(1, len(pending)))
            finished = done
            if submitted == len(pending) and done == len(pending):
                break
            arrival = pending[submitted][0].submit_hours if submitted < len(pending) else None
            now, skippable = _following(scenario, provider, cadence, now, arrival)
            # a trace step or a wake with no instance alive, while every job provably
            # idles: its pass would do nothing (Cadence.idle_at), so the next moment is
            # looked for
            while not reference and skippable and now <= scenario.horizon_hours:
                clock.current = ORIGIN + timedelta(hours=now)
                provider.sync()
                if not cadence.idle_at(now):
                    break
                now, skippable = _following(scenario, provider, cadence, now, arrival)
            if now > scenario.horizon_hours:
                break
            clock.current = ORIGIN + timedelta(hours=now)
        return collect(store, provider, policy, ids, scenario, now)
    finally:
        store.close()


def _following(
    scenario: Scenario, provider, cadence, now: float, arrival: float | None
) -> tuple[float, bool]:
    """The next pass after `now`, and whether it may be skipped when every job idles
    then: no instance alive (so none ends or is reclaimed there), no submission, not the
    horizon's pass (a trace step, or a cadence wake: a cool-down ending where no spot is
    sold, a refusal proven to its end, a policy's first change)."""
    step = provider.next_event()
    wake = cadence.next_pass(now)
    following = [t for t in (step, wake, arrival) if t is not None and t > now + 1e-9]
    # past the horizon (or nothing can happen any more): stop at the grid's first
    # pass after it, as passing at every step would
    end = grid_after(scenario.horizon_hours, scenario.reconcile_hours)
    then = min([*following, end])
    skippable = then != arrival and then != end and not provider.alive()
    return then, skippable


def _terminal_states():
    from broker.state import JobState

    return (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def _index_of(policy: SimPolicy):
    """The controller's offers-to-index step (see `ranked_index`)."""
    from broker.sim.provider import TABLES_KEPT

    # table id -> (table, index): the provider hands out one table per sale, again when
    # what is sold comes back (`SimulatedProvider.offers`)
    made: dict[int, tuple[OfferTable, object]] = {}

    def index_of(provider):
        table = provider.offers()
        known = made.get(id(table))
        if known is None or known[0] is not table:
            if len(made) >= TABLES_KEPT:
                made.clear()
            known = made[id(table)] = (table, ranked_index(table, policy.price_only))
        return known[1]

    return index_of


def ranked_index(table: OfferTable, price_only: bool):
    """The planner's index over `table`; spot-failover ranks spot by price alone, so
    its interruption rates are zeroed. Both engines plan through this."""
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

    if price_only:
        import numpy as np

        numbers = dict(table.numbers)
        numbers["spot_interruption_rate"] = np.zeros(len(table))
        table = OfferTable(numbers, table.codes, table.categories)
    return OfferIndex(table)
