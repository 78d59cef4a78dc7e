"""The hindsight optimum of one job over a spot trace: the cheapest schedule that meets
the deadline when the whole availability and price trace is known in advance.

The lower bound every policy is measured against (SkyNomad's "oracle DP", Can't Be
Late's "optimal"). The model is the simulator's:

- Decisions are taken at trace steps (length h). In each step the job is idle, on spot
  in one traced place (only while that place has a free instance for the whole step),
  or on on-demand in one region (always available).
- Every start or switch pays `restart_hours` of billed time without progress; then the
  job progresses at one hour of work per hour. Billing is per hour of running time, at
  the step's spot price or the region's on-demand price; the last step is billed only
  up to the moment the work is done.
- With hindsight a job leaves a place just before it is reclaimed, with a graceful
  checkpoint: no work is lost. Starting in a region other than the one holding the
  checkpoint pays `egress(from, to)` USD once.

Dynamic program over (step, where the job is, progress). Progress is counted in units
of h/k, with k chosen so the restart overhead is a whole number of units (k = 13 for
195 s steps and 0.2 h or 0.05 h overheads); a start debits the overhead from progress
at once, which is exact for every run that outlives its start (a run that does not is
never optimal). numpy does one step for all progress values at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_INF = math.inf


@dataclass(frozen=True)
class Market:
    """One place the job can run: spot at a traced place, or on-demand in a region."""

    region: str
    prices: Sequence[float]  # USD/hour per step (one value: constant)
    available: Sequence[bool] | None = None  # per step; None: always (on-demand)

    def price(self, step: int) -> float:
        return float(self.prices[min(step, len(self.prices) - 1)])

    def open(self, step: int) -> bool:
        if self.available is None:
            return True
        return step < len(self.available) and bool(self.available[step])


@dataclass(frozen=True)
class Optimum:
    cost: float  # USD; inf when the deadline cannot be met
    feasible: bool
    units_per_step: int


def units_per_step(step_hours: float, restart_hours: float, most: int = 240) -> int:
    """The smallest k (<= most) with restart_hours a whole number of h/k units; else `most`
    (the overhead is then rounded up to whole units: a slightly pessimistic optimum)."""
    for k in range(1, most + 1):
        units = restart_hours / (step_hours / k)
        if abs(units - round(units)) < 1e-6:
            return k
    return most


def hindsight_optimum(
    markets: Sequence[Market],
    *,
    step_hours: float,
    work_hours: float,
    deadline_hours: float,
    restart_hours: float,
    egress: Callable[[str, str], float] | Mapping[tuple[str, str], float] | None = None,
) -> Optimum:
    """The least cost to do `work_hours` by `deadline_hours` (from step 0) over `markets`.

    `egress(a, b)`: USD to move the checkpoint from region a to b (0 within a region)."""
    k = units_per_step(step_hours, restart_hours)
    unit = step_hours / k
    over = math.ceil(restart_hours / unit - 1e-6)
    goal = math.ceil(work_hours / unit - 1e-6)
    steps = math.floor(deadline_hours / step_hours + 1e-9)
    regions = sorted({m.region for m in markets})
    region_at = {r: i for i, r in enumerate(regions)}
    move = _egress_matrix(regions, egress)
    # progress index = progress units + over (a fresh start dips to -over); capped at goal.
    size = goal + over + 1
    n = len(markets)
    ran = np.full((n, size), _INF)  # on market i at the end of the step
    idle = np.full((len(regions) + 1, size), _INF)  # idle, checkpoint in region r (last: none)
    idle[len(regions), over] = 0.0
    best = _INF
    for step in range(steps):
        held = idle.copy()  # the cheapest state per checkpoint region, whatever ran
        for i, m in enumerate(markets):
            r = region_at[m.region]
            np.minimum(held[r], ran[i], out=held[r])
        new_ran = np.full_like(ran, _INF)
        for i, m in enumerate(markets):
            if not m.open(step):
                continue
            r = region_at[m.region]
            into = held[len(regions)].copy()  # nothing saved yet: no egress
            for src in range(len(regions)):
                np.minimum(into, held[src] + move[src, r], out=into)
            before = np.full(size, _INF)
            before[: size - over] = into[over:]  # a start debits the overhead
            np.minimum(before, ran[i], out=before)  # or the run goes on
            new_ran[i] = _advance(before, k, m.price(step) * step_hours)
            best = min(best, new_ran[i, -1])
            new_ran[i, -1] = _INF  # done: it stops paying
        idle, ran = held, new_ran
    return Optimum(best, math.isfinite(best), k)


def _advance(before: np.ndarray, k: int, bill: float) -> np.ndarray:
    """Costs by progress index after one running step billed `bill` (+k units); the
    step that reaches the goal (last cell) is billed only up to that moment."""
    size = len(before)
    out = np.full(size, _INF)
    if size - 1 > k:
        out[k : size - 1] = before[: size - 1 - k] + bill
    lo = max(0, size - 1 - k)
    share = (size - 1 - np.arange(lo, size - 1)) / k  # of the step, until the goal
    out[-1] = np.min(before[lo : size - 1] + bill * share, initial=_INF)
    return out


def _egress_matrix(regions: list[str], egress) -> np.ndarray:
    n = len(regions)
    out = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a == b or egress is None:
                continue
            if callable(egress):
                out[a, b] = float(egress(regions[a], regions[b]))
            else:
                out[a, b] = float(egress.get((regions[a], regions[b]), 0.0))
    return out
