"""Learned spot interruption rates: the catalog's rate, moved by the broker's own
evidence as far as that evidence weighs.

Reclaims at a place (cloud, region, instance type) are taken as a Poisson process of
unknown rate λ per spot hour. Before any evidence, λ follows a Gamma prior whose mean is
the catalog's rate r0 (the cloud's default, `broker.planner.cost`, when the catalog has
none) and whose weight is `PRIOR_HOURS` of spot time. After n reclaims in E spot hours
the posterior mean is

    λ = (r0 · PRIOR_HOURS + n) / (PRIOR_HOURS + E)

Evidence ages: a reclaim that happened `age` hours ago counts exp(-age / DECAY_HOURS),
and so does each hour of spot time by when it ran; evidence older than `WINDOW_HOURS`
(under 2 % of its weight) is not read. So one reclaim after half an hour at a 0.05/h
place reads as (1.2 + 1) / 24.5 = 0.09/h, not 1/h, and a planner that checks deadlines
against twice the rate does not write the place off; ten reclaims in a day read as
(1.2 + 10) / 48 = 0.23/h; a place that was bad last week is judged mostly on its
catalog rate again. Spot time without a reclaim lowers the rate the same way.

The cool-down (`broker.recovery.closed_places`) stays the short-term signal: it closes a
place for minutes to hours after a reclaim; this is the long-term one.

Pure functions over plain numbers, so the controller (through `broker.recovery`) and the
fleet-scale simulator learn the same rates from the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.state import StateStore
    from pricing.table import OfferTable

PRIOR_HOURS = 24.0  # the catalog's rate weighs as much as a day of spot time
DECAY_HOURS = 24.0  # evidence loses weight e-fold per day
WINDOW_HOURS = 4 * DECAY_HOURS

Key = tuple[str, str, str]  # (cloud, region, instance type)


@dataclass(frozen=True, slots=True)
class SpotRun:
    """One spot run at a place: `ended` hours ago (0 while it runs), `hours` long."""

    key: Key
    ended: float
    hours: float
    reclaimed: bool


@dataclass(frozen=True, slots=True)
class Evidence:
    """Decayed reclaims and spot hours at one place."""

    reclaims: float = 0.0
    hours: float = 0.0


def decayed_hours(ended: float, hours: float) -> float:
    """Spot hours that ended `ended` hours ago, each weighted by its own age."""
    if hours <= 0:
        return 0.0
    return DECAY_HOURS * (math.exp(-ended / DECAY_HOURS) - math.exp(-(ended + hours) / DECAY_HOURS))


def evidence(runs: Iterable[SpotRun]) -> dict[Key, Evidence]:
    """The decayed evidence per place from `runs` (those ended within WINDOW_HOURS)."""
    reclaims: dict[Key, float] = {}
    hours: dict[Key, float] = {}
    for run in runs:
        if run.ended > WINDOW_HOURS:
            continue
        hours[run.key] = hours.get(run.key, 0.0) + decayed_hours(run.ended, run.hours)
        if run.reclaimed:
            reclaims[run.key] = reclaims.get(run.key, 0.0) + math.exp(-run.ended / DECAY_HOURS)
    return {k: Evidence(reclaims.get(k, 0.0), hours[k]) for k in sorted(hours)}


def posterior_rate(prior: float, seen: Evidence) -> float:
    """The posterior mean rate per hour (module docstring)."""
    return (prior * PRIOR_HOURS + seen.reclaims) / (PRIOR_HOURS + seen.hours)


def store_runs(store: StateStore, now: datetime) -> list[SpotRun]:
    """The spot attempts of the store that ran within WINDOW_HOURS of `now`, as runs:
    ended ones with their billed hours, running ones up to now. `now` may be a past
    moment (what was known then: `reclaims_often`): an attempt that ended later counts
    as running then, one that started later not at all."""
    from broker.state import AttemptState

    runs = []
    for attempt in store.attempts():
        if attempt.market != "spot":
            continue
        p = attempt.placed_on
        key = (p.cloud, p.region, p.instance_type)
        if attempt.ended_at is None or attempt.ended_at > now:
            running = attempt.ended_at is not None or attempt.state == AttemptState.RUNNING
            if attempt.running_at is None or attempt.running_at > now or not running:
                continue
            hours = (now - attempt.running_at).total_seconds() / 3600
            runs.append(SpotRun(key, 0.0, max(0.0, hours), False))
            continue
        ended = (now - attempt.ended_at).total_seconds() / 3600
        if ended > WINDOW_HOURS:
            continue
        reclaimed = attempt.state == AttemptState.INTERRUPTED
        runs.append(SpotRun(key, max(0.0, ended), float(attempt.billed_hours or 0), reclaimed))
    return runs


def at_least_prior(prior: float, seen: Evidence | None) -> bool:
    """Whether a place reclaims at least as often as its catalog says: its posterior
    rate is at or above the prior (no evidence: no)."""
    return seen is not None and posterior_rate(prior, seen) >= prior


def catalog_rate(table: OfferTable, key: Key) -> float:
    """The prior of place `key` in `table`: its first spot row's rate, or its cloud's
    default (as `with_learned_rates` takes it); the default when no row is there."""
    import numpy as np

    cloud, region, itype = (table.text(n) for n in ("cloud", "region", "instance_type"))
    rows = np.flatnonzero((cloud == key[0]) & (region == key[1]) & (itype == key[2]))
    column = table.numbers["spot_interruption_rate"]
    return _prior(float(column[rows[0]]) if len(rows) else math.nan, key[0])


def reclaims_often(store: StateStore, table: OfferTable, key: Key, at: datetime) -> bool:
    """`at_least_prior` at place `key` as the store knew it at `at` (a reclaim's moment,
    which fixes the answer for good: `broker.dispatch.hold`)."""
    found = evidence(run for run in store_runs(store, at) if run.key == key)
    return at_least_prior(catalog_rate(table, key), found.get(key))


def _prior(rate: float, cloud: str) -> float:
    """A row's rate, or its cloud's default when the catalog has none."""
    if not math.isnan(rate):
        return rate
    from broker.planner.cost import DEFAULT_INTERRUPTION_RATE

    return DEFAULT_INTERRUPTION_RATE.get(cloud, 0.05)


def with_learned_rates(table: OfferTable, seen: Mapping[Key, Evidence]) -> OfferTable:
    """`table` with each spot row of a place with evidence at its posterior rate, the
    row's own rate (or its cloud's default) as the prior. The same table without
    evidence."""
    if not seen:
        return table

    from pricing.table import OfferTable

    numbers = dict(table.numbers)
    column = numbers["spot_interruption_rate"].copy()
    rows = _rows_of_places(table)
    for (c, r, t), found in seen.items():
        for i in rows.get((c, r, t), ()):
            column[i] = posterior_rate(_prior(float(column[i]), c), found)
    numbers["spot_interruption_rate"] = column
    return OfferTable(numbers, table.codes, table.categories)


_PLACE_COLUMNS = ("cloud", "region", "instance_type")
_rows_last: list[tuple[tuple, dict[Key, list[int]]]] = []  # `_rows_of_places`' last answer


def _rows_of_places(table: OfferTable) -> dict[Key, list[int]]:
    """Each place's rows in `table`, in order; kept for the last table's place columns
    (held, so compared by identity: the tables of one moment, cooled or rated, share
    them with the provider's)."""
    arrays = tuple(a for n in _PLACE_COLUMNS for a in (table.codes[n], table.categories[n]))
    if _rows_last and all(a is b for a, b in zip(_rows_last[0][0], arrays, strict=True)):
        return _rows_last[0][1]
    rows: dict[Key, list[int]] = {}
    texts = [table.text(n).tolist() for n in _PLACE_COLUMNS]
    for i, place in enumerate(zip(*texts, strict=True)):
        rows.setdefault(place, []).append(i)
    _rows_last[:] = [(arrays, rows)]
    return rows
