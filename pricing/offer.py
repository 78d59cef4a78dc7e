"""`Offer`: one row of the offers table, for code that handles one offer at a time.

The queries and the planner work on whole columns (`pricing.table.OfferTable`), so
this class lives apart from the schema they import (a frozen dataclass of 16 fields
costs ~1 ms to define, a twentieth of what `broker plan job.yaml` spends beyond
Python and numpy).
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.schema import COLUMN_NAMES, FLOAT_COLUMNS


@dataclass(frozen=True, slots=True)
class Offer:
    """One purchasable unit: a row of the offers table, for code that handles one."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: float
    accelerator_memory_gib: float
    vcpus: float
    memory_gib: float
    interconnect: str
    price_on_demand: float | None
    price_spot: float | None
    spot_interruption_rate: float | None
    capacity: float | None
    source: str
    as_of: str

    @classmethod
    def from_row(cls, row: dict) -> Offer:
        """Build from a table row, turning NaN into None."""
        values = {}
        for name in COLUMN_NAMES:
            value = row[name]
            if name in FLOAT_COLUMNS:
                value = None if value is None or value != value else float(value)
            else:
                value = "" if value is None or value != value else str(value)
            values[name] = value
        return cls(**values)
