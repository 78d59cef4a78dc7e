"""GPU facts: canonical names, aliases, memory per GPU, relative training throughput, and
the smallest host the clouds pair with each GPU.

One table so that every room speaks the same GPU names. The throughput factor
is relative to one A100 (40 GB, SXM) on mixed-precision training; the planner
uses it to compare an any-of list of GPU types (a faster GPU that finishes
sooner can be cheaper overall). Each factor names its source; they are
deliberately rounded, since real speed-ups depend on the model.

The host floors (`HOST_FLOORS`) are what a GPU job that states no `cpus` or `memory`
gets: per GPU, no fewer vCPUs and GiB than the smallest of the clouds' own shapes for
that GPU (a GCE N1 host, chosen freely, could otherwise be a 1-vCPU machine).
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.userio.suggest import hint


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Facts about one accelerator model."""

    name: str  # canonical name used in every offers table
    vendor: str
    memory_gib: float  # per GPU
    relative_throughput: float  # training throughput relative to A100-40GB = 1.0
    throughput_source: str
    aliases: tuple[str, ...] = ()


_MLPERF = "MLPerf Training v3.1-v4.1 per-GPU results, normalised to A100 (mlcommons.org)"
_LAMBDA = "Lambda GPU benchmarks, PyTorch mixed-precision training (lambdalabs.com/gpu-benchmarks)"
_SPEC = "vendor datasheet dense BF16/FP16 tensor TFLOPS and memory bandwidth, vs A100"

GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("GB200", "nvidia", 186, 5.5, _MLPERF, ()),
    GpuModel("B200", "nvidia", 180, 5.0, _MLPERF, ("b200-180gb",)),
    GpuModel("B300", "nvidia", 270, 6.5, _SPEC, ("b300-288gb",)),
    GpuModel("H200", "nvidia", 141, 2.8, _MLPERF, ("h200-141gb",)),
    GpuModel("H100", "nvidia", 80, 2.5, _MLPERF, ("h100-80gb", "h100-sxm", "h100-mega")),
    GpuModel("H100-NVL", "nvidia", 94, 2.2, _SPEC, ("h100nvl",)),
    GpuModel("A100-80GB", "nvidia", 80, 1.05, _LAMBDA, ("a100-80g", "a100_80gb", "a100-sxm4-80gb")),
    GpuModel("A100", "nvidia", 40, 1.0, _LAMBDA, ("a100-40gb", "a100-40g", "a100-sxm4-40gb")),
    GpuModel("L40S", "nvidia", 48, 0.7, _SPEC, ("l40s-48gb",)),
    GpuModel("L40", "nvidia", 48, 0.55, _SPEC, ()),
    GpuModel("A10G", "nvidia", 24, 0.3, _LAMBDA, ()),
    GpuModel("A10", "nvidia", 24, 0.35, _LAMBDA, ()),
    GpuModel("L4", "nvidia", 24, 0.25, _SPEC, ()),
    GpuModel("V100-32GB", "nvidia", 32, 0.45, _LAMBDA, ("v100-32g",)),
    GpuModel("V100", "nvidia", 16, 0.42, _LAMBDA, ("v100-16gb", "v100-sxm2")),
    GpuModel("T4", "nvidia", 16, 0.15, _LAMBDA, ()),
    GpuModel("P100", "nvidia", 16, 0.18, _LAMBDA, ()),
    GpuModel("P4", "nvidia", 8, 0.06, _SPEC, ()),
    GpuModel("M60", "nvidia", 8, 0.05, _SPEC, ()),
    GpuModel("MI300X", "amd", 192, 2.2, _MLPERF, ("mi300",)),
    GpuModel("MI250X", "amd", 128, 1.1, _SPEC, ()),
    GpuModel("MI25", "amd", 16, 0.1, _SPEC, ()),
)

_BY_KEY: dict[str, GpuModel] = {}
for _model in GPU_MODELS:
    _BY_KEY[_model.name.lower()] = _model
    for _alias in _model.aliases:
        _BY_KEY[_alias.lower()] = _model
del _model, _alias


class UnknownGpu(ValueError):
    """A GPU name that is neither canonical nor an alias."""


def gpu_names() -> list[str]:
    """Canonical GPU names, fastest first."""
    return [model.name for model in GPU_MODELS]


def find_gpu(name: str) -> GpuModel | None:
    """The model for a canonical name or alias (case-insensitive), or None."""
    return _BY_KEY.get(name.strip().lower())


def canonical_gpu(name: str, known: list[str] | None = None) -> str:
    """Canonical name for `name`; raises UnknownGpu with a "did you mean".

    `known` adds names a catalog carries that the facts table lacks (an imported
    catalog may list a TPU slice or a new GPU): they are accepted as they are.
    """
    model = find_gpu(name)
    if model is not None:
        return model.name
    for extra in known or ():
        if extra.lower() == name.strip().lower():
            return extra
    raise UnknownGpu(f"unknown GPU {name!r}{hint(name, gpu_names() + list(known or []))}")


def parse_gpu_request(text: str, known: list[str] | None = None) -> tuple[str, float]:
    """Parse "A100:8" (or "A100" for one) into (canonical name, count)."""
    name, _, count_text = text.partition(":")
    count = 1.0
    if count_text:
        try:
            count = float(count_text)
        except ValueError:
            raise UnknownGpu(
                f"bad GPU count in {text!r}: expected NAME:COUNT, e.g. A100:8"
            ) from None
        if count <= 0:
            raise UnknownGpu(f"GPU count must be positive in {text!r}")
    return canonical_gpu(name, known), count


@dataclass(frozen=True, slots=True)
class HostFloor:
    """The least host a GPU gets per GPU when a job states no vCPUs or memory."""

    vcpus_per_gpu: float
    memory_gib_per_gpu: float
    source: str  # the clouds' own shapes the floor stays within


_SMALL = "g4dn/g5/g6.xlarge, g2-standard-4, NC4as_T4_v3: 4 vCPUs, 16+ GiB per GPU"
_L40S = "g6e.xlarge: 4 vCPUs, 32 GiB per GPU"
_V100 = "NC6s_v3: 6 vCPUs, 112 GiB; p3.2xlarge: 8 vCPUs, 61 GiB per GPU"
_A100 = "a2-megagpu-16g: 6 vCPUs, 85 GiB per GPU; a2-highgpu, p4d, NC A100 v4: 12 vCPUs"
_A100_80 = "a2-ultragpu: 12 vCPUs, 170 GiB; p4de: 12 vCPUs, 144 GiB per GPU"
_H100 = "ND H100 v5: 12 vCPUs, 237.5 GiB; p5: 16-24 vCPUs, 256 GiB; a3: 26 vCPUs, 234 GiB"
_BLACKWELL = "p6-b200: 24 vCPUs, 256 GiB per GPU (kept at the H100 floor)"
_MI = "ND MI300X v5: 12 vCPUs, 231 GiB per GPU"

# Per GPU: the least vCPUs and GiB; a node with N GPUs needs N times as much. Each floor
# is at most the smallest pairing of the clouds' own shapes (tests/pricing/test_gpus.py
# checks every GPU shape of the bundled and the SkyPilot catalogs against it).
HOST_FLOORS: dict[str, HostFloor] = {
    **{g: HostFloor(4, 16, _SMALL) for g in ("T4", "L4", "A10G", "A10", "P4", "P100", "M60")},
    "MI25": HostFloor(4, 14, "NV4as_v4: 4 vCPUs, 14 GiB per GPU"),
    "L40S": HostFloor(4, 32, _L40S),
    "L40": HostFloor(4, 32, _L40S),
    "V100": HostFloor(6, 32, _V100),
    "V100-32GB": HostFloor(5, 32, "ND40rs_v2: 5 vCPUs, 84 GiB; p3dn: 12 vCPUs, 96 GiB per GPU"),
    "A100": HostFloor(6, 64, _A100),
    "A100-80GB": HostFloor(12, 128, _A100_80),
    "MI250X": HostFloor(8, 64, "MI250X nodes: 8+ vCPUs, 64+ GiB per GPU"),
    **{g: HostFloor(12, 128, _H100) for g in ("H100", "H100-NVL", "H200")},
    **{g: HostFloor(12, 128, _BLACKWELL) for g in ("B200", "B300", "GB200")},
    "MI300X": HostFloor(12, 128, _MI),
}


def host_floor(gpu: str) -> HostFloor | None:
    """The host floor of a canonical GPU name (None for a GPU the table does not know)."""
    return HOST_FLOORS.get(gpu)
