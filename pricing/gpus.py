"""GPU facts: canonical names, aliases, memory per GPU and relative training throughput.

One table so that every room speaks the same GPU names. The throughput factor
is relative to one A100 (40 GB, SXM) on mixed-precision training; the planner
uses it to compare an any-of list of GPU types (a faster GPU that finishes
sooner can be cheaper overall). Each factor names its source; they are
deliberately rounded, since real speed-ups depend on the model.
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
