"""Loading and saving offer catalogs.

Which catalog is in force, in order: an explicit path (`--catalog`,
`BROKER_CATALOG`), else the user catalog (written by `broker pricing import`
or `refresh`) when it exists, else the snapshot bundled in this package.
Catalogs are written atomically (`pricing.userio.atomic`); a live refresh keeps its
per-source status beside the catalog (`status_path`).

A catalog is a CSV (the source of truth, readable and diffable). Reading one
compiles it to an `OfferTable` and caches that under the user cache directory,
keyed by the file's path, size and modification time, so later commands load
numpy arrays instead of parsing text (and need no pandas at all).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from pricing.schema import (
    COLUMN_NAMES,
    FLOAT_COLUMNS,
    STRING_COLUMNS,
    RowError,
    SchemaError,
    conform,
)
from pricing.table import TABLE_FORMAT, OfferTable
from pricing.userio.atomic import atomic_write
from pricing.userio.dirs import user_cache_dir, user_data_dir

if TYPE_CHECKING:
    import pandas as pd

BUNDLED_CATALOG = Path(__file__).parent / "data" / "offers.csv"


class Catalog(NamedTuple):
    """An offers table and where it came from."""

    offers: OfferTable
    origin: str  # "bundled", "user" or "file"
    path: Path

    def as_of_range(self) -> tuple[str, str]:
        """Oldest and newest as-of dates in the table ("" when empty)."""
        used = set(self.offers.codes["as_of"].tolist())
        dates = [d for i, d in enumerate(self.offers.categories["as_of"]) if i in used and d]
        return (min(dates), max(dates)) if dates else ("", "")

    def age_days(self, today: date) -> int | None:
        """Age in days of the oldest price, or None when no row has a date."""
        oldest, _ = self.as_of_range()
        return (today - date.fromisoformat(oldest[:10])).days if oldest else None


def user_catalog_path() -> Path:
    """The user catalog, which takes precedence over the bundled one while it exists."""
    return user_data_dir() / "offers.csv"


def status_path(catalog: Path) -> Path:
    """The refresh status beside a catalog: ``offers.csv`` -> ``offers.status.json``."""
    return catalog.with_name(f"{catalog.stem}.status.json")


def spot_history_path(catalog: Path) -> Path:
    """The 30-day spot price summary beside a catalog: ``offers.spot-history.csv``."""
    return catalog.with_name(f"{catalog.stem}.spot-history.csv")


def read_offers_csv(path: Path) -> pd.DataFrame:
    """Read an offers CSV written by `write_offers_csv` (or by hand) and check its schema.

    The file is read by `pricing.userio.reading` (a regular file within the catalog
    size cap, strict UTF-8); a bad cell is a SchemaError naming file, line and column.
    """
    import io

    import pandas as pd

    text = _catalog_text(path)
    dtypes = {name: "string" for name in STRING_COLUMNS} | {n: "float64" for n in FLOAT_COLUMNS}
    try:
        frame = pd.read_csv(
            io.StringIO(text),
            dtype=dtypes,
            keep_default_na=False,
            na_values={name: [""] for name in FLOAT_COLUMNS},
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise SchemaError(f"{path}: not an offers catalog: {exc}") from None
    try:
        return conform(frame)
    except RowError as exc:  # pandas keeps no line numbers: a row's line, as no cell spans two
        raise SchemaError(f"{path}:{exc.row + 2}: {exc.column}: {exc.message}") from None
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None


def _catalog_text(path: Path) -> str:
    from pricing.userio.errors import UserInputError
    from pricing.userio.reading import read_text

    try:
        return read_text(path, "catalog")
    except UserInputError as exc:
        raise SchemaError(str(exc)) from None


def write_offers_csv(offers: pd.DataFrame | OfferTable, path: Path) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    if isinstance(offers, OfferTable):
        offers = offers.to_frame()
    frame = conform(offers)
    atomic_write(path, lambda handle: frame.to_csv(handle, index=False, float_format="%.10g"))


SMALL_CSV_BYTES = 2_000_000  # below this, the csv module parses faster than pandas imports


def read_offer_table(path: Path) -> OfferTable:
    """The catalog at `path` as an OfferTable, from the compiled cache when it is current.

    A cache that cannot be read whole (truncated, corrupted, of another format) is
    rebuilt from the CSV: it is only ever a copy.
    """
    from pricing.table import import_numpy
    from pricing.userio.reading import check_regular

    import_numpy()  # first, with OpenBLAS on one thread
    cache = _cache_path(path)
    if cache is not None and cache.is_file():
        table = _load_cache(cache)
        if table is not None:
            return table
    try:
        size = check_regular(path).st_size
    except ValueError as exc:  # UserInputError: absent, a directory, a FIFO, a device
        raise SchemaError(str(exc)) from None
    if size < SMALL_CSV_BYTES:
        table = _read_small_csv(path)
    else:
        table = OfferTable.from_frame(read_offers_csv(path))
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            table.save(cache)
        except OSError:
            pass  # a read-only cache costs speed, never correctness
    return table


def _load_cache(cache: Path) -> OfferTable | None:
    """The compiled table, or None when it cannot be trusted whole (then it is rebuilt)."""
    import io

    from pricing.userio.reading import read_bytes

    try:
        table = OfferTable.load(io.BytesIO(read_bytes(cache, "catalog")))
        if table is not None:
            table.check()  # as the CSV was checked: a cache written by other code, or tampered
        return table
    except Exception:  # not an array, a bad CRC, a short array: it is only a copy
        return None


def _cache_path(path: Path) -> Path | None:
    import hashlib

    try:
        stat = path.stat()
    except OSError:
        return None
    key = f"{TABLE_FORMAT}:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:20]
    return user_cache_dir() / "catalogs" / f"{digest}.table"


def _read_small_csv(path: Path) -> OfferTable:
    """Parse a small catalog with the csv module (no pandas import), checking every cell;
    a bad one is a SchemaError naming file, line and column. A catalog whose rows are
    all plain (every row as long as the header, every number a number) is read a column
    at a time; any other goes through `_read_csv_rows`, which finds the line to name."""
    import csv
    import io
    import math

    text = _catalog_text(path)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:
        return _read_csv_rows(path, text)
    header = rows[0] if rows else []
    body = [row for row in rows[1:] if row]
    if any(name not in header for name in COLUMN_NAMES) or any(
        len(row) != len(header) for row in body
    ):
        return _read_csv_rows(path, text)
    cells = list(zip(*body, strict=True)) or [()] * len(header)
    columns: dict[str, list] = {}
    try:
        for name in COLUMN_NAMES:
            column = cells[header.index(name)]
            if name in FLOAT_COLUMNS:
                columns[name] = [float(cell) if cell else math.nan for cell in column]
            else:
                columns[name] = list(column)
        return OfferTable.from_columns(columns)
    except (ValueError, RowError, SchemaError):  # a cell that is no number, or not sane
        return _read_csv_rows(path, text)


def _read_csv_rows(path: Path, text: str) -> OfferTable:
    """`_read_small_csv` row by row, keeping the line each row starts on: the error of a
    catalog that is not plain names its file, line and column."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    missing = [name for name in COLUMN_NAMES if name not in header]
    if missing:
        raise SchemaError(f"{path}: offers table lacks columns: {', '.join(missing)}")
    where = [header.index(name) for name in COLUMN_NAMES]
    columns: dict[str, list] = {name: [] for name in COLUMN_NAMES}
    numeric = [name in FLOAT_COLUMNS for name in COLUMN_NAMES]
    lines: list[int] = []  # the line each row starts on (a quoted cell may span lines)
    start = reader.line_num + 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row:
                continue
            if len(row) != len(header):
                raise SchemaError(f"{path}:{line}: expected {len(header)} fields, got {len(row)}")
            lines.append(line)
            for name, index, is_number in zip(COLUMN_NAMES, where, numeric, strict=True):
                cell = row[index]
                if is_number:
                    try:
                        columns[name].append(float(cell) if cell else float("nan"))
                    except ValueError:
                        raise SchemaError(
                            f"{path}:{line}: {name}: not a number: {cell!r}"
                        ) from None
                else:
                    columns[name].append(cell)
    except csv.Error as exc:
        raise SchemaError(f"{path}:{reader.line_num}: not CSV: {exc}") from None
    try:
        return OfferTable.from_columns(columns)
    except RowError as exc:
        raise SchemaError(f"{path}:{lines[exc.row]}: {exc.column}: {exc.message}") from None
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None


def load_catalog(path: Path | None = None) -> Catalog:
    """Load the catalog in force (see module docstring)."""
    if path is None:
        user = user_catalog_path()
        path, origin = (user, "user") if user.exists() else (BUNDLED_CATALOG, "bundled")
    else:
        origin = "file"
    return Catalog(read_offer_table(path), origin, path)
