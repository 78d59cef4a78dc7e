"""The cost model's assumptions and formulas, vectorised over candidate placements.

expected cost = price per hour (all nodes) x expected hours + egress, where
expected hours = run hours (the estimate, scaled by relative GPU throughput)
               + staging hours (inputs copied in before work starts)
               + on spot, expected interruptions x (lost work + restart + restore).

Interruptions arrive at a rate r per hour of running, and each costs c hours
(half a checkpoint interval of lost work, a restart, a checkpoint restore), so
the total T solves T = W + r*T*c, i.e. T = W / (1 - r*c); when r*c >= 1 the
job would never finish on that offer and the offer is infeasible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

# Expected spot interruptions per running hour when the catalog has no figure.
# Deliberately pessimistic for GPUs: published GPU spot traces (SpotHedge, "Can't
# Be Late") show preemptions every few hours in busy zones, far above what the
# monthly AWS Spot Advisor bands suggest for the average instance.
DEFAULT_INTERRUPTION_RATE: dict[str, float] = {
    "aws": 0.05,
    "gcp": 0.08,  # GCP Spot VMs can be reclaimed at any time, with 30 s notice
    "azure": 0.06,
    "onprem": 0.0,
}
RESTART_HOURS = 0.1  # relaunch, image pull, process start after an interruption
# For deadline checks on spot, interruptions are assumed this many times likelier
# than expected: a plan must still make its deadline in a bad week.
DEADLINE_RISK_FACTOR = 2.0
# Sustained copy throughput, GB per second, by how far data travels (pricing.egress scopes).
COPY_GB_PER_SECOND: dict[str, float] = {
    "same_zone": 1.0,
    "same_region": 1.0,
    "same_continent": 0.5,
    "other_continent": 0.25,
    "internet": 0.25,
}
NO_CHECKPOINT_LOSS = 0.5  # without checkpoints an interruption loses half the run, on average


class SpotHours(NamedTuple):
    """Expected hours on a market given interruption rates (arrays per candidate)."""

    total: np.ndarray  # inf where the job would never finish
    overhead: np.ndarray
    interruptions: np.ndarray


def spot_hours(
    work_hours: np.ndarray,
    rate: np.ndarray,
    cost_per_interruption: np.ndarray,
) -> SpotHours:
    """Solve T = W / (1 - r*c) per candidate (see module docstring)."""
    import numpy as np

    load = rate * cost_per_interruption
    finishes = load < 1.0
    total = np.divide(work_hours, 1.0 - load, out=np.full(len(load), np.inf), where=finishes)
    interruptions = np.multiply(rate, total, out=np.zeros(len(load)), where=finishes)
    return SpotHours(total=total, overhead=total - work_hours, interruptions=interruptions)


def lost_hours_per_interruption(
    interval_minutes: np.ndarray, run_hours: np.ndarray, restore_hours: np.ndarray
) -> np.ndarray:
    """Work redone after one interruption: half a checkpoint interval (or half the run
    where there are no checkpoints: interval NaN), plus restart and checkpoint restore."""
    import numpy as np

    half_run = run_hours * NO_CHECKPOINT_LOSS
    half_interval = np.where(np.isnan(interval_minutes), np.inf, interval_minutes / 120.0)
    return np.minimum(half_interval, half_run) + RESTART_HOURS + restore_hours


def copy_hours(size_gb: float, scope: str) -> float:
    """Hours to copy `size_gb` over a link of the given egress scope."""
    return size_gb / COPY_GB_PER_SECOND[scope] / 3600.0
