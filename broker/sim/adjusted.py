"""The offers a pass plans on, remembered while nothing is written, for the detailed
engine's controller.

`adjust_index(index, store, now, scale)` (broker.recovery: spot closed where it cools
down, learned interruption rates) is a function of the index, of what the store holds
and of `now`. The cadence's refusal proof (broker.sim.refusal) asks it at a moment and,
when the planner may place the job then, the pass at that moment asks it again with the
store unchanged: over a fifth of the questions of bench/engine_speed.py's 128 runs. So
the simulator's controller adjusts through `remembered_adjustments`, keyed by the index
itself, the moment, the scale and the store's count of changing writes
(`SimStateStore.changes`: equal, no read's answer changed in between).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.recovery import Adjuster, Reclaim
    from broker.sim.store import SimStateStore
    from broker.state import StateStore
    from pricing.query import OfferIndex

KEPT = 8  # answers remembered: the moments of one look (now, a bisection's few)


def remembered_adjustments(store: SimStateStore) -> Adjuster:
    """`adjust_index` for a controller of `store`, answered from memory when asked
    again about the same index at the same moment before anything was written."""
    from broker.recovery import adjust_index

    kept: dict[tuple[datetime, int, float], tuple[OfferIndex, OfferIndex]] = {}

    def adjusted(
        index: OfferIndex,
        asked: StateStore,
        now: datetime,
        scale: float = 1.0,
        reclaims: list[Reclaim] | None = None,
    ) -> OfferIndex:
        assert asked is store, "remembered for one store"
        key = (now, store.changes, scale)
        known = kept.get(key)
        if known is not None and known[0] is index:
            return known[1]
        answer = adjust_index(index, store, now, scale, reclaims)
        if len(kept) >= KEPT:
            kept.clear()
        kept[key] = (index, answer)
        return answer

    return adjusted
