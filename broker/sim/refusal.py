"""How long the planner provably keeps refusing a queued job: the passes it need not run.

A job the planner refuses (spot on sale, but every placement misses its risk-adjusted
deadline, or would never finish, at the interruption rate learned from its reclaims)
is planned again at every pass, and refused again, until the learned rate has decayed
far enough. Those passes change nothing, but the answer moves with the clock, so no
memo of it ever hits. What is exact instead is a bound over an interval [now, T]:

- while nothing happens (no instance alive, so no evidence is added, and no run leaves
  the learned rates' window), each place's learned rate (a Gamma-Poisson posterior,
  `broker.learned_rates`) is (a + R0 k) / (P + H0 k) with k = exp(-(t - now) / D): a
  monotone function of t, so on [now, T] it lies between its values at now and at T;
- while no cool-down starts or ends (before `Cadence._cooling_wake`), the same places
  are closed;
- the hours the planner gives the job are greatest at now (a deadline only comes
  closer; the simulator's relative ones stay put);
- the planner never places with a higher rate or fewer hours what it refuses with a
  lower rate and more hours (its cost model, `broker.planner.cost`, only grows with the
  rate; `tests/broker/test_sim_refusal.py` pins this).

So if the planner, asked at now with every place at the lower of its two rates, has no
placement for the job, it has none at any pass in [now, T], and those passes do nothing.
The largest such T is found by bisection (a bigger interval only lowers the bound),
below the next cool-down's end when there is one (most refusals last until then: the
pass before it is asked first), else after doubling. The spec planned is the
controller's own (`Planning.spec_to_plan`), so the spot policy's say is what the pass
would plan with; its answer changing later is the cadence's own wake (`first_change`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from broker.dispatch.cadence import grid_at, grid_index_after

if TYPE_CHECKING:
    from broker.controller import Controller
    from broker.spec import JobSpec
    from broker.state import Job
    from pricing.query import OfferIndex

MAX_DOUBLINGS = 20  # at most 2**20 passes ahead in one look


def refused_through(
    controller: Controller,
    job: Job,
    now: float,
    step: float,
    before: float,
    at: Callable[[float], datetime],
) -> float | None:
    """The last pass of the grid at or after `now`, earlier than `before`, up to which
    the planner provably gives `job` no placement (at least `now` itself); None when it
    may place the job now. The controller's clock must be at `now`, and no instance
    alive."""
    spec = _spec_now(controller, job, at(now))
    if spec is None:
        return None
    from broker.learned_rates import store_runs

    start = grid_index_after(now, step) - 1  # `now` counts as this index
    first = controller.adjusted_offers(at(now))
    runs: list[int] = []  # the runs in the window now, counted at the first later look

    def refused(k: int) -> bool:
        """Refused at every pass from now through the grid's index `start + k`."""
        later = now if k == 0 else grid_at(start + k, step)
        if later >= before:
            return False
        if k:
            if not runs:
                runs.append(len(store_runs(controller.store, at(now))))
            if len(store_runs(controller.store, at(later))) != runs[0]:
                return False  # a run left the window in between: the rates jumped
        index = first if k == 0 else _lowest_rates(first, controller.adjusted_offers(at(later)))
        if index is None:
            return False
        return not controller.places(spec, index, at(now))

    if not refused(0):
        return None
    last = last_refused(refused, _first_not_before(start, step, before))
    return grid_at(start + last, step) if last else now


def last_refused(refused: Callable[[int], bool], out: int | float) -> int:
    """The largest k with `refused(k)`, given `refused(0)` and that `refused` is true up
    to some k and false after (a longer interval only lowers the bound), and false from
    `out` on (the pass there is at or after the next cool-down's end; inf when none is
    known). Below a known `out`, the pass before it is asked first (most refusals last
    until then), then bisection; else doubling, then bisection, at most
    2**(MAX_DOUBLINGS - 1) passes ahead."""
    low, high = 0, out  # refused through low, not from high
    if high <= 1 << (MAX_DOUBLINGS - 1):
        if high == 1 or refused(high - 1):
            return high - 1
    else:
        high = 1  # untried
        for _ in range(MAX_DOUBLINGS):
            if not refused(high):
                break
            low, high = high, high * 2
        else:
            return low
    while high - low > 1:
        mid = (low + high) // 2
        if refused(mid):
            low = mid
        else:
            high = mid
    return low


def _first_not_before(start: int, step: float, before: float) -> int | float:
    """The least k >= 1 whose pass, the grid's index `start + k`, is at or after
    `before` (inf when `before` is)."""
    if math.isinf(before):
        return math.inf
    k = max(1, math.ceil(before / step) - start)
    while k > 1 and grid_at(start + k - 1, step) >= before:
        k -= 1
    while grid_at(start + k, step) < before:
        k += 1
    return k


def _spec_now(controller: Controller, job: Job, when: datetime) -> JobSpec | None:
    """The spec the controller's pass would plan now (None: planning it raises, which
    the pass must see)."""
    from broker.controller.isolation import not_one_jobs

    try:
        return controller.spec_to_plan(job, when)
    except Exception as exc:  # noqa: BLE001 (the pass would hold it: let the pass run)
        if not_one_jobs(exc):
            raise
        return None


def _lowest_rates(first: OfferIndex, last: OfferIndex) -> OfferIndex | None:
    """`first` with every row at the lower of its learned rates in `first` and `last`;
    None when the two differ otherwise (then no bound is claimed)."""
    import numpy as np

    from pricing.query import OfferIndex

    if first is last:
        return first
    a, b = first.offers, last.offers
    if len(a) != len(b) or set(a.numbers) != set(b.numbers) or set(a.codes) != set(b.codes):
        return None
    if any(not np.array_equal(a.text(n), b.text(n)) for n in a.codes):
        return None
    for name, column in a.numbers.items():
        if name != "spot_interruption_rate" and not np.array_equal(
            column, b.numbers[name], equal_nan=True
        ):
            return None
    ra, rb = a.numbers["spot_interruption_rate"], b.numbers["spot_interruption_rate"]
    if not np.array_equal(np.isnan(ra), np.isnan(rb)):
        return None
    from pricing.table import OfferTable

    numbers = dict(a.numbers)
    numbers["spot_interruption_rate"] = np.fmin(ra, rb)
    table = OfferTable(numbers, a.codes, a.categories)
    return OfferIndex(table, extra_countries=first.extra_countries)
