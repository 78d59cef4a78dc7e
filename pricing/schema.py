"""The offers table: its columns and their types (the row type `Offer` is in
`pricing.offer`: a plan, which handles whole columns, does not build that class).

Every catalog (bundled snapshot, imported SkyPilot files, on-prem pools, live
refresh) produces a DataFrame with exactly these columns so that one set of
vectorised queries serves them all. A price that is not known is missing
(NaN), never 0: an offer without a price for the asked market is not feasible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported lazily: `broker --help` must not load it
    from datetime import date

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
    numbers = {name: out[name].to_numpy() for name in FLOAT_COLUMNS}
    codes, categories = {}, {}
    for name in ("cloud", "as_of"):
        codes[name], categories[name] = pd.factorize(out[name])
    error = first_bad_cell(numbers, codes, categories)
    if error is not None:
        raise error
    return out


class RowError(SchemaError):
    """A cell of the offers table that is not a sane value; `row` is 0-based."""

    def __init__(self, row: int, column: str, message: str) -> None:
        super().__init__(f"row {row + 1}: {column}: {message}")
        self.row, self.column, self.message = row, column, message


def _bounds() -> dict[str, tuple[float, float, bool]]:
    """column -> (lowest, highest, whether the lowest itself is refused): pricing.userio.bounds."""
    from pricing.userio import bounds

    return {
        "accelerator_count": (0.0, bounds.MAX_GPUS_PER_NODE, False),
        "accelerator_memory_gib": (0.0, bounds.MAX_MEMORY_GIB, False),
        "vcpus": (0.0, bounds.MAX_VCPUS, False),
        "memory_gib": (0.0, bounds.MAX_MEMORY_GIB, False),
        "price_on_demand": (0.0, bounds.MAX_PRICE_PER_HOUR, True),
        "price_spot": (0.0, bounds.MAX_PRICE_PER_HOUR, True),
        "spot_interruption_rate": (0.0, bounds.MAX_RATE_PER_HOUR, False),
        "capacity": (0.0, bounds.MAX_COUNT, False),
    }


def first_bad_cell(numbers: Any, codes: Any, categories: Any) -> RowError | None:
    """The first row (in table order) with a value that is not sane, as a RowError; None
    when every cell is. Numbers must be missing (NaN) or finite within the bounds of
    `pricing.userio.bounds` (prices above 0: a price is never 0, and `inf` is no price);
    `cloud` must be one we know; `as_of` empty or an ISO date (2026-05-20)."""
    import numpy as np

    found: list[RowError] = []
    for name, (low, high, open_low) in _bounds().items():
        values = np.asarray(numbers[name], dtype=np.float64)
        above = values > low if open_low else values >= low
        bad = np.flatnonzero(~(np.isnan(values) | (above & (values <= high))))
        if bad.size:
            value = float(values[bad[0]])
            if name.startswith("price") and value <= 0:
                message = "must be positive or missing, never 0"
            else:
                message = f"{value:g} is not a sane value (from {low:g} to {high:g}, or empty)"
            found.append(RowError(int(bad[0]), name, message))
    from pricing.userio.bounds import EARLIEST_PRICE_DAY
    for name, sane, what in (
        ("cloud", lambda v: v in CLOUDS, f"unknown cloud (one of {', '.join(CLOUDS)})"),
        ("as_of", _iso_date_or_empty, "not an ISO date such as 2026-05-20"),
        (
            "as_of",
            lambda v: _read_since(v, EARLIEST_PRICE_DAY),
            f"not a day prices were read (none before {EARLIEST_PRICE_DAY})",
        ),
    ):
        wrong = [i for i, value in enumerate(categories[name]) if not sane(value)]
        if wrong:
            row = int(np.flatnonzero(np.isin(codes[name], wrong))[0])
            value = categories[name][codes[name][row]]
            found.append(RowError(row, name, f"{value!r}: {what}"))
    return min(found, key=lambda error: error.row) if found else None


def _iso_date_or_empty(value: str) -> bool:
    from datetime import date

    if not value:
        return True
    try:
        date.fromisoformat(value[:10])
    except ValueError:
        return False
    return len(value) == 10 or value[10] in "T "


def _read_since(value: str, earliest: date) -> bool:
    """An empty or malformed `as_of` passes here (`_iso_date_or_empty` names it). No
    upper bound: a refresh stamps rows with its (injectable) clock, which the readers
    of a catalog do not know."""
    from datetime import date

    try:
        day = date.fromisoformat(value[:10])
    except ValueError:
        return True
    return earliest <= day
