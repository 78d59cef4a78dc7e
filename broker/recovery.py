"""Spot survival: what the broker learns from interruptions, and where a checkpoint lives.

- A place (cloud, region, zone, instance type) that just reclaimed spot capacity is not
  offered spot for a cool-down that doubles with each reclaim there in the last 4 hours
  (10 minutes, 20, 40... at most 4 hours); instances taken back together, or while the
  place is closed, count as one reclaim. A reclaim counts towards the doubling only as
  long as the longest cool-down lasts: the longer memory of a flaky place is its learned
  rate's (below), so a morning of reclaims does not close it all afternoon. The planner
  therefore moves a job elsewhere, and a job cannot ping-pong between two preempting
  regions: both stay closed longer each time.
- Each place where spot ran lately gets a learned interruption rate: the catalog's
  moved by the reclaims and spot hours seen there, as far as they weigh
  (`broker.learned_rates`, a Gamma-Poisson posterior with decaying evidence). The
  planner's risk-adjusted cost then prefers steadier places, or on-demand, without one
  early reclaim writing a place off; the cool-down is the short-term signal.
- A job's checkpoint lives where its last attempt ran; the planner prices moving it
  (egress and copy time) to each candidate, and the controller copies it before the
  next attempt starts (`broker.controller.checkpoints`).

All of it is read from the state store, so a restarted controller knows it too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.spec import JobSpec
    from broker.state import Job, StateStore
    from pricing.query import OfferIndex
    from pricing.regions import Place
    from pricing.table import OfferTable
    from providers.cloud import Unavailable

COOLDOWN_BASE = timedelta(minutes=10)
COOLDOWN_MAX = timedelta(hours=4)
HISTORY = COOLDOWN_MAX  # how long a reclaim counts towards the doubling
REASON = "spot reclaimed here"


@dataclass(frozen=True)
class Reclaim:
    """One spot attempt that ended by interruption."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    at: datetime
    hours: float  # billed hours of the attempt


def recent_reclaims(store: StateStore, now: datetime) -> list[Reclaim]:
    """Spot attempts interrupted within HISTORY of `now`, oldest first."""
    from broker.state import AttemptState

    reclaims = []
    for attempt in store.attempts(states=(AttemptState.INTERRUPTED,)):
        if attempt.market != "spot" or attempt.ended_at is None:
            continue
        if now - attempt.ended_at > HISTORY:
            continue
        p = attempt.placed_on
        reclaims.append(
            Reclaim(
                p.cloud,
                p.region,
                p.zone,
                p.instance_type,
                attempt.ended_at,
                float(attempt.billed_hours or 0),
            )
        )
    return reclaims


def cooldown(reclaims_here: int, scale: float = 1.0) -> timedelta:
    """How long spot stays closed after the n-th reclaim at one place within HISTORY
    (counted as `cooling` counts them);
    `scale` multiplies it (0: no cool-down; the simulator's policies tune it)."""
    doublings = min(max(0, reclaims_here - 1), 32)  # past the cap already; no overflow
    return min(COOLDOWN_BASE * 2**doublings, COOLDOWN_MAX) * scale


def cooling(hours: Sequence[float], scale: float = 1.0) -> tuple[float, int]:
    """(the hour the place sells spot again, the reclaims counted) for reclaims at the
    sorted, non-empty `hours`. A reclaim counts only when the place was selling again:
    the instances one capacity event takes back at once, or while the place is closed,
    are one reclaim, so a burst does not close it for hours."""
    until, counted = -math.inf, 0
    for at in hours:
        if at >= until:
            counted += 1
            until = at + cooldown(counted, scale) / timedelta(hours=1)
    return until, counted


def cooling_at(times: Sequence[datetime], scale: float = 1.0) -> tuple[datetime, int]:
    """`cooling` of reclaims at the sorted, non-empty datetimes `times`."""
    first = times[0]
    until, counted = cooling([(t - first) / timedelta(hours=1) for t in times], scale)
    return first + timedelta(hours=until), counted


def cooling_until(times: Sequence[datetime], scale: float = 1.0) -> datetime:
    """When a place reclaimed at the sorted, non-empty `times` sells spot again."""
    return cooling_at(times, scale)[0]


@dataclass(frozen=True)
class Cooling:
    """A place whose spot market is closed until `until` after `reclaims` reclaims."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    until: datetime
    reclaims: int

    @property
    def where(self) -> str:
        """`cloud/region[/zone]/instance_type`, as reasons name it."""
        zone = f"/{self.zone}" if self.zone else ""
        return f"{self.cloud}/{self.region}{zone}/{self.instance_type}"

    def covers(self, cloud: str, region: str, zone: str, instance_type: str) -> bool:
        """Whether a spot placement there is closed by this cool-down (a zone-less one
        closes every zone of the region, as `restrict_offers` does)."""
        same = (self.cloud, self.region, self.instance_type) == (cloud, region, instance_type)
        return same and (not self.zone or self.zone == zone)


def cooling_places(reclaims: list[Reclaim], now: datetime, scale: float = 1.0) -> list[Cooling]:
    """Places whose spot market is still cooling down at `now`, and until when."""
    by_place: dict[tuple[str, str, str, str], list[datetime]] = defaultdict(list)
    for r in reclaims:
        by_place[(r.cloud, r.region, r.zone, r.instance_type)].append(r.at)
    closing = []
    for (cloud, region, zone, instance_type), times in sorted(by_place.items()):
        until, counted = cooling_at(sorted(times), scale)
        if now < until:
            closing.append(Cooling(cloud, region, zone, instance_type, until, counted))
    return closing


def closed_places(reclaims: list[Reclaim], now: datetime, scale: float = 1.0) -> list[Unavailable]:
    """Places whose spot market is still cooling down, with the reason shown to users."""
    from providers.cloud import Unavailable

    return [
        Unavailable(
            c.cloud, c.region, c.zone, c.instance_type, "spot",
            f"{REASON} {c.reclaims}x in {HISTORY // timedelta(hours=1)} h: "
            f"closed until {c.until:%H:%M} UTC",
        )
        for c in cooling_places(reclaims, now, scale)
    ]  # fmt: skip


def cooling_wait(placements, cooling: list[Cooling]):
    """Of the cool-downs closing one of `placements` (planned as if nothing cooled), the
    one that ends first, with the best placement it closes: when and where the job may
    start by itself. None when no placement is closed by one (it waits for something
    else)."""
    closing = [
        (c.until, rank, c.where, c, p)
        for rank, p in enumerate(placements)
        if p.market == "spot"
        for c in cooling
        if c.covers(p.cloud, p.region, p.zone, p.instance_type)
    ]
    if not closing:
        return None
    *_, wait, placement = min(closing, key=lambda row: row[:3])
    return wait, placement


def cooling_reason(wait: Cooling) -> str:
    """`cooling down until 2026-11-01T03:10:00Z (aws/us-east-1/p5.48xlarge)`."""
    return f"cooling down until {wait.until.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} ({wait.where})"


# `adjust_index`'s signature: the controller plans through one (the simulator's remembers)
Adjuster = Callable[
    ["OfferIndex", "StateStore", datetime, float, "list[Reclaim] | None"], "OfferIndex"
]


def adjust_index(
    index: OfferIndex,
    store: StateStore,
    now: datetime,
    cooldown_scale: float = 1.0,
    reclaims: list[Reclaim] | None = None,
) -> OfferIndex:
    """`index` with spot closed where it is cooling down (`cooldown_scale` x the
    cool-down) and learned interruption rates applied (`broker.learned_rates`); the same
    index when no spot ran lately (the common case). `reclaims`: `recent_reclaims`, when
    read already."""
    from broker.learned_rates import evidence, store_runs, with_learned_rates

    reclaims = recent_reclaims(store, now) if reclaims is None else reclaims
    seen = evidence(store_runs(store, now))
    if not seen and not reclaims:
        return index
    from pricing.query import OfferIndex

    cooling = cooling_places(reclaims, now, cooldown_scale)
    places = tuple((c.cloud, c.region, c.zone, c.instance_type) for c in cooling)
    table = with_learned_rates(_spot_closed(index.offers, places), seen)
    return OfferIndex(table, extra_countries=index.extra_countries)


_closed_last: list[tuple[OfferTable, tuple, OfferTable]] = []  # `_spot_closed`'s last answer


def _spot_closed(table: OfferTable, places: tuple[tuple[str, str, str, str], ...]) -> OfferTable:
    """`table` with spot not sold at `places` (cloud, region, zone, instance type), as
    `restrict_offers` closes them; the last answer kept (a table is not changed once
    made): the passes and questions of one moment, and the moments until a cool-down
    starts or ends, close the same places on the same table."""
    if not places:
        return table
    if _closed_last and _closed_last[0][0] is table and _closed_last[0][1] == places:
        return _closed_last[0][2]
    from providers.cloud import Unavailable, restrict_offers

    closed = table
    for cloud in sorted({p[0] for p in places}):
        shut = [Unavailable(*p, "spot", REASON) for p in places if p[0] == cloud]
        closed, _ = restrict_offers(closed, cloud, shut)
    _closed_last[:] = [(table, places, closed)]
    return closed


def checkpoint_place(store: StateStore, job: Job) -> Place | None:
    """Where the job's checkpoint lives now: the place of its last attempt that ran."""
    from pricing.regions import Place

    ran = [a for a in store.attempts(job.id) if a.running_at is not None]
    if not ran:
        return None
    p = ran[-1].placed_on
    return Place(p.cloud, p.region)


def with_checkpoint_at(spec: JobSpec, place: Place | None, moves_with_job: bool = True) -> JobSpec:
    """`spec` as the planner must price it, `place` being where the job last ran (None:
    nowhere yet). A checkpoint that moves with the job (a provider keeping a store per
    place) lies there; one in the manifest's bucket stays there, and is saved once the
    job ran (docs/planner.md, "Checkpoint egress")."""
    if place is None or spec.checkpoint is None:
        return spec
    key = (id(spec), place, moves_with_job)
    known = _priced.get(key)
    if known is not None and known[0] is spec:
        return known[1]
    if moves_with_job:
        ckpt = replace(spec.checkpoint, location=place, moves_with_job=True, saved=True)
    else:
        ckpt = replace(spec.checkpoint, saved=True)
    priced = replace(spec, checkpoint=ckpt)
    if len(_priced) >= PRICED_KEPT:
        _priced.clear()
    _priced[key] = (spec, priced)
    return priced


# `with_checkpoint_at`'s answers by the spec's identity (held, so no other spec takes its
# id while kept): every pass asks it of each queued job's manifest, decoded once
PRICED_KEPT = 256
_priced: dict[tuple[int, Place, bool], tuple[JobSpec, JobSpec]] = {}
