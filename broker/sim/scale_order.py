"""The queue's order among jobs the fleet-scale engine decides in one pass.

The controller plans every queued job in a pass and launches them in the queue
policy's order (`broker.queue.policy.schedule`): priority, then queue weight x the
team's fair-share factor, then when the job was queued, then its id. When several jobs
compete for the same spot room in one pass, that order says who gets it; this module
keeps each team's decayed GPU usage as `broker.queue.fairshare.decayed_usage` counts it
(every run, from its start to its end or now), incrementally, so that the order costs
no more than the jobs being ordered.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.queue.fairshare import fair_share_factors

_LN2 = math.log(2.0)


@dataclass
class TeamUsage:
    """Decayed GPU-hours per team (half-life `half_life` hours), kept as the usage of
    ended runs (at the hour it was last brought up to date) and the running GPUs."""

    half_life: float
    _ended: dict[str, tuple[float, float]] = field(default_factory=dict)  # value, at
    _running: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)

    def start(self, team: str, key: int, gpus: float, at: float) -> None:
        self._running.setdefault(team, {})[key] = (gpus, at)

    def end(self, team: str, key: int, at: float) -> None:
        gpus, start = self._running[team].pop(key)
        value = self._ended_at(team, at) + self._interval(gpus, start, at, at)
        self._ended[team] = (value, at)

    def usage(self, now: float) -> dict[str, float]:
        teams = sorted(set(self._ended) | set(self._running))
        out = {}
        h = self.half_life  # _interval(g, s, now, now) inlined, the same floats (2^0 = 1)
        for team in teams:
            running = self._running.get(team, {}).values()
            parts = [self._ended_at(team, now)]
            parts += [
                g * h / _LN2 * -math.expm1(-((now - s) / h) * _LN2) if g > 0 and now > s else 0.0
                for g, s in running
            ]
            out[team] = math.fsum(parts)
        return out

    def _ended_at(self, team: str, now: float) -> float:
        value, at = self._ended.get(team, (0.0, now))
        return value * 2.0 ** (-(now - at) / self.half_life)

    def _interval(self, gpus: float, start: float, stop: float, now: float) -> float:
        """g x the integral of 2^(-(now - t)/h) over [start, stop] (fairshare's formula)."""
        h = self.half_life
        if gpus <= 0 or stop <= start:
            return 0.0
        a = (now - stop) / h
        d = (stop - start) / h
        return gpus * h / _LN2 * 2.0 ** (-a) * -math.expm1(-d * _LN2)


def queue_order(
    jobs: Iterable[int],
    *,
    priority: Sequence[int],
    team: Sequence[str],
    queued_at: Mapping[int, float] | Sequence[float],
    usage: Callable[[], dict[str, float]],
    teams: Iterable[str],
    first: int | None = None,
) -> list[int]:
    """`jobs` in the queue policy's order (default policy: every team's share 1, every
    queue's weight 1); only the `first` of them when given (the same as cutting the
    whole order, without sorting what is cut). `usage` is asked only when the jobs
    belong to two teams or more: within one team the fair-share factor orders nothing."""
    chosen = list(jobs)
    if len(chosen) < 2:
        return chosen if first is None else chosen[:first]
    theirs = {team[i] for i in chosen}
    if len(theirs) > 1:
        known = set(teams) | theirs
        factors = fair_share_factors(usage(), dict.fromkeys(sorted(known), 1.0))
        score = {t: round(factors[t], 12) for t in theirs}
    else:
        score = dict.fromkeys(theirs, 0.0)

    def key(i: int) -> tuple:
        return (-priority[i], -score[team[i]], queued_at[i], i)

    if first is not None and first < len(chosen):
        return heapq.nsmallest(first, chosen, key=key)
    return sorted(chosen, key=key)
