"""Known facts per instance family that the clouds' price files do not carry.

The price CSVs say what an instance costs and which GPUs it holds, but not how
those GPUs talk to each other or to other nodes. These tables fill that gap for
the families that matter to multi-GPU and multi-node jobs:

- `interconnect_for(cloud, instance_type)`: "" or "+"-joined members of
  ``nvlink``, ``infiniband``, ``efa`` (the vocabulary of `pricing.schema.INTERCONNECTS`).
  "nvlink" means the GPUs of one instance share a high-bandwidth GPU-to-GPU
  fabric (NVLink/NVSwitch, or AMD Infinity Fabric on MI300X); a single-GPU
  instance never has it. "infiniband" and "efa" are the RDMA fabrics between
  instances (Azure's "r" sizes; AWS Elastic Fabric Adapter).
- `accelerator_override(cloud, instance_type)`: the GPU (canonical name, count)
  of a type whose price file names it wrongly or not at all.

Sources: the clouds' instance-type pages (AWS "Accelerated computing" specs and
EFA supported instance types; Google Cloud "GPU machine types"; Azure N-series
size pages, where an "r" in the size name means RDMA/InfiniBand). Unknown types
get "" / None: a missing fact never invents a capability.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported lazily
    import pandas as pd

_NVLINK = "nvlink"
_NVLINK_EFA = "nvlink+efa"
_NVLINK_IB = "nvlink+infiniband"
_IB = "infiniband"

# cloud -> ordered (full-match regex, interconnect); the first match wins.
_INTERCONNECT_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "aws": (
        # 8-GPU training boxes: NVLink/NVSwitch inside, EFA between instances.
        (r"(?:p3dn|p4d|p4de|p5|p5e|p5en|p6-b200|p6-b300)\.(?:24|48)xlarge", _NVLINK_EFA),
        (r"p6e-gb200\.\d+xlarge", _NVLINK_EFA),
        # p3.8xlarge (4 x V100) and p3.16xlarge (8 x V100): NVLink, no EFA.
        (r"p3\.(?:8|16)xlarge", _NVLINK),
    ),
    "gcp": (
        # a2/a3/a4 with 2+ GPUs (the count is the "-Ng" suffix): NVLink/NVSwitch.
        # GPUDirect-TCPX(O) and RDMA NICs of a3/a4 have no name in our vocabulary.
        (r"a[234]x?-[a-z]+gpu-(?:[2-9]|\d{2,})g(?:-[a-z0-9]+)?", _NVLINK),
    ),
    "azure": (
        # ND A100 v4, ND H100/H200/MI300X v5, ND GB200 v6, ND v2 (8 x V100):
        # NVLink (Infinity Fabric on MI300X) inside, InfiniBand between ("r" sizes).
        (r"Standard_ND\d+[a-z]*r[a-z]*_(?:[A-Za-z0-9]+_)*v[2456]", _NVLINK_IB),
        # The same ND families without "r" (no RDMA), e.g. ND96is_MI300X_v5.
        (r"Standard_ND\d+[a-z]*_(?:[A-Za-z0-9]+_)*v[456]", _NVLINK),
        # NC A100 v4 with 2 or 4 GPUs; NC H100 v5 with 2 GPUs (NVLink bridge).
        (r"Standard_NC(?:48|96)ads_A100_v4", _NVLINK),
        (r"Standard_NC80adis_H100_v5", _NVLINK),
        # NC24rs v2/v3 (4 x P100/V100, PCIe): InfiniBand only.
        (r"Standard_NC24rs_v[23]", _IB),
    ),
}

# (cloud, full-match regex) -> (canonical accelerator, count per instance).
_ACCELERATOR_OVERRIDES: tuple[tuple[str, str, str, float], ...] = (
    # Azure NC H100 v5 carries H100 NVL (94 GB) GPUs; SkyPilot's file says "H100".
    ("azure", r"Standard_NC40ads_H100_v5", "H100-NVL", 1.0),
    ("azure", r"Standard_NCC40ads_H100_v5", "H100-NVL", 1.0),
    ("azure", r"Standard_NC80adis_H100_v5", "H100-NVL", 2.0),
    # Listed without accelerator columns in SkyPilot's Azure file.
    ("azure", r"Standard_ND96is_MI300X_v5", "MI300X", 8.0),
    ("azure", r"Standard_ND128isr_NDR_GB200_v6", "GB200", 4.0),
)

_COMPILED_INTERCONNECT = {
    cloud: tuple((re.compile(pattern), value) for pattern, value in rules)
    for cloud, rules in _INTERCONNECT_RULES.items()
}


def interconnect_for(cloud: str, instance_type: str) -> str:
    """The GPU interconnect of one instance type: "", or e.g. "nvlink+efa"."""
    for pattern, value in _COMPILED_INTERCONNECT.get(cloud.lower(), ()):
        if pattern.fullmatch(instance_type):
            return value
    return ""


def interconnect_column(cloud: str | pd.Series, instance_types: pd.Series) -> pd.Series:
    """Vectorised `interconnect_for` over a column of instance types.

    `cloud` is one cloud name for the whole column or a column aligned with
    `instance_types`. Returns a "string" Series with the same index. Each distinct
    (cloud, type) pair is matched once, so a large table costs little.
    """
    import pandas as pd

    types = instance_types.astype("string").fillna("")
    if isinstance(cloud, str):
        codes, uniques = pd.factorize(types)
        values = [interconnect_for(cloud, str(t)) for t in uniques]
    else:
        clouds = cloud.astype("string").fillna("").str.lower()
        keys = clouds.to_numpy(object) + "\x1f" + types.to_numpy(object)
        codes, uniques = pd.factorize(keys)
        values = [interconnect_for(*str(k).split("\x1f", 1)) for k in uniques]
    return pd.Series(pd.array(values, dtype="string").take(codes), index=types.index)


def accelerator_override(cloud: str, instance_type: str) -> tuple[str, float] | None:
    """(canonical GPU, count) when the price file names an instance's GPU wrongly or not at all."""
    for rule_cloud, pattern, name, count in _ACCELERATOR_OVERRIDES:
        if rule_cloud == cloud.lower() and re.fullmatch(pattern, instance_type):
            return name, count
    return None


def accelerator_override_columns(
    cloud: str, instance_types: pd.Series
) -> tuple[pd.Series, pd.Series]:
    """Vectorised `accelerator_override`: (names, counts), with <NA>/NaN where none applies."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(instance_types.astype("string").fillna(""))
    found = [accelerator_override(cloud, str(t)) for t in uniques]
    names = pd.array([f[0] if f else pd.NA for f in found], dtype="string")
    counts = np.array([f[1] if f else np.nan for f in found], dtype="float64")
    index = instance_types.index
    return (
        pd.Series(names.take(codes), index=index),
        pd.Series(counts.take(codes), index=index),
    )
