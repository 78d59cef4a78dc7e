"""The last lines of `broker run`: what this run finished, what it cost, the GPU-hours,
read back from the state store (exact money) rather than counted on the way."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.state import StateStore
    from broker.state.listing import JobListing


def run_summary(store: StateStore, since: datetime, still: int) -> str:
    """One line: the jobs this run ended by outcome, the cost and GPU-hours of the
    attempts it closed, and how many jobs are still queued or running. "This run": its
    store's own writes, not another controller's on the same queue; a job a user
    cancelled counts when this run closed its last attempt."""
    from broker.cli.formats import usd
    from broker.state.model import total

    here = store.ended_here()
    listing = store.listing(since=since, attempts=True)
    ended = [a for a in listing.attempts if a.id in here.attempts]
    last = {(a.job_id, a.number) for a in ended}
    jobs = store.listing(since=since).jobs
    done = [j for j in jobs if j.id in here.jobs or _closed_last(j, last)]
    outcomes: dict[str, int] = {}
    for job in done:
        outcomes[str(job.state)] = outcomes.get(str(job.state), 0) + 1
    cost = total(a.cost_usd for a in ended)
    gpu_hours = sum(a.gpu_hours for a in ended)
    said = ", ".join(f"{n} {state}" for state, n in sorted(outcomes.items())) or "none"
    scales = {a.time_scale for a in ended if a.time_scale not in (None, 1)}
    clock = f" (sandbox time x{', x'.join(f'{s:g}' for s in sorted(scales))})" if scales else ""
    left = f"; {still} still queued or running" if still else ""
    return (
        f"broker run: {len(done)} job(s) finished ({said}); {len(ended)} attempt(s) ended, "
        f"cost {usd(cost)} USD, {usd(gpu_hours)} GPU-hours{clock}{left}"
    )


def _closed_last(job: JobListing, closed: set[tuple[str, int]]) -> bool:
    """Whether `job` has ended and its latest attempt is one of `closed`."""
    return job.ended_at is not None and (job.id, job.attempts) in closed
