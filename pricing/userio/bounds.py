"""The sane bounds of the numbers a user writes, in one place.

A number in a user's file must be finite (no `.inf`, no `.nan`) and inside these
bounds, so that nothing that validates can overflow, hang or cost `inf` later:
`count: 1000000000000` in a pool would build a trillion nodes, a catalog price of
`inf` would make every plan cost `inf`, a deadline of `99999999d` would overflow the
planner's date arithmetic. The bounds are far above anything real (the largest cloud
instance costs about 100 USD an hour; the largest GPU node holds 16 GPUs) and far below
anything that breaks arithmetic. Each reader (manifest, pools, overlays, policy,
catalog) uses these names, so the limits are the same everywhere and documented once
(docs/manifest.md, "Limits").
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

MAX_PRICE_PER_HOUR = 100_000.0  # USD per instance- or node-hour
MAX_MONEY = 1_000_000_000.0  # USD: a budget, a cap, a cost
MAX_NODES = 100_000  # nodes of a pool, of a job, instances of an offer
MAX_GPUS_PER_NODE = 1_024  # GPUs (or GPU slices) of one node
MAX_VCPUS = 100_000  # vCPUs of one node or asked by one job
MAX_MEMORY_GIB = 1_000_000.0  # GiB of one node or asked by one job
MAX_HOURS = 87_660.0  # ten years: a runtime estimate, a deadline, an interval
MAX_SIZE_GB = 10_000_000.0  # 10 PB: a checkpoint, a data input
MAX_RATE_PER_HOUR = 1_000.0  # interruptions per hour
MAX_PRIORITY = 1_000_000  # |priority| of a job, a weight, a share
MAX_COUNT = 1_000_000  # any other count (restarts, jobs of a quota)
EARLIEST_PRICE_DAY = date(2000, 1, 1)  # before any GPU was rented by the hour


def latest_price_day(today: date | None = None) -> date:
    """The last day a price can have been read: tomorrow (UTC; a day's grace for time
    zones). A price "read" in the future would stay fresh for ever."""
    return (today or datetime.now(UTC).date()) + timedelta(days=1)


def finite_in(value: float, low: float, high: float) -> bool:
    """Whether `value` is a finite number within [low, high] (NaN is not)."""
    return low <= value <= high
