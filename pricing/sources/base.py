"""What every live price source shares: the offers it returns and what it is given.

A source module (`aws`, `azure`, `gcp`) turns one cloud's price API into
`PricedOffer`s: a place, an instance type, its `Shape` and exact Decimal prices
per market (None: not sold or not known). `Fetched` carries them with notes for
the user (sizes skipped, duplicates) and anything else worth keeping (the AWS spot
history summary). `Context` is what a source may use: HTTP with bounded retries,
the region filter, the clock, the shapes the catalog already knows, and a
progress callback. Sources never print and never touch files.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from pricing.families import interconnect_for
from pricing.sources.fetch import Http
from pricing.sources.shapes import Shape
from pricing.sources.units import usd_per_hour

MARKETS: tuple[str, ...] = ("on-demand", "spot")


@dataclass(frozen=True, slots=True)
class PricedOffer:
    """One offer as a source read it; prices are USD per hour for the whole instance."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    shape: Shape
    on_demand: Decimal | None
    spot: Decimal | None

    def row(self, source: str, as_of: str) -> dict[str, Any]:
        """The offers-table row (float64 prices through `units.usd_per_hour`)."""
        shape = self.shape
        has_gpu = bool(shape.accelerator) and shape.accelerator_count > 0
        return {
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "accelerator": shape.accelerator if has_gpu else "",
            "accelerator_count": float(shape.accelerator_count) if has_gpu else 0.0,
            "accelerator_memory_gib": shape.accelerator_memory_gib if has_gpu else float("nan"),
            "vcpus": float(shape.vcpus),
            "memory_gib": float(shape.memory_gib),
            "interconnect": interconnect_for(self.cloud, self.instance_type),
            "price_on_demand": usd_per_hour(self.on_demand),
            "price_spot": usd_per_hour(self.spot),
            "spot_interruption_rate": float("nan"),
            "capacity": float("nan"),
            "source": source,
            "as_of": as_of,
        }


@dataclass
class Fetched:
    """A source's answer: offers, notes for the user, and extras (e.g. spot history)."""

    offers: list[PricedOffer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # The regions the source read (None: every region the --region filter lets through).
    # Its previous rows there, of the types it priced, are replaced by what it found.
    regions: frozenset[str] | None = None


def no_progress(message: str) -> None:
    """The progress callback of a caller that shows none."""


@dataclass(frozen=True)
class Context:
    """What a source may use (see the module docstring)."""

    http: Http
    now: datetime
    regions: tuple[str, ...] = ()  # names or globs ("us-*"); empty: every region
    shapes: Mapping[str, Mapping[str, Shape]] = field(default_factory=dict)  # cloud -> type
    known_regions: Mapping[str, Sequence[str]] = field(default_factory=dict)  # in the catalog
    progress: Callable[[str], None] = no_progress

    def wants(self, region: str) -> bool:
        """Whether `region` passes the --region filter."""
        return not self.regions or any(fnmatch.fnmatchcase(region, p) for p in self.regions)

    def exact_regions(self) -> tuple[str, ...] | None:
        """The filter as plain names, or None when it is empty or has a glob."""
        if not self.regions or any(set(p) & set("*?[") for p in self.regions):
            return None
        return self.regions


def skipped_note(kind: str, names: set[str], limit: int = 8) -> list[str]:
    """A note naming priced `kind`s that were left out because their shape is unknown."""
    if not names:
        return []
    shown = ", ".join(sorted(names)[:limit]) + (", ..." if len(names) > limit else "")
    return [f"{len(names)} priced {kind}(s) without known GPU facts were left out: {shown}"]
