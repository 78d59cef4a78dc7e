"""The planner's answers remembered for the process, for the detailed engine's controller.

`plan_many(jobs, index, now)` is a pure function (broker.planner.plan): of the specs, of
the offers table's contents, and of `now` only through each job's hours left before its
deadline. A simulation asks it the same questions again and again: a queued job planned
at catalog rates while nothing changed, the cool-down's second look on the same cooling
place, and the runs of a benchmark, which replay one job on the same few tables (over
half of the questions of bench/engine_speed.py's 128 runs were asked before). So the
simulator's controller plans through `remembered_plan_many`, keyed by exactly what the
planner reads; a Decision is frozen, so an answer is shared as it is. A table that sells
no spot anywhere is keyed without its rates (the planner reads none: `table_key`). A
question not asked before is mostly a table whose learned rates moved: it is planned over the
planner's `Search` kept for the same jobs on a table equal but for its rates, rerated
(`Search.rerated`), so only the cost model runs again.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.planner.decision import Decision
    from broker.planner.plan import Search
    from broker.spec import JobSpec
    from pricing.query import OfferIndex
    from pricing.table import OfferTable

KEPT = 1 << 13  # answers remembered (each small: a few placements)
SEARCHES = 1 << 8  # candidate searches remembered (each its table's layout)
SMALL = 1 << 10  # rows of the largest table whose search is remembered: on larger ones
# the array work dwarfs the fixed costs a search saves, and a layout weighs its table
RATES = "spot_interruption_rate"  # the column a learned rate changes


def remembered_plan_many(
    jobs: Sequence[JobSpec], index: OfferIndex, now: datetime
) -> list[Decision]:
    """`plan_many(jobs, index, now)`, answered from memory when asked before."""
    rest, rates = _key_of(index)
    key = (tuple(jobs), rest, rates, tuple(_left(job, now) for job in jobs))
    return list(_answer(_Question(key, tuple(jobs), index, now, rest)))


def _left(job: JobSpec, now: datetime) -> timedelta | None:
    """What the planner reads of `now` for `job`: the time left to its deadline."""
    deadline = job.runtime.deadline_at(now)
    return None if deadline is None else deadline - now


_last_key: list[tuple[OfferIndex, tuple[tuple, bytes]]] = []  # the last index asked, its key


def _key_of(index: OfferIndex) -> tuple[tuple, bytes]:
    """`table_key(index)`, kept for the last index asked: a refusal proof's question and
    the pass after it plan on the same index (broker.sim.adjusted), and an index is not
    changed once made."""
    if _last_key and _last_key[0][0] is index:
        return _last_key[0][1]
    key = table_key(index)
    _last_key[:] = [(index, key)]
    return key


def table_key(index: OfferIndex) -> tuple[tuple, bytes]:
    """What the planner reads of `index` (an OfferIndex holds nothing else): every
    column's type and bytes, the category names and the extra countries, but the learned
    rates' values (where a rate is known is kept); and those values, which it reads only
    where spot is on sale: a table selling no spot anywhere (a zone reclaimed or cooling
    down) loses every spot candidate to the price filter before a cost group takes a rate
    (`broker.planner.offer_filters`), so its rates are left out of the key."""
    import numpy as np

    table = index.offers
    rates = table.numbers[RATES]
    rest = (
        _columns_key(table),
        (rates.dtype.str, np.isnan(rates).tobytes()),  # where a rate is known
        tuple(sorted(index.extra_countries.items())),
    )
    sold = not np.isnan(table.numbers["price_spot"]).all()
    return rest, rates.tobytes() if sold else b""


# the columns' keys of the tables last keyed, by the identity of their arrays (held, so
# no other array takes an id while kept): the tables a simulation plans on differ from
# the provider's in their learned rates alone, the other arrays shared
_columns: dict[tuple[int, ...], tuple[tuple, tuple]] = {}


def _columns_key(table: OfferTable) -> tuple:
    """Every column's name, type and bytes but the learned rates', and the category
    names: `table_key`'s part that a table shares with the one it was made from."""
    arrays = (
        *(a for n, a in table.numbers.items() if n != RATES),
        *table.codes.values(),
        *table.categories.values(),
    )
    ids = tuple(map(id, arrays))
    known = _columns.get(ids)
    if known is not None and all(a is b for a, b in zip(known[0], arrays, strict=True)):
        return known[1]
    numbers = tuple(
        (n, a.dtype.str, a.tobytes()) for n, a in sorted(table.numbers.items()) if n != RATES
    )
    codes = tuple((n, a.dtype.str, a.tobytes()) for n, a in sorted(table.codes.items()))
    names = tuple((n, tuple(a.tolist())) for n, a in sorted(table.categories.items()))
    key = (numbers, codes, names)
    if len(_columns) >= SEARCHES:
        _columns.clear()
    _columns[ids] = (arrays, key)
    return key


@dataclass(frozen=True)
class _Question:
    """A planner question, equal to another when its key is (the rest is what to ask)."""

    key: tuple
    jobs: tuple = field(compare=False)
    index: OfferIndex = field(compare=False)
    now: datetime = field(compare=False)
    rest: tuple = field(compare=False)  # the table's key but its rates


@functools.lru_cache(maxsize=KEPT)
def _answer(question: _Question) -> tuple[Decision, ...]:
    from broker.planner.plan import plan_many

    def search(jobs: Sequence[JobSpec], index: OfferIndex, chunk_pairs: int) -> Search:
        return _search(jobs, index, chunk_pairs, question.rest)

    return tuple(plan_many(question.jobs, question.index, question.now, search=search))


_searches: OrderedDict[tuple, Search] = OrderedDict()


def _search(jobs: Sequence[JobSpec], index: OfferIndex, chunk_pairs: int, rest: tuple) -> Search:
    """The planner's `Search` of `jobs` over `index`: the one kept for the same jobs on a
    table equal but for its learned rates, rerated, when they keep its order; else new
    (and kept, on a small table)."""
    from broker.planner.plan import Search

    if len(index.offers) > SMALL:
        return Search.of(jobs, index, chunk_pairs)
    key = (tuple(jobs), rest, chunk_pairs)
    kept = _searches.get(key)
    if kept is not None:
        _searches.move_to_end(key)
        rerated = kept.rerated(index)
        if rerated is not None:
            return rerated
    made = _searches[key] = Search.of(jobs, index, chunk_pairs)
    if len(_searches) > SEARCHES:
        _searches.popitem(last=False)
    return made
