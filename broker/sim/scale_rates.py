"""The fleet-scale engine's learned interruption rates: `broker.learned_rates` over its
own spot runs, and its options re-ranked by them as the planner would rank them.

The controller plans over offers whose spot rates are the posterior of the reclaims and
spot hours seen at each place (cloud, region, instance type). Here each place keeps its
decayed evidence as running sums (every term carries exp(t / DECAY) so that ageing is
one multiplication), runs leave the sums once they ended WINDOW_HOURS ago, and a spot
option's expected hours and cost are those of the planner's cost model
(`broker.planner.cost`) at the learned rate: T = W / (1 - r c), cost = price x T +
egress, feasible when r c < 1 and the risk-adjusted T at 2r fits the deadline. Options
are then ordered by cost, then hours, then the planner's own order.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.learned_rates import DECAY_HOURS, WINDOW_HOURS, Evidence, posterior_rate
from broker.planner.cost import DEADLINE_RISK_FACTOR

if TYPE_CHECKING:
    from broker.sim.shapes import Option

Key = tuple[str, str, str]


@dataclass
class _Place:
    ended: deque = field(default_factory=deque)  # (end, start, reclaimed), by end
    reclaims: float = 0.0  # sum of exp(end / DECAY) over reclaimed runs in the window
    hours: float = 0.0  # sum of DECAY x (exp(end/DECAY) - exp(start/DECAY)) over ended runs
    running: dict[int, float] = field(default_factory=dict)  # run id -> start


class LearnedRates:
    """Decayed reclaims and spot hours per place, from the engine's spot runs.

    Between `plan` and `planned` (a pass's launches) the rates hold still: the controller
    plans every queued job of a pass over one set of offers, so a launch counts from the
    next pass on."""

    def __init__(self) -> None:
        self.places: dict[Key, _Place] = {}
        self._held: list[tuple] | None = None  # launches of the pass being planned
        self._seen: dict[Key, Evidence | None] = {}
        self._ranked: dict[int, tuple[list[Option], list[Option]]] = {}

    def plan(self) -> None:
        self._held, self._seen, self._ranked = [], {}, {}

    def planned(self) -> None:
        held, self._held = self._held or [], None
        self._seen, self._ranked = {}, {}
        for call in held:
            call[0](*call[1:])

    def start(self, key: Key, run: int, at: float) -> None:
        if self._held is not None:
            self._held.append((self.start, key, run, at))
            return
        self.places.setdefault(key, _Place()).running[run] = at

    def end(self, key: Key, run: int, at: float, reclaimed: bool) -> None:
        if self._held is not None:
            self._held.append((self.end, key, run, at, reclaimed))
            return
        place = self.places[key]
        start = place.running.pop(run)
        place.ended.append((at, start, reclaimed))
        if reclaimed:
            place.reclaims += math.exp(at / DECAY_HOURS)
        place.hours += _hours_term(start, at)

    def evidence(self, key: Key, now: float) -> Evidence | None:
        """The place's evidence now (None: no spot ran there within the window)."""
        if self._held is None:
            return self._evidence(key, now)
        if key not in self._seen:
            self._seen[key] = self._evidence(key, now)
        return self._seen[key]

    def _evidence(self, key: Key, now: float) -> Evidence | None:
        place = self.places.get(key)
        if place is None:
            return None
        while place.ended and now - place.ended[0][0] > WINDOW_HOURS:
            end, start, reclaimed = place.ended.popleft()
            if reclaimed:
                place.reclaims -= math.exp(end / DECAY_HOURS)
            place.hours -= _hours_term(start, end)
        if not place.ended and not place.running:
            return None
        scale = math.exp(-now / DECAY_HOURS)
        running = sum(
            DECAY_HOURS * -math.expm1(-(now - s) / DECAY_HOURS) for s in place.running.values()
        )
        return Evidence(max(0.0, place.reclaims * scale), max(0.0, place.hours * scale + running))

    def ranked(self, options: list[Option], now: float) -> list[Option]:
        """`options` re-costed at the learned rates and in the planner's order (once per
        list while a pass plans)."""
        if self._held is None:
            return self._rank(options, now)
        found = self._ranked.get(id(options))
        if found is None or found[0] is not options:
            found = self._ranked[id(options)] = (options, self._rank(options, now))
        return found[1]

    def _rank(self, options: list[Option], now: float) -> list[Option]:
        costed = []
        for position, option in enumerate(options):
            if option.kind != "spot" or option.rate_key is None:
                costed.append((option.planned_cost, option.planned_hours, position, option))
                continue
            seen = self.evidence(option.rate_key, now)
            if seen is None:
                costed.append((option.planned_cost, option.planned_hours, position, option))
                continue
            rate = posterior_rate(option.rate, seen)
            load = rate * option.per_interruption
            risky = rate * DEADLINE_RISK_FACTOR * option.per_interruption
            owned = math.isinf(option.hours_left)  # no deadline, or a spot policy owns it
            late = not owned and (risky >= 1.0 or option.work / (1.0 - risky) > option.hours_left)
            if load >= 1.0 or late:
                continue  # the planner would reject it: never finishes, or misses the deadline
            hours = option.work / (1.0 - load)
            costed.append((option.price * hours + option.egress, hours, position, option))
        costed.sort(key=lambda c: c[:3])
        return [c[3] for c in costed]


def _hours_term(start: float, end: float) -> float:
    return DECAY_HOURS * (math.exp(end / DECAY_HOURS) - math.exp(start / DECAY_HOURS))
