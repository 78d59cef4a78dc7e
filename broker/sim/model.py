"""The simulator's two input types: spot availability per place, and a job list.

Every trace format (broker.sim.traces) is normalised into these, so the engine and
the provider know one shape. Hours are floats from the scenario's origin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pricing.userio import bounds


@dataclass(frozen=True, slots=True)
class TracePlace:
    """Where spot capacity is counted: a cloud, a region or zone, a GPU or instance type."""

    cloud: str
    location: str  # a region ("us-east-1") or a zone ("us-east-1a")
    kind: str  # GPU model ("V100") or instance type ("p3.2xlarge")

    def __str__(self) -> str:
        return f"{self.cloud}/{self.location}/{self.kind}"


@dataclass(frozen=True, slots=True)
class Availability:
    """Available spot instances at one place, one count per step of `step_hours`;
    after the last step the last count holds. `prices`: spot USD/hour per step."""

    step_hours: float
    counts: tuple[int, ...]
    prices: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not (self.step_hours > 0 and math.isfinite(self.step_hours)):
            raise ValueError(f"step_hours must be positive, got {self.step_hours}")
        if not self.counts:
            raise ValueError("an availability trace needs at least one step")
        if self.step_hours > bounds.MAX_HOURS:
            raise ValueError(f"step_hours must be at most {bounds.MAX_HOURS:g}")
        if any(not 0 <= c <= bounds.MAX_NODES for c in self.counts):
            raise ValueError(f"available counts must be from 0 to {bounds.MAX_NODES}")
        if self.prices is not None and len(self.prices) != len(self.counts):
            raise ValueError("prices must have one value per step")
        if self.prices is not None and any(
            not 0 < p <= bounds.MAX_PRICE_PER_HOUR for p in self.prices
        ):
            raise ValueError(f"prices must be above 0 and at most {bounds.MAX_PRICE_PER_HOUR:g}")

    def index(self, hours: float) -> int:
        return min(max(0, int(math.floor(hours / self.step_hours + 1e-9))), len(self.counts) - 1)

    def count_at(self, hours: float) -> int:
        return self.counts[self.index(hours)]

    def price_at(self, hours: float) -> float | None:
        return None if self.prices is None else self.prices[self.index(hours)]

    @property
    def hours(self) -> float:
        return self.step_hours * len(self.counts)

    def changes(self) -> list[float]:
        """Hours at which the count or the price changes (step boundaries only)."""
        out = []
        for i in range(1, len(self.counts)):
            moved = self.counts[i] != self.counts[i - 1]
            if self.prices is not None and self.prices[i] != self.prices[i - 1]:
                moved = True
            if moved:
                out.append(i * self.step_hours)
        return out

    def window(self, start_hours: float, hours: float) -> Availability:
        """The part of the trace from `start_hours`, `hours` long (re-based to 0)."""
        first = self.index(start_hours)
        last = min(len(self.counts), first + max(1, math.ceil(hours / self.step_hours)))
        prices = None if self.prices is None else self.prices[first:last]
        return Availability(self.step_hours, self.counts[first:last], prices)

    def cycled(self, hours: float) -> Availability:
        """The trace repeated end to end until it covers `hours` (a short trace replayed
        under a long job list; each repeat is the same real pattern)."""
        times = max(1, math.ceil(hours / self.hours - 1e-9))
        prices = None if self.prices is None else self.prices * times
        return Availability(self.step_hours, self.counts * times, prices)


@dataclass(frozen=True)
class SpotTrace:
    """Spot availability for a set of places (one `Availability` each)."""

    places: Mapping[TracePlace, Availability]
    source: str = ""

    def merged(self, other: SpotTrace) -> SpotTrace:
        return SpotTrace(
            {**self.places, **other.places}, ", ".join(filter(None, (self.source, other.source)))
        )

    def cycled(self, hours: float) -> SpotTrace:
        return SpotTrace({p: a.cycled(hours) for p, a in self.places.items()}, self.source)

    def window(self, start_hours: float, hours: float) -> SpotTrace:
        return SpotTrace(
            {p: a.window(start_hours, hours) for p, a in self.places.items()}, self.source
        )


def _optional(value: float | None, low: float, high: float) -> bool:
    """None, or a number above `low` and at most `high` (NaN is neither)."""
    return value is None or low < value <= high


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a job list. `hours` is the work at on-demand speed on `gpu`;
    `deadline_hours` is relative to submission (None: no deadline)."""

    name: str
    team: str
    submit_hours: float
    gpu: str
    gpus: int
    hours: float
    deadline_hours: float | None = None
    checkpoint_minutes: float | None = 30.0  # None: the job never checkpoints
    checkpoint_gb: float = 0.0
    priority: int = 0

    def __post_init__(self) -> None:
        """Every number finite and within `pricing.userio.bounds`: a trace is user input."""
        most_gpus = bounds.MAX_NODES * bounds.MAX_GPUS_PER_NODE
        checks = (
            ("hours", self.hours, 0 < self.hours <= bounds.MAX_HOURS),
            ("gpus", self.gpus, 1 <= self.gpus <= most_gpus),
            ("submit_hours", self.submit_hours, 0 <= self.submit_hours <= 10 * bounds.MAX_HOURS),
            (
                "deadline_hours",
                self.deadline_hours,
                _optional(self.deadline_hours, 0, bounds.MAX_HOURS),
            ),
            (
                "checkpoint_minutes",
                self.checkpoint_minutes,
                _optional(self.checkpoint_minutes, 0, bounds.MAX_HOURS * 60),
            ),
            ("checkpoint_gb", self.checkpoint_gb, 0 <= self.checkpoint_gb <= bounds.MAX_SIZE_GB),
            ("priority", self.priority, abs(self.priority) <= bounds.MAX_PRIORITY),
        )
        for name, value, sane in checks:
            if not sane:
                raise ValueError(f"job {self.name}: {name} {value!r} is not a sane value")


@dataclass(frozen=True)
class JobList:
    jobs: Sequence[SimJob]
    source: str = ""
    notes: tuple[str, ...] = field(default=())
