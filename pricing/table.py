"""`OfferTable`: the offers table as numpy columns, the form every query runs on.

Why not only a DataFrame: importing pandas costs ~0.6 s on our machines, more
than the whole budget of `broker offers` or `broker plan`. So the query and
planning paths run on numpy arrays: numbers as float64, text as integer codes
into a small array of distinct values (what pandas calls a categorical). A
DataFrame is one call away (`to_frame`, `from_frame`) for the importers and
reports that want pandas, and a compiled table is cached next to the user's
other caches so that a catalog CSV is parsed once (see pricing.catalog).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pricing.schema import COLUMN_NAMES, FLOAT_COLUMNS, STRING_COLUMNS, first_bad_cell
from pricing.userio.atomic import atomic_write

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

TABLE_FORMAT = 3  # bump when the cached layout changes
_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def import_numpy() -> None:
    """Import numpy with its OpenBLAS on one thread, unless numpy is loaded already or
    the user chose a thread count.

    OpenBLAS starts a thread per core as it loads (~0.03 s of CPU, a sixth of a cold
    `broker plan job.yaml`), and the offers tables multiply no matrices. The variable is
    set for the import only: the processes the broker starts later (jobs on the sandbox
    and on local pools inherit its environment) keep their own default."""
    if "numpy" in sys.modules or _BLAS_THREADS in os.environ:
        return
    os.environ[_BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[_BLAS_THREADS]


@dataclass(frozen=True, eq=False)
class OfferTable:
    """Offers as columns: `numbers[name]` (float64), `codes[name]` into `categories[name]`."""

    numbers: Mapping[str, np.ndarray]
    codes: Mapping[str, np.ndarray]
    categories: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.numbers["price_on_demand"])

    def text(self, name: str) -> np.ndarray:
        """A text column decoded to an object array of str."""
        return self.categories[name][self.codes[name]]

    def column(self, name: str) -> np.ndarray:
        """Any column by name: numbers as float64, text as str objects."""
        return self.numbers[name] if name in self.numbers else self.text(name)

    def take(self, rows: np.ndarray) -> OfferTable:
        """The rows at `rows`, in that order."""
        return OfferTable(
            {n: v[rows] for n, v in self.numbers.items()},
            {n: c[rows] for n, c in self.codes.items()},
            self.categories,
        )

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts (NaN stays NaN), for rendering."""
        columns = {name: self.column(name).tolist() for name in COLUMN_NAMES}
        return [
            dict(zip(columns, values, strict=True))
            for values in zip(*columns.values(), strict=True)
        ]

    # --- conversions -------------------------------------------------------------------

    @classmethod
    def from_columns(cls, columns: Mapping[str, Sequence[Any]]) -> OfferTable:
        """Build from plain columns (lists or arrays) and check the values."""
        import numpy as np

        missing = [name for name in COLUMN_NAMES if name not in columns]
        if missing:
            from pricing.schema import SchemaError

            raise SchemaError(f"offers table lacks columns: {', '.join(missing)}")
        numbers = {n: np.asarray(columns[n], dtype=np.float64) for n in FLOAT_COLUMNS}
        codes, categories = {}, {}
        for name in STRING_COLUMNS:
            values = ["" if v is None or v != v else str(v) for v in columns[name]]
            categories[name], codes[name] = _factorize(values)
        table = cls(numbers, codes, categories)
        table.check()
        return table

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> OfferTable:
        """Build from a DataFrame with the offers schema (see pricing.schema.conform)."""
        import numpy as np
        import pandas as pd

        from pricing.schema import conform

        frame = conform(frame)
        numbers = {n: frame[n].to_numpy(dtype=np.float64) for n in FLOAT_COLUMNS}
        codes, categories = {}, {}
        for name in STRING_COLUMNS:
            code, uniques = pd.factorize(frame[name], sort=True)
            codes[name] = code.astype(np.int32)
            categories[name] = np.asarray(uniques, dtype=object)
        return cls(numbers, codes, categories)

    def to_frame(self) -> pd.DataFrame:
        """The table as a DataFrame with the schema's dtypes."""
        import pandas as pd

        frame = pd.DataFrame({name: self.column(name) for name in COLUMN_NAMES})
        for name in STRING_COLUMNS:
            frame[name] = frame[name].astype("string")
        return frame

    def check(self) -> None:
        """Raise `pricing.schema.RowError` at the first cell that is not sane: an unknown
        cloud, a price that is 0, negative or above the bounds, a number that is not
        finite, an `as_of` that is no date (`pricing.schema.first_bad_cell`)."""
        error = first_bad_cell(self.numbers, self.codes, self.categories)
        if error is not None:
            raise error

    # --- persistence (the compiled-catalog cache) ---------------------------------------

    def save(self, path: Path) -> None:
        """Write atomically as one file of five `.npy` arrays one after another, no
        pickles: the format and a CRC-32 of the rest, then the numbers, the codes, every
        category and how many each column has. Not an `.npz`: reading a zip archive
        imports `zipfile` (with `shutil`, `bz2`, `lzma`: ~0.003 s of a cold
        `broker plan job.yaml`), and each array of one costs a header parse."""
        import io
        import zlib

        import numpy as np
        from numpy.lib.format import write_array

        arrays = (
            np.stack([self.numbers[n] for n in FLOAT_COLUMNS]).reshape(
                len(FLOAT_COLUMNS), len(self)
            ),
            np.stack([self.codes[n].astype(np.int32) for n in STRING_COLUMNS]).reshape(
                len(STRING_COLUMNS), len(self)
            ),
            np.concatenate([self.categories[n].astype(str) for n in STRING_COLUMNS]).astype(str),
            np.array([len(self.categories[n]) for n in STRING_COLUMNS]),
        )
        body = io.BytesIO()
        for array in arrays:
            write_array(body, array, allow_pickle=False)
        payload = body.getvalue()
        head = io.BytesIO()
        write_array(head, np.array([TABLE_FORMAT, zlib.crc32(payload)], dtype=np.int64))
        data = head.getvalue() + payload
        atomic_write(path, lambda handle: handle.write(data), binary=True, durable=False)

    @classmethod
    def load(cls, path: Path | BinaryIO) -> OfferTable | None:
        """Read a table written by `save`; None when it is of another format. A file cut
        short or changed since (its CRC no longer matches) raises ValueError."""
        import io
        import zlib

        import numpy as np
        from numpy.lib.format import read_array

        handle = open(path, "rb") if isinstance(path, str | os.PathLike) else path  # noqa: SIM115
        with handle:
            head = read_array(handle, allow_pickle=False)  # ValueError: not an .npy array
            if head.shape != (2,) or int(head[0]) != TABLE_FORMAT:
                return None
            payload = handle.read()
        if zlib.crc32(payload) != int(head[1]):
            raise ValueError("compiled catalog: CRC mismatch")
        body = io.BytesIO(payload)
        numbers, codes, names, counts = (read_array(body, allow_pickle=False) for _ in range(4))
        numbers = dict(zip(FLOAT_COLUMNS, numbers, strict=True))
        codes = dict(zip(STRING_COLUMNS, codes, strict=True))
        names = names.astype(object)
        ends = np.cumsum(counts).tolist()
        starts = [0, *ends[:-1]]
        categories = {
            name: names[start:end]
            for name, start, end in zip(STRING_COLUMNS, starts, ends, strict=True)
        }
        return cls(numbers, codes, categories)


def concat(tables: Iterable[OfferTable]) -> OfferTable:
    """Rows of several tables, one after another (categories merged)."""
    import numpy as np

    tables = [t for t in tables if len(t)]
    if len(tables) == 1:
        return tables[0]
    if not tables:
        return OfferTable.from_columns({name: [] for name in COLUMN_NAMES})
    numbers = {n: np.concatenate([t.numbers[n] for t in tables]) for n in FLOAT_COLUMNS}
    codes, categories = {}, {}
    for name in STRING_COLUMNS:
        merged = np.array(sorted(set().union(*(t.categories[name] for t in tables))), dtype=object)
        position = {value: i for i, value in enumerate(merged)}
        parts = []
        for table in tables:
            remap = np.array([position[v] for v in table.categories[name]], dtype=np.int32)
            parts.append(remap[table.codes[name]] if len(remap) else table.codes[name])
        codes[name], categories[name] = np.concatenate(parts), merged
    return OfferTable(numbers, codes, categories)


def _factorize(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and the code of each value (small inputs; no pandas)."""
    import numpy as np

    uniques = sorted(set(values))
    position = {value: i for i, value in enumerate(uniques)}
    return np.array(uniques, dtype=object), np.array([position[v] for v in values], np.int32)
