"""The offers table: its columns, their types, and the row type `Offer`.

Every catalog (bundled snapshot, imported SkyPilot files, on-prem pools, live
refresh) produces a DataFrame with exactly these columns so that one set of
vectorised queries serves them all. A price that is not known is missing
(NaN), never 0: an offer without a price for the asked market is not feasible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported lazily: `broker --help` must not load it
    import pandas as pd

CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure", "onprem")

# (column, dtype) in table order. Strings are pandas' "string" dtype.
OFFER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("cloud", "string"),
    ("region", "string"),
    ("zone", "string"),  # empty string when the price is per region (Azure, snapshot rows)
    ("instance_type", "string"),
    ("accelerator", "string"),  # canonical GPU name; empty for CPU-only offers
    ("accelerator_count", "float64"),  # fractional for shared GPUs (g6f, NVads A10 v5)
    ("accelerator_memory_gib", "float64"),  # per GPU
    ("vcpus", "float64"),
    ("memory_gib", "float64"),
    ("interconnect", "string"),  # "", "nvlink", "infiniband", "efa", or "+"-joined
    ("price_on_demand", "float64"),  # USD per hour for the whole instance; NaN = not sold
    ("price_spot", "float64"),  # USD per hour; NaN = no spot market
    ("spot_interruption_rate", "float64"),  # expected interruptions per hour; NaN = unknown
    ("capacity", "float64"),  # instances (on-prem: GPUs free / GPUs per node); NaN = unknown
    ("source", "string"),  # where the prices come from (URL or importer name)
    ("as_of", "string"),  # ISO date the prices were read
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in OFFER_COLUMNS)
STRING_COLUMNS: tuple[str, ...] = tuple(n for n, t in OFFER_COLUMNS if t == "string")
FLOAT_COLUMNS: tuple[str, ...] = tuple(n for n, t in OFFER_COLUMNS if t == "float64")
INTERCONNECTS: tuple[str, ...] = ("nvlink", "infiniband", "efa")


class SchemaError(ValueError):
    """A catalog table does not have the offers schema."""


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


def empty_offers() -> pd.DataFrame:
    """A table with the offers columns and no rows."""
    import pandas as pd

    return conform(pd.DataFrame({name: [] for name in COLUMN_NAMES}))


def conform(frame: pd.DataFrame) -> pd.DataFrame:
    """Return `frame` with exactly the offers columns, in order, with their dtypes.

    Missing string cells become "", missing numbers stay NaN. Raises SchemaError
    naming the columns that are absent, so an importer bug is caught at once.
    """
    import pandas as pd

    missing = [name for name in COLUMN_NAMES if name not in frame.columns]
    if missing:
        raise SchemaError(f"offers table lacks columns: {', '.join(missing)}")
    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for name, dtype in OFFER_COLUMNS:
        column = frame[name].reset_index(drop=True)
        if dtype == "string":
            out[name] = column.astype("string").fillna("")
        else:
            out[name] = pd.to_numeric(column, errors="raise").astype("float64")
    check_values(out["cloud"].unique(), out["price_on_demand"], out["price_spot"])
    return out


def check_values(clouds: Iterable[str], price_on_demand: Any, price_spot: Any) -> None:
    """Raise SchemaError for a cloud we do not know or a price that is 0 or negative.

    Prices are arrays (NaN = not sold); a comparison with NaN is False, so
    missing prices pass and only real non-positive numbers are caught.
    """
    bad = sorted(set(clouds) - set(CLOUDS))
    if bad:
        raise SchemaError(f"unknown cloud(s) in offers table: {', '.join(map(str, bad))}")
    for name, prices in (("price_on_demand", price_on_demand), ("price_spot", price_spot)):
        if (prices <= 0).any():
            raise SchemaError(f"{name} must be positive or missing, never 0")
