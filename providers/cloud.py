"""What the three cloud adapters share: endpoint overrides, SDK calls with mapped errors
and bounded backoff, the capacity cool-down, a time-limited cache for capacity views, the
capacity view merged into the catalog, the rules every cloud launch and listing keeps, and
`check` results.

Nothing here imports a cloud SDK: each adapter imports its own, inside its package,
so that `broker --help` and a machine without an extra stay fast and working.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Generic, TypeVar

from pricing.userio.settings import resolve_text
from providers.errors import InsufficientCapacity, InvalidRequest, ProviderError, RateLimited

if TYPE_CHECKING:
    from pricing.table import OfferTable
    from providers.base import Clock, Instance, InterruptionNotice, LaunchRequest

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

# How long a (instance type, zone, market) that reported no capacity is skipped.
CAPACITY_COOLDOWN_SECONDS = 300.0
# Throttling: attempts and the ceiling of one pause (full jitter, AWS's advice).
BACKOFF_ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 8.0


def endpoint_override(cloud: str) -> str | None:
    """The private or test endpoint for `cloud` (the `aws_endpoint`, `gcp_endpoint`,
    `azure_endpoint`... settings: BROKER_AWS_ENDPOINT or broker.toml), or None for the
    cloud's public one."""
    return resolve_text(f"{cloud}_endpoint")


def with_backoff(
    call: Callable[[], T],
    *,
    attempts: int = BACKOFF_ATTEMPTS,
    base: float = BACKOFF_BASE_SECONDS,
    cap: float = BACKOFF_CAP_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, retried with capped exponential backoff and full jitter while it raises
    RateLimited; the last RateLimited propagates after `attempts` tries (bounded: a
    throttled cloud never hangs the controller)."""
    for attempt in range(attempts):
        try:
            return call()
        except RateLimited:
            if attempt == attempts - 1:
                raise
            sleep(random.uniform(0, min(cap, base * 2**attempt)))
    raise AssertionError("unreachable")


def sdk_call(
    call: Callable[[], T],
    kinds: type[BaseException] | tuple[type[BaseException], ...],
    to_error: Callable[[BaseException, str], ProviderError],
    action: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, its SDK's exceptions (`kinds`) raised as `to_error(exc, action)` (the
    adapter's map onto providers.errors) and throttling retried by `with_backoff`.

    The SDK's exception is not chained (`from None`): its message may quote a secret.
    Anything else, a ProviderError included, passes through as it is.
    """

    def once() -> T:
        try:
            return call()
        except kinds as exc:
            raise to_error(exc, action) from None

    return with_backoff(once, sleep=sleep)


class WallClock:
    """The real time in UTC: the clock of an adapter that is given none."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class Expiring(Generic[K, T]):
    """Values made once and reused for `seconds` on `clock`, then made again: a capacity
    view costs several calls per region, and a plan asks for offers often.

    A value is stamped with the time before it was made; it is made outside the lock
    (it calls the cloud), so two threads may both make one, and the later one is kept.
    """

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self._kept: dict[K, tuple[datetime, T]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], T]) -> T:
        """The value kept for `key` while it is younger than `seconds`, else `make()`."""
        now = self.clock.now()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and (now - kept[0]).total_seconds() < self.seconds:
            return kept[1]
        value = make()
        with self._lock:
            self._kept[key] = (now, value)
        return value


class CapacityCooldown:
    """(instance type, zone or region, market) places that just reported no capacity,
    skipped until their cool-down ends so that failover moves on at once."""

    def __init__(self, clock: Clock | None = None, seconds: float = CAPACITY_COOLDOWN_SECONDS):
        self.clock = clock or WallClock()
        self.seconds = seconds
        self._until: dict[tuple[str, str, str], datetime] = {}
        self._lock = threading.Lock()

    def mark(self, instance_type: str, place: str, market: str) -> None:
        """Record a capacity failure now."""
        with self._lock:
            self._until[(instance_type, place, market)] = self.clock.now() + timedelta(
                seconds=self.seconds
            )

    def cooling(self, instance_type: str, place: str, market: str) -> bool:
        """True while that place is in its cool-down."""
        with self._lock:
            until = self._until.get((instance_type, place, market))
            return until is not None and self.clock.now() < until

    def active(self) -> list[tuple[str, str, str]]:
        """Every place still cooling down."""
        now = self.clock.now()
        with self._lock:
            return sorted(key for key, until in self._until.items() if now < until)


def cooling_down(cloud: str, request: LaunchRequest, where: str) -> InsufficientCapacity:
    """The error of a launch refused because `where` (a zone or region, or several) is
    cooling down after a capacity failure of the request's type and market."""
    return InsufficientCapacity(
        cloud,
        f"{request.instance_type} ({request.market}) in {where} is cooling down "
        "after a capacity failure",
        code="cooldown",
    )


def refuse_unsupported(cloud: str, request: LaunchRequest, gangs: bool = False) -> None:
    """InvalidRequest for what no cloud adapter launches: another cloud's request, or
    more than one node on an adapter without gangs (`gangs`: providers.cloudgang)."""
    if request.cloud != cloud:
        raise InvalidRequest(cloud, f"request for cloud {request.cloud!r}, not {cloud}")
    if request.nodes > 1 and not gangs:
        raise InvalidRequest(cloud, f"multi-node launches on {cloud} are not supported yet")


def refuse_other_request(
    cloud: str, attempt_id: str, launched_for: str | None, digest: str
) -> None:
    """InvalidRequest when the attempt's instance was launched for another request than
    the one asked now: `launched_for` is its broker-request tag, `digest` the request's
    `request_hash` (the contract's "the same attempt id with a different request")."""
    if launched_for != digest:
        raise InvalidRequest(cloud, f"attempt {attempt_id} was launched with another request")


_NEVER = datetime.min.replace(tzinfo=UTC)


def launch_order(instance: Instance) -> tuple[datetime, str]:
    """How list_instances() sorts: by launch time (unknown first), then by id."""
    return instance.launched_at or _NEVER, instance.id


class ReportedOnce:
    """The instance ids whose interruption notice a provider object has returned, so that
    each notice is reported once per object (the `interruptions()` contract)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, instance_id: object) -> bool:
        with self._lock:
            return instance_id in self._ids

    def fresh(self, notices: Iterable[InterruptionNotice]) -> list[InterruptionNotice]:
        """The notices whose instance was not reported yet, by (noticed_at, instance id);
        from now on they count as reported."""
        with self._lock:
            new = [n for n in notices if n.instance_id not in self._ids]
            self._ids.update(n.instance_id for n in new)
        return sorted(new, key=lambda n: (n.noticed_at, n.instance_id))


@dataclass(frozen=True)
class Unavailable:
    """An offer the account cannot launch now, and why (shown by `broker check --offers`).

    `zone` "" means the whole region (adapters say so when no zone of the region
    offers the type); `market` "" means both markets.
    """

    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    reason: str


@dataclass(frozen=True)
class Headroom:
    """Free quota, in the unit the cloud counts (vCPUs, GPUs or instances), that offers
    matching `applies` draw on. `market` "" when both markets share it."""

    region: str
    market: str
    name: str  # the cloud's quota name, for the reason shown to humans
    free: float
    unit: str  # "vcpus" | "gpus" | "instances"
    applies: Callable[[str], bool]  # instance type -> does this quota count it

    def instances(self, vcpus: float, gpus: float) -> float:
        """How many instances of that size still fit."""
        need = {"vcpus": vcpus, "gpus": gpus, "instances": 1.0}[self.unit]
        if not need or need != need:
            return math.inf
        return math.floor(self.free / need + 1e-9)


def restrict_offers(
    table: OfferTable,
    cloud: str,
    unavailable: Iterable[Unavailable] = (),
    headroom: Iterable[Headroom] = (),
) -> tuple[OfferTable, list[Unavailable]]:
    """`table` as this account can buy it: rows of `cloud` listed as unavailable, or
    whose quota cannot fit one instance, lose that market's price (NaN: not sold);
    `capacity` becomes at most the instances quota still allows in the market with
    the most room (the planner picks the market; capacity is per row). Other clouds' rows are kept
    as they are. Returns the new table and every reason (given and from quotas)."""
    import numpy as np

    from pricing.table import OfferTable

    numbers = dict(table.numbers)  # the columns written below are copies, the rest shared
    for name in ("price_spot", "price_on_demand", "capacity"):
        numbers[name] = numbers[name].copy()
    text = {name: table.text(name) for name in ("cloud", "region", "zone", "instance_type")}
    mine = text["cloud"] == cloud
    reasons = list(unavailable)
    market_column = {"spot": "price_spot", "on-demand": "price_on_demand"}
    for item in reasons:
        rows = (
            mine & (text["region"] == item.region) & (text["instance_type"] == item.instance_type)
        )
        if item.zone:  # a region-wide row stays sold while another zone offers it
            rows &= text["zone"] == item.zone
        for market in (item.market,) if item.market else tuple(market_column):
            numbers[market_column[market]][rows] = np.nan
    # Instances each market's quotas still allow, per row (inf: no quota applies).
    fits = {market: np.full(len(table), np.inf) for market in market_column}
    quota_reasons: list[Unavailable] = []
    for rule in headroom:
        rows = np.flatnonzero(mine & (text["region"] == rule.region))
        for row in rows:
            instance_type = str(text["instance_type"][row])
            if not rule.applies(instance_type):
                continue
            room = rule.instances(numbers["vcpus"][row], numbers["accelerator_count"][row])
            markets = (rule.market,) if rule.market else tuple(market_column)
            for market in markets:
                fits[market][row] = min(fits[market][row], room)
            if room < 1:
                quota_reasons.append(
                    Unavailable(
                        cloud,
                        rule.region,
                        str(text["zone"][row]),
                        instance_type,
                        rule.market,
                        f"quota {rule.name}: {rule.free:g} {rule.unit} free",
                    )
                )
    room = np.full(len(table), -np.inf)
    for market, column in market_column.items():
        numbers[column][fits[market] < 1] = np.nan
        sold = ~np.isnan(numbers[column])
        room[sold] = np.maximum(room[sold], fits[market][sold])
    limited = mine & np.isfinite(room)
    capacity = numbers["capacity"]
    capacity[limited] = np.fmin(capacity[limited], room[limited])  # fmin: NaN = unknown
    unsold = mine & np.isnan(numbers["price_spot"]) & np.isnan(numbers["price_on_demand"])
    numbers["capacity"][unsold] = 0.0
    return OfferTable(numbers, table.codes, table.categories), reasons + sorted(
        set(quota_reasons), key=lambda u: (u.region, u.zone, u.instance_type, u.market)
    )


def catalog_regions(catalog: OfferTable | None, cloud: str) -> tuple[str, ...]:
    """The regions where the catalog sells `cloud`, sorted (an adapter's default regions)."""
    if catalog is None:
        return ()
    return tuple(sorted(set(catalog.text("region")[catalog.text("cloud") == cloud].tolist())))


def catalog_rows(catalog: OfferTable | None, cloud: str, regions: Sequence[str]) -> OfferTable:
    """The catalog's rows of `cloud` in `regions` (every region when empty); an empty
    table without a catalog: what an adapter restricts into its offers."""
    import numpy as np

    from pricing.table import concat

    if catalog is None:
        return concat([])
    rows = catalog.text("cloud") == cloud
    if regions:
        rows &= np.isin(catalog.text("region"), list(regions))
    return catalog.take(np.flatnonzero(rows))


def cooling_unavailable(
    table: OfferTable, cloud: str, cooldown: CapacityCooldown
) -> list[Unavailable]:
    """The rows of `cloud` in places cooling down after a capacity failure, as
    unavailable offers: the planner moves on instead of asking the same place again."""
    import numpy as np

    active = cooldown.active()
    if not active:
        return []
    text = {name: table.text(name) for name in ("cloud", "region", "zone", "instance_type")}
    items = []
    for instance_type, place, market in active:
        rows = (text["cloud"] == cloud) & (text["instance_type"] == instance_type)
        rows &= (text["zone"] == place) | (text["region"] == place)
        for row in np.flatnonzero(rows):
            zone = str(text["zone"][row])
            items.append(
                Unavailable(
                    cloud,
                    str(text["region"][row]),
                    zone,
                    instance_type,
                    market,
                    "no capacity at the last launch: cooling down",
                )
            )
    return items


@dataclass(frozen=True)
class CheckResult:
    """Whether a cloud is usable from here, and if not, the one thing to fix."""

    cloud: str
    usable: bool
    reason: str  # "ok", or why not: no credentials, extra missing, unreachable, denied
    detail: str = ""  # account / project / subscription, endpoint; never a secret
    seconds: float = 0.0
