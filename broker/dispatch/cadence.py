"""When a decision is asked again: the controller's pass grid, and the first pass at
which a spot policy would answer otherwise.

The controller passes every `pass_hours` (its poll interval), and a pass also follows
whatever happens (a reclaim, an instance ending, a submission). Between two such
happenings a spot policy's answer for a job moves only with time: an idle job's spare
shrinks (waiting turns to on-demand), an on-demand run's reserve shrinks (on-demand
turns back to spot). Both simulator engines ask here for the first pass at which the
answer changes, so they wake a job at the same pass, and re-deciding only there
equals re-deciding at every pass.

Hours are floats from one origin; the grid is every whole multiple of the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_EPS = 1e-9


def grid_at(k: int, step: float) -> float:
    """The k-th pass of the grid (computed, not summed, so every engine gets the same
    float)."""
    return k * step


def grid_index_after(now: float, step: float) -> int:
    """The index of the first pass strictly after `now`."""
    return math.floor(now / step + _EPS) + 1


def grid_after(now: float, step: float) -> float:
    """The first pass of the grid strictly after `now`."""
    return grid_at(grid_index_after(now, step), step)


def grid_from(at: float, step: float) -> float:
    """The first pass of the grid at or after `at` (a pass a hair early is harmless:
    the engine decides again after it)."""
    return grid_at(max(0, math.ceil(at / step - _EPS)), step)


def first_change(
    answer: Callable[[float], str], now: float, step: float, until: float
) -> float | None:
    """The first pass after `now`, up to `until`, at which `answer(t)` differs from
    `answer(now)`; None when it answers the same up to `until`.

    Found by bisection over the grid: while nothing happens to a job its policy's
    answer moves one way in time (docs/simulate.md, "Cadence"), so the first differing
    pass is found in log2(passes) questions."""
    said = answer(now)
    low = grid_index_after(now, step) - 1  # answers as now (virtually: `now` itself)
    high = math.floor(until / step + _EPS)
    if high <= low or answer(grid_at(high, step)) == said:
        return None
    while high - low > 1:
        mid = (low + high) // 2
        if answer(grid_at(mid, step)) == said:
            low = mid
        else:
            high = mid
    return grid_at(high, step)
