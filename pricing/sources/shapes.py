"""What an instance is made of, for live sources whose price lists do not say it.

The clouds' price APIs price a *name*: Azure's Retail Prices API knows nothing of
a size's vCPUs or GPUs, GCP's Billing Catalog prices a vCPU, a GiB and a GPU but
not a machine type, and the AWS Price List gives vCPUs, memory and a GPU count but
not the GPU model. These tables fill in the rest for the GPU families the broker
places jobs on; a name not here falls back to the rows of the catalog being
refreshed (or the bundled snapshot), and a name known nowhere is skipped and
reported, never guessed.

Sources: AWS "Accelerated computing instance types", Azure N-series size pages,
Google Cloud "GPU machine types" and "N1 machine types" (with GPUs attached under
the limits of `pricing.importers.skypilot._N1_GPU_LIMITS`, the importer's one copy).
Memory is in GiB (GCP's "GB" for machine types is memoryMb / 1024).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from pricing.gpus import find_gpu
from pricing.importers.skypilot import _GCP_FIXED, _N1_GPU_LIMITS

if TYPE_CHECKING:
    from pricing.table import OfferTable


@dataclass(frozen=True, slots=True)
class Shape:
    """An instance type's hardware: canonical GPU ("" for none), GPUs (fractional for
    slices), memory per GPU, vCPUs and memory in GiB, exact so that GCP can price it."""

    accelerator: str
    accelerator_count: Decimal
    accelerator_memory_gib: float
    vcpus: Decimal
    memory_gib: Decimal


def gpu_shape(gpu: str, count: Decimal | str | int, vcpus: Decimal | str | int, memory) -> Shape:
    """A Shape with the GPU's canonical name and memory from `pricing.gpus`."""
    model = find_gpu(gpu)
    return Shape(
        model.name if model else gpu,
        Decimal(str(count)),
        model.memory_gib if model else float("nan"),
        Decimal(str(vcpus)),
        Decimal(str(memory)),
    )


# --- AWS: the family (text before the ".") -> GPU model ------------------------------------
# Families left out: g4ad (Radeon Pro V520), g5g (T4G on Graviton), p2 (K80), dl1/dl2q
# (Gaudi, Qualcomm), trn*/inf* (Trainium, Inferentia): no GPU the planner knows.
AWS_FAMILY_GPU: dict[str, str] = {
    "p3": "V100",
    "p3dn": "V100-32GB",
    "p4d": "A100",
    "p4de": "A100-80GB",
    "p5": "H100",
    "p5e": "H200",
    "p5en": "H200",
    "p6-b200": "B200",
    "p6-b300": "B300",
    "p6e-gb200": "GB200",
    "g3": "M60",
    "g3s": "M60",
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6f": "L4",
    "gr6": "L4",
    "gr6f": "L4",
    "g6e": "L40S",
}


def aws_shape(instance_type: str, vcpu: str, memory: str, gpus: str) -> Shape | None:
    """From the Price List attributes (vcpu "96", memory "1,152 GiB", gpu "8"); None for a
    family without a known GPU or attributes that are not numbers."""
    gpu = AWS_FAMILY_GPU.get(instance_type.partition(".")[0])
    if gpu is None:
        return None
    try:
        memory_gib = Decimal(memory.replace(",", "").split()[0])
        return gpu_shape(gpu, Decimal(gpus.strip()), Decimal(vcpu.strip()), memory_gib)
    except (ArithmeticError, IndexError, ValueError, AttributeError):
        return None


# --- Azure: size -> (GPU, GPUs, vCPUs, GiB) --------------------------------------------------
_AZURE = {
    "Standard_NC6s_v2": ("P100", 1, 6, 112),
    "Standard_NC12s_v2": ("P100", 2, 12, 224),
    "Standard_NC24s_v2": ("P100", 4, 24, 448),
    "Standard_NC24rs_v2": ("P100", 4, 24, 448),
    "Standard_NC6s_v3": ("V100", 1, 6, 112),
    "Standard_NC12s_v3": ("V100", 2, 12, 224),
    "Standard_NC24s_v3": ("V100", 4, 24, 448),
    "Standard_NC24rs_v3": ("V100", 4, 24, 448),
    "Standard_ND40rs_v2": ("V100-32GB", 8, 40, 672),
    "Standard_NV12s_v3": ("M60", 1, 12, 112),
    "Standard_NV24s_v3": ("M60", 2, 24, 224),
    "Standard_NV48s_v3": ("M60", 4, 48, 448),
    "Standard_NC4as_T4_v3": ("T4", 1, 4, 28),
    "Standard_NC8as_T4_v3": ("T4", 1, 8, 56),
    "Standard_NC16as_T4_v3": ("T4", 1, 16, 110),
    "Standard_NC64as_T4_v3": ("T4", 4, 64, 440),
    "Standard_NC24ads_A100_v4": ("A100-80GB", 1, 24, 220),
    "Standard_NC48ads_A100_v4": ("A100-80GB", 2, 48, 440),
    "Standard_NC96ads_A100_v4": ("A100-80GB", 4, 96, 880),
    "Standard_ND96asr_v4": ("A100", 8, 96, 900),
    "Standard_ND96amsr_A100_v4": ("A100-80GB", 8, 96, 1900),
    "Standard_NC40ads_H100_v5": ("H100-NVL", 1, 40, 320),
    "Standard_NC80adis_H100_v5": ("H100-NVL", 2, 80, 640),
    "Standard_ND96isr_H100_v5": ("H100", 8, 96, 1900),
    "Standard_ND96isr_H200_v5": ("H200", 8, 96, 1850),
    "Standard_ND96is_MI300X_v5": ("MI300X", 8, 96, 1850),
    "Standard_ND96isr_MI300X_v5": ("MI300X", 8, 96, 1850),
    # NVads A10 v5: slices of one A10 (1/6, 1/3, 1/2), as the bundled snapshot counts them.
    "Standard_NV6ads_A10_v5": ("A10", "0.166667", 6, 55),
    "Standard_NV12ads_A10_v5": ("A10", "0.333333", 12, 110),
    "Standard_NV18ads_A10_v5": ("A10", "0.5", 18, 220),
    "Standard_NV36ads_A10_v5": ("A10", 1, 36, 440),
    "Standard_NV36adms_A10_v5": ("A10", 1, 36, 880),
    "Standard_NV72ads_A10_v5": ("A10", 2, 72, 880),
}
AZURE_SIZES: dict[str, Shape] = {size: gpu_shape(*facts) for size, facts in _AZURE.items()}


# --- GCP: machine types with GPUs, and the billing family of their vCPUs and RAM -----------
# (vCPUs, GiB) of the fixed GPU machine types priced live; their GPUs are the importer's
# `_GCP_FIXED`. a3-edge/ultra and a4 are billed differently (a4: GPU slices that include
# the host) and are not priced live yet.
_GCP_FIXED_SIZES = {
    "a2-highgpu-1g": (12, 85),
    "a2-highgpu-2g": (24, 170),
    "a2-highgpu-4g": (48, 340),
    "a2-highgpu-8g": (96, 680),
    "a2-megagpu-16g": (96, 1360),
    "a2-ultragpu-1g": (12, 170),
    "a2-ultragpu-2g": (24, 340),
    "a2-ultragpu-4g": (48, 680),
    "a2-ultragpu-8g": (96, 1360),
    "a3-highgpu-1g": (26, 234),
    "a3-highgpu-2g": (52, 468),
    "a3-highgpu-4g": (104, 936),
    "a3-highgpu-8g": (208, 1872),
    "a3-megagpu-8g": (208, 1872),
    "g2-standard-4": (4, 16),
    "g2-standard-8": (8, 32),
    "g2-standard-12": (12, 48),
    "g2-standard-16": (16, 64),
    "g2-standard-24": (24, 96),
    "g2-standard-32": (32, 128),
    "g2-standard-48": (48, 192),
    "g2-standard-96": (96, 384),
}
_N1_GIB_PER_VCPU = {
    "standard": Decimal("3.75"),
    "highmem": Decimal("6.5"),
    "highcpu": Decimal("0.9"),
}
_N1_SIZES = {"standard": (1, 2, 4, 8, 16, 32, 64, 96)} | {
    kind: (2, 4, 8, 16, 32, 64, 96) for kind in ("highmem", "highcpu")
}


@dataclass(frozen=True, slots=True)
class GcpMachine:
    """A GCP GPU offer to price: the machine type, its billing family ("a2", "n1", ...),
    the GPU SKU it carries (the importer's spelling: "H100-MEGA" is its own SKU)."""

    instance_type: str
    family: str
    gpu_sku: str
    shape: Shape


def gcp_machines() -> list[GcpMachine]:
    """Every GCP GPU offer the live source prices: fixed machine types, and each N1 host
    with each GPU count GCP allows on it."""
    machines = []
    for name, (vcpus, memory) in _GCP_FIXED_SIZES.items():
        gpu, count = _GCP_FIXED[name]
        shape = gpu_shape(gpu, int(count), vcpus, memory)
        machines.append(GcpMachine(name, name.partition("-")[0], gpu, shape))
    for kind, sizes in _N1_SIZES.items():
        for vcpus in sizes:
            memory = _N1_GIB_PER_VCPU[kind] * vcpus
            for gpu, count, max_vcpus, max_memory in _N1_GPU_LIMITS:
                if vcpus <= max_vcpus and memory <= max_memory:
                    shape = gpu_shape(gpu, int(count), vcpus, memory)
                    machines.append(GcpMachine(f"n1-{kind}-{vcpus}", "n1", gpu, shape))
    return machines


# --- fallback: what the catalog being refreshed already says ----------------------------------


def catalog_shapes(tables: Iterable[OfferTable], cloud: str) -> dict[str, Shape]:
    """instance type -> Shape from the rows of `cloud` in `tables` (first table wins)."""
    found: dict[str, Shape] = {}
    for table in tables:
        columns = {
            name: table.column(name).tolist()
            for name in ("cloud", "instance_type", "accelerator", "accelerator_count")
            + ("accelerator_memory_gib", "vcpus", "memory_gib")
        }
        for i, row_cloud in enumerate(columns["cloud"]):
            name = columns["instance_type"][i]
            if row_cloud != cloud or name in found:
                continue
            numbers = [columns[c][i] for c in ("accelerator_count", "vcpus", "memory_gib")]
            if any(v != v for v in numbers):  # NaN: not enough to price or place it
                continue
            count, vcpus, memory = (Decimal(repr(float(v))) for v in numbers)
            found[name] = Shape(
                columns["accelerator"][i],
                count,
                float(columns["accelerator_memory_gib"][i]),
                vcpus,
                memory,
            )
    return found


def lookup(table: Mapping[str, Shape], fallback: Mapping[str, Shape], name: str) -> Shape | None:
    """`name`'s shape from the facts table, else from the catalog; None when unknown."""
    return table.get(name) or fallback.get(name)
