"""Import SkyPilot's price catalogs (CSV schema v8) into the offers table.

`import_skypilot(directory)` reads ``<directory>/<cloud>/vms.csv`` for aws, gcp
and azure, the files SkyPilot keeps under ``~/.sky/catalogs/v8/``, and returns
one table in the offers schema (`pricing.schema.conform`). Pure functions over
DataFrames, vectorised throughout; pandas is imported inside them.

What each cloud's file means and what becomes of it:

- **aws**: one row per (instance type, zone). ``Price`` is on-demand (per
  region), ``SpotPrice`` per zone. Zones stay AZ IDs (``use1-az1``) as given.
  GPU memory per GPU is ``GpuInfo.TotalGpuMemoryInMiB / AcceleratorCount`` (so
  a fractional g6f keeps the memory of a whole L4), else ``MemoryInfo.SizeInMiB``.
- **azure**: one row per (size, region); zone is "". A few sizes whose GPU the
  file names wrongly or not at all are corrected from `pricing.families`
  (NC H100 v5 -> H100-NVL, ND96is_MI300X_v5, ND GB200 v6). Sizes of the GPU
  families (``Standard_NC/ND/NV``) still without a known GPU (NV V710) are dropped
  rather than offered as CPU machines.
- **gcp**: host and GPUs are priced apart. A row with an ``InstanceType`` is the
  host only; a row with an empty ``InstanceType`` and an ``AcceleratorName`` is
  the price of that many GPUs in that zone. Offers are built per zone, on-demand
  and spot separately (a market is missing when either part lacks it):

  * fixed GPU machine types (a2, a3, a4, g2; see `_GCP_FIXED`) = host row + the
    accelerator row of their GPU and count in the same zone; a type without such
    a row in a zone is dropped there. ``-nolssd`` variants of a3-edge/a3-ultra
    count as their base type. a4-highgpu-8g hosts are listed at 0: GCP bills A4
    as GPU slices that include the host, so a 0 host price counts as "included"
    for fixed types (anywhere else a 0 price means unknown).
  * N1 + attachable GPUs (T4, V100, P100, P4) = every n1-standard/highmem/highcpu
    host of the zone within GCP's vCPU and memory limits for that GPU count
    (`_N1_GPU_LIMITS`); ``instance_type`` is the host name.
  * other host rows are CPU-only offers, except machine types of GPU families
    not in `_GCP_FIXED` (never offered without their GPUs) and TPU host types
    (``*-tpu``).
  * TPU rows (``tpu-*`` accelerators) are dropped: their prices exclude the TPU
    VM and the broker does not place TPU jobs.

Everywhere: accelerator names go through `pricing.gpus.find_gpu` (H100-MEGA ->
H100; unknown names kept as they are); GPU memory falls back to `pricing.gpus`;
``interconnect`` comes from `pricing.families`; a price of 0 or empty becomes
NaN, and rows with neither an on-demand nor a spot price are dropped.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pricing.families import accelerator_override_columns, interconnect_column
from pricing.gpus import find_gpu
from pricing.schema import COLUMN_NAMES, SchemaError, conform, empty_offers
from pricing.userio import bounds
from pricing.userio.suggest import hint

if TYPE_CHECKING:  # pandas is imported lazily
    import pandas as pd

SUPPORTED_CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")
SCHEMA_VERSION = "v8"

_COLUMNS: dict[str, tuple[str, ...]] = {
    "aws": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
            "GpuInfo", "Price", "SpotPrice", "Region", "AvailabilityZone"),
    "gcp": ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount",
            "GpuInfo", "Region", "AvailabilityZone", "Price", "SpotPrice"),
    "azure": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
              "GpuInfo", "Price", "SpotPrice", "Region"),
}  # fmt: skip
_NUMERIC = ("AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice")
_TEXT = ("InstanceType", "AcceleratorName", "GpuInfo", "Region", "AvailabilityZone")
_NUMBER_CAP = {  # the most each number may be (pricing.userio.bounds); none is negative
    "AcceleratorCount": bounds.MAX_GPUS_PER_NODE,
    "vCPUs": bounds.MAX_VCPUS,
    "MemoryGiB": bounds.MAX_MEMORY_GIB,
    "Price": bounds.MAX_PRICE_PER_HOUR,
    "SpotPrice": bounds.MAX_PRICE_PER_HOUR,
}


def _gcp_fixed_types() -> dict[str, tuple[str, float]]:
    fixed: dict[str, tuple[str, float]] = {"a2-megagpu-16g": ("A100", 16.0)}
    for n in (1, 2, 4, 8):
        fixed[f"a2-highgpu-{n}g"] = ("A100", float(n))
        fixed[f"a2-ultragpu-{n}g"] = ("A100-80GB", float(n))
        fixed[f"a3-highgpu-{n}g"] = ("H100", float(n))
    for name, gpu in (("a3-edgegpu-8g", "H100"), ("a3-ultragpu-8g", "H200")):
        fixed[name] = fixed[f"{name}-nolssd"] = (gpu, 8.0)
    fixed["a3-megagpu-8g"] = ("H100-MEGA", 8.0)
    fixed["a4-highgpu-8g"] = ("B200", 8.0)
    for size, count in ((4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (24, 2), (48, 4), (96, 8)):
        fixed[f"g2-standard-{size}"] = ("L4", float(count))
    return fixed


# GCP machine type -> (accelerator name as the file spells it, GPUs per machine).
# Same mapping as SkyPilot's gcp_catalog._ACC_INSTANCE_TYPE_DICTS, plus a3-edge.
_GCP_FIXED: dict[str, tuple[str, float]] = _gcp_fixed_types()

# GPUs attached to N1 hosts: (GPU, count, max vCPUs, max memory GB) of the host.
# https://cloud.google.com/compute/docs/gpus (and SkyPilot's
# gcp_catalog._NUM_ACC_TO_MAX_CPU_AND_MEMORY). P100:4 allows 96/624 in most zones
# but 64/208 in us-east1-c, europe-west1-b/d; the stricter limit is kept everywhere.
_N1_GPU_LIMITS: tuple[tuple[str, float, float, float], ...] = (
    ("T4", 1, 48, 312), ("T4", 2, 48, 312), ("T4", 4, 96, 624),
    ("V100", 1, 12, 78), ("V100", 2, 24, 156), ("V100", 4, 48, 312), ("V100", 8, 96, 624),
    ("P100", 1, 16, 104), ("P100", 2, 32, 208), ("P100", 4, 64, 208),
    ("P4", 1, 24, 156), ("P4", 2, 48, 312), ("P4", 4, 96, 624),
)  # fmt: skip
_N1_HOST = r"n1-(?:standard|highmem|highcpu)-\d+"
_GCP_GPU_FAMILY = r"(?:a\d+x?|g[2-9])-.*"  # machine types that come with GPUs
_GCP_TPU_HOST = r".*-tpu"
_AZURE_GPU_FAMILY = r"Standard_N[CDV]\d.*"


class CatalogImportError(ValueError):
    """A SkyPilot catalog file that cannot be imported; names the file and the column."""

    def __init__(self, path: Path, problem: str, column: str | None = None) -> None:
        self.path = Path(path)
        self.column = column
        where = f"column {column!r} of {path}" if column else str(path)
        super().__init__(f"{where}: {problem}")


def import_skypilot(
    directory: Path,
    clouds: Iterable[str] | None = None,
    as_of: str | None = None,
    on_cloud: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Offers from SkyPilot's ``<cloud>/vms.csv`` files under `directory`.

    `directory` holds ``aws/ gcp/ azure/``, or is their grandparent holding
    ``v8/``. `clouds` limits the clouds read (default: all three); a cloud whose
    file is absent is skipped. `as_of` (ISO date) defaults to each file's
    modification date. `on_cloud(cloud)` is called as each cloud's file is done (a
    progress bar). Raises CatalogImportError on a malformed file,
    FileNotFoundError when `directory` does not exist, ValueError on an unknown cloud.
    """
    import pandas as pd

    root = _catalog_root(Path(directory))
    if as_of is not None:
        _dt.date.fromisoformat(as_of)  # ValueError on a date that is not ISO
    builders = {"aws": aws_offers, "gcp": gcp_offers, "azure": azure_offers}
    frames = []
    for cloud in _chosen_clouds(clouds):
        path = root / cloud / "vms.csv"
        if not os.path.lexists(path):
            continue
        raw = read_vms_csv(path, cloud)
        frame = builders[cloud](raw)
        frame["source"] = f"skypilot:{cloud}/vms.csv"
        frame["as_of"] = as_of or _modified_date(path)
        frames.append(_finish(frame, cloud))
        if on_cloud is not None:
            on_cloud(cloud)
    if not frames:
        return empty_offers()
    try:
        return conform(pd.concat(frames, ignore_index=True))
    except SchemaError as exc:  # a value the files hold that no offer may have (inf, 1e400)
        raise CatalogImportError(root, f"gives an offer no catalog may hold: {exc}") from None


def read_vms_csv(path: Path, cloud: str) -> pd.DataFrame:
    """One SkyPilot ``vms.csv`` with its columns checked and typed (text as "string")."""
    import io

    import numpy as np
    import pandas as pd

    from pricing.userio.errors import UserInputError
    from pricing.userio.reading import read_text

    try:  # a regular file within the catalog size cap, strict UTF-8 (pricing.userio.reading)
        text = read_text(path, "catalog")
    except UserInputError as exc:
        raise CatalogImportError(path, str(exc).removeprefix(f"{path}: ")) from None
    try:
        raw = pd.read_csv(
            io.StringIO(text), keep_default_na=False, na_values=[""], low_memory=False
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise CatalogImportError(path, f"not a readable CSV ({exc})") from None
    missing = [name for name in _COLUMNS[cloud] if name not in raw.columns]
    if missing:
        raise CatalogImportError(
            path, f"missing from the header (SkyPilot {SCHEMA_VERSION} {cloud} layout)", missing[0]
        )
    for name in _NUMERIC:
        numbers = pd.to_numeric(raw[name], errors="coerce").astype("float64")
        wrong = numbers.isna() & raw[name].notna()
        if wrong.any():  # pandas keeps no line numbers: a row's line, as no cell spans two
            row = int(np.flatnonzero(wrong.to_numpy())[0])
            problem = f"line {row + 2}: not a number: {raw[name].iloc[row]!r}"
            raise CatalogImportError(path, problem, name)
        raw[name] = numbers
        values = raw[name].to_numpy()
        bad = ~(np.isnan(values) | ((values >= 0) & (values <= _NUMBER_CAP[name])))
        if bad.any():  # pandas keeps no line numbers: a row's line, as no cell spans two
            row = int(np.flatnonzero(bad)[0])
            problem = f"line {row + 2}: {values[row]!r} is not a sane value"
            raise CatalogImportError(path, problem, name)
    for name in _TEXT:
        if name in raw.columns:
            raw[name] = raw[name].astype("string")
    return raw


def aws_offers(raw: pd.DataFrame) -> pd.DataFrame:
    """AWS rows as offers (before the common finishing in `import_skypilot`)."""
    count = raw["AcceleratorCount"]
    total = _mib(raw["GpuInfo"], r"'TotalGpuMemoryInMiB':\s*(\d+)") / count.where(count > 0)
    per_gpu = _mib(raw["GpuInfo"], r"'SizeInMiB':\s*(\d+)")
    return _offers(
        raw,
        zone=raw["AvailabilityZone"],
        accelerator_memory_gib=total.fillna(per_gpu),
    )


def azure_offers(raw: pd.DataFrame) -> pd.DataFrame:
    """Azure rows as offers, per region (zone "")."""
    names, counts = accelerator_override_columns("azure", raw["InstanceType"])
    raw = raw.assign(
        AcceleratorName=names.fillna(raw["AcceleratorName"]),
        AcceleratorCount=counts.fillna(raw["AcceleratorCount"]),
    )
    unknown_gpu = _matches(raw["InstanceType"], _AZURE_GPU_FAMILY) & (
        raw["AcceleratorName"].isna().to_numpy(dtype=bool)
    )
    raw = raw[~unknown_gpu]
    return _offers(raw, zone="", accelerator_memory_gib=float("nan"))


def gcp_offers(raw: pd.DataFrame) -> pd.DataFrame:
    """GCP offers: fixed GPU machines, N1 hosts with GPUs attached, and CPU-only hosts."""
    import pandas as pd

    key = ["AvailabilityZone", "AcceleratorName", "AcceleratorCount"]
    is_host = raw["InstanceType"].notna().to_numpy(dtype=bool)
    hosts = raw[is_host].drop(columns=["AcceleratorName", "AcceleratorCount", "GpuInfo"])
    gpus = raw[~is_host & raw["AcceleratorName"].notna().to_numpy(dtype=bool)]
    gpus = gpus[~_matches(gpus["AcceleratorName"], r"(?i)tpu-.*")]
    gpus = gpus.drop_duplicates(subset=key)[key + ["GpuInfo", "Price", "SpotPrice"]]
    gpus = gpus.assign(
        memory=_mib(gpus["GpuInfo"], r"'SizeInMiB':\s*(\d+)"),
        Price=_positive(gpus["Price"]),
        SpotPrice=_positive(gpus["SpotPrice"]),
    )

    types = hosts["InstanceType"]
    fixed_table = pd.DataFrame(
        [(name, gpu, count) for name, (gpu, count) in _GCP_FIXED.items()],
        columns=["InstanceType", "AcceleratorName", "AcceleratorCount"],
    ).astype({"InstanceType": "string", "AcceleratorName": "string"})
    fixed = hosts.merge(fixed_table, on="InstanceType", how="inner")
    fixed = fixed.merge(gpus, on=key, how="inner", suffixes=("_host", ""))
    # A 0 host price on a fixed type means "billed with the GPUs" (a4): keep it as 0.
    fixed = fixed.assign(
        Price=fixed["Price_host"] + fixed["Price"],
        SpotPrice=fixed["SpotPrice_host"] + fixed["SpotPrice"],
    )

    limits = pd.DataFrame(
        list(_N1_GPU_LIMITS),
        columns=["AcceleratorName", "AcceleratorCount", "max_vcpus", "max_memory"],
    ).astype({"AcceleratorName": "string", "AcceleratorCount": "float64"})
    n1_hosts = hosts[_matches(types, _N1_HOST)]
    n1_hosts = n1_hosts.assign(
        Price=_positive(n1_hosts["Price"]), SpotPrice=_positive(n1_hosts["SpotPrice"])
    )
    n1_gpus = gpus.merge(limits, on=["AcceleratorName", "AcceleratorCount"], how="inner")
    attached = n1_hosts.merge(n1_gpus, on="AvailabilityZone", how="inner", suffixes=("_host", ""))
    fits = (attached["vCPUs"] <= attached["max_vcpus"]) & (
        attached["MemoryGiB"] <= attached["max_memory"]
    )
    attached = attached[fits.to_numpy(dtype=bool)]
    attached = attached.assign(
        Price=attached["Price_host"] + attached["Price"],
        SpotPrice=attached["SpotPrice_host"] + attached["SpotPrice"],
    )

    cpu_only = ~(
        _matches(types, _GCP_GPU_FAMILY)
        | _matches(types, _GCP_TPU_HOST)
        | types.isin(list(_GCP_FIXED)).to_numpy(dtype=bool)
    )
    cpu = hosts[cpu_only].assign(AcceleratorName=pd.NA, AcceleratorCount=0.0, memory=float("nan"))

    columns = ["InstanceType", "AcceleratorName", "AcceleratorCount", "memory", "vCPUs",
               "MemoryGiB", "Region", "AvailabilityZone", "Price", "SpotPrice"]  # fmt: skip
    offers = pd.concat([fixed[columns], attached[columns], cpu[columns]], ignore_index=True)
    return _offers(offers, zone=offers["AvailabilityZone"], accelerator_memory_gib=offers["memory"])


# --- helpers -------------------------------------------------------------------------


def _chosen_clouds(clouds: Iterable[str] | None) -> list[str]:
    if clouds is None:
        return list(SUPPORTED_CLOUDS)
    if isinstance(clouds, str):
        clouds = [clouds]
    chosen = []
    for cloud in clouds:
        name = cloud.strip().lower()
        if name not in SUPPORTED_CLOUDS:
            raise ValueError(
                f"SkyPilot import supports {', '.join(SUPPORTED_CLOUDS)}, not {cloud!r}"
                f"{hint(name, SUPPORTED_CLOUDS)}"
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def _catalog_root(directory: Path) -> Path:
    if not directory.is_dir():
        raise FileNotFoundError(f"SkyPilot catalog directory not found: {directory}")
    has_clouds = any((directory / c / "vms.csv").is_file() for c in SUPPORTED_CLOUDS)
    if not has_clouds and (directory / SCHEMA_VERSION).is_dir():
        return directory / SCHEMA_VERSION
    return directory


def _modified_date(path: Path) -> str:
    stamp = path.stat().st_mtime
    return _dt.datetime.fromtimestamp(stamp, tz=_dt.UTC).date().isoformat()


def _matches(text: pd.Series, pattern: str):
    """Boolean array: which cells fully match `pattern` (each distinct value tested once)."""
    import re

    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(text)
    compiled = re.compile(pattern)
    hits = np.array([compiled.fullmatch(str(u)) is not None for u in uniques] + [False])
    return hits.take(codes)


def _mib(text: pd.Series, pattern: str) -> pd.Series:
    """GiB from the first MiB figure `pattern` captures in a GpuInfo literal; NaN if none."""
    import pandas as pd

    found = text.astype("string").str.extract(pattern, expand=False)
    return pd.to_numeric(found, errors="coerce").astype("float64") / 1024.0


def _positive(prices: pd.Series) -> pd.Series:
    """Prices with 0 (or less) as NaN: SkyPilot writes 0 where it knows no price."""
    return prices.where(prices > 0)


def _offers(raw: pd.DataFrame, zone, accelerator_memory_gib) -> pd.DataFrame:
    """Rename SkyPilot columns to offers columns (cloud, interconnect etc. come later)."""
    import pandas as pd

    return pd.DataFrame(
        {
            "region": raw["Region"],
            "zone": zone,
            "instance_type": raw["InstanceType"],
            "accelerator": raw["AcceleratorName"],
            "accelerator_count": raw["AcceleratorCount"],
            "accelerator_memory_gib": accelerator_memory_gib,
            "vcpus": raw["vCPUs"],
            "memory_gib": raw["MemoryGiB"],
            "price_on_demand": raw["Price"],
            "price_spot": raw["SpotPrice"],
        },
        index=raw.index,
    )


def _finish(frame: pd.DataFrame, cloud: str) -> pd.DataFrame:
    """Canonical GPU names and facts, interconnect, positive prices; drop unpriced rows."""
    import numpy as np
    import pandas as pd

    frame = frame.reset_index(drop=True)
    names = frame["accelerator"].astype("string")
    codes, uniques = pd.factorize(names)  # NA -> code -1
    models = [find_gpu(str(name)) for name in uniques]
    canonical = pd.array(
        [m.name if m else str(n) for n, m in zip(uniques, models, strict=True)] + [pd.NA],
        dtype="string",
    ).take(codes)  # -1 takes the trailing NA
    fact_memory = np.array([m.memory_gib if m else np.nan for m in models] + [np.nan]).take(codes)
    has_gpu = names.notna() & (frame["accelerator_count"].fillna(0) > 0)
    frame["accelerator"] = pd.Series(canonical, dtype="string").where(has_gpu, "")
    frame["accelerator_count"] = frame["accelerator_count"].where(has_gpu, 0.0)
    memory = pd.to_numeric(frame["accelerator_memory_gib"], errors="coerce")
    memory = memory.fillna(pd.Series(fact_memory, dtype="float64"))
    frame["accelerator_memory_gib"] = memory.where(has_gpu)
    frame["price_on_demand"] = _positive(frame["price_on_demand"])
    frame["price_spot"] = _positive(frame["price_spot"])
    priced = frame["price_on_demand"].notna() | frame["price_spot"].notna()
    frame = frame[priced.to_numpy(dtype=bool)].reset_index(drop=True)
    frame["cloud"] = cloud
    frame["interconnect"] = interconnect_column(cloud, frame["instance_type"])
    frame["spot_interruption_rate"] = float("nan")
    frame["capacity"] = float("nan")
    frame = frame.sort_values(
        ["region", "zone", "instance_type", "accelerator", "accelerator_count"], kind="stable"
    )
    return frame[list(COLUMN_NAMES)].reset_index(drop=True)
