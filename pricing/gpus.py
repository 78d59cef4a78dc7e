"""GPU facts: canonical names, aliases, memory per GPU, relative training throughput, and
the smallest host the clouds pair with each GPU, and the MIG profiles of the GPUs that
can be partitioned.

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

from typing import NamedTuple

from pricing.userio.suggest import hint


class GpuModel(NamedTuple):
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



class MigProfile(NamedTuple):
    """One MIG (Multi-Instance GPU) profile of a GPU model, as NVIDIA's MIG user guide and
    mig-parted layouts define it: `3g.40gb` is 3 of the GPU's 7 compute slices and 4 of
    its 8 memory slices (40 GB), and at most `per_gpu` of them fit on one GPU."""

    name: str  # "1g.10gb"
    compute: int  # compute slices, of 7
    memory_slices: int  # memory slices, of 8
    memory_gib: float
    per_gpu: int  # the most instances of this profile on one GPU


MIG_COMPUTE_SLICES = 7
MIG_MEMORY_SLICES = 8
_MIG_SOURCE = "NVIDIA MIG user guide: throughput of the whole GPU x compute slices / 7"


def _profiles(memory: tuple[float, float, float, float, float, float]) -> tuple[MigProfile, ...]:
    """The six profiles every MIG GPU since the A100-80GB has, from their memory sizes:
    1g (one memory slice), 1g (two), 2g, 3g, 4g, 7g."""
    shapes = ((1, 1, 7), (1, 2, 4), (2, 2, 3), (3, 4, 2), (4, 4, 1), (7, 8, 1))
    return tuple(
        MigProfile(f"{compute}g.{gib:g}gb", compute, slices, gib, most)
        for (compute, slices, most), gib in zip(shapes, memory, strict=True)
    )


# GPU model -> (slice family, its profiles). A slice is named "<family>-<profile>"
# (A100-1g.10gb): a 1g.10gb slice is the same on an A100 of 40 GB and of 80 GB.
MIG_PROFILES: dict[str, tuple[str, tuple[MigProfile, ...]]] = {
    "A100": (
        "A100",
        (
            MigProfile("1g.5gb", 1, 1, 5, 7),
            MigProfile("1g.10gb", 1, 2, 10, 4),
            MigProfile("2g.10gb", 2, 2, 10, 3),
            MigProfile("3g.20gb", 3, 4, 20, 2),
            MigProfile("4g.20gb", 4, 4, 20, 1),
            MigProfile("7g.40gb", 7, 8, 40, 1),
        ),
    ),
    "A100-80GB": ("A100", _profiles((10, 20, 20, 40, 40, 80))),
    "H100": ("H100", _profiles((10, 20, 20, 40, 40, 80))),
    "H100-NVL": ("H100-NVL", _profiles((12, 24, 24, 47, 47, 94))),
    "H200": ("H200", _profiles((18, 35, 35, 71, 71, 141))),
    "B200": ("B200", _profiles((23, 45, 45, 90, 90, 180))),
}


def _slice_models() -> tuple[GpuModel, ...]:
    whole = {model.name: model for model in GPU_MODELS}
    made: dict[str, GpuModel] = {}
    for gpu, (family, profiles) in MIG_PROFILES.items():
        for profile in profiles:
            name = f"{family}-{profile.name}"
            if name not in made:  # the first GPU of a family that has it gives the speed
                speed = whole[gpu].relative_throughput * profile.compute / MIG_COMPUTE_SLICES
                slurm = f"{family.lower().replace('-', '')}_{profile.name}"  # Slurm's gres type
                made[name] = GpuModel(
                    name, "nvidia", profile.memory_gib, round(speed, 4), _MIG_SOURCE, (slurm,)
                )
    return tuple(made.values())


# The MIG slices as models of their own (a manifest asks `A100-1g.10gb:1`). They are not
# in GPU_MODELS: clouds sell whole GPUs, and only on-prem pools that declare slices sell these.
MIG_SLICES: tuple[GpuModel, ...] = _slice_models()
_SLICE_OF: dict[str, tuple[str, MigProfile]] = {
    f"{family}-{profile.name}": (family, profile)
    for family, profiles in MIG_PROFILES.values()
    for profile in profiles
}

_BY_KEY: dict[str, GpuModel] = {}
for _model in GPU_MODELS + MIG_SLICES:
    _BY_KEY[_model.name.lower()] = _model
    for _alias in _model.aliases:
        _BY_KEY[_alias.lower()] = _model
del _model, _alias


class UnknownGpu(ValueError):
    """A GPU name that is neither canonical nor an alias."""


def gpu_names() -> list[str]:
    """Canonical GPU names, fastest first."""
    return [model.name for model in GPU_MODELS]


def slice_names() -> list[str]:
    """Canonical names of the MIG slices (A100-1g.10gb, ...)."""
    return [model.name for model in MIG_SLICES]


def mig_profiles(gpu: str) -> tuple[MigProfile, ...]:
    """The MIG profiles of a whole GPU model (canonical name); () when it has none."""
    return MIG_PROFILES.get(gpu, ("", ()))[1]


def mig_slice_name(gpu: str, profile: str) -> str:
    """The canonical name of `profile` sliced from `gpu` (A100-80GB, 1g.10gb -> A100-1g.10gb);
    ValueError with a "did you mean" when that GPU has no such profile."""
    family, profiles = MIG_PROFILES.get(gpu, ("", ()))
    if not profiles:
        raise ValueError(f"{gpu} has no MIG profiles (GPUs with MIG: {', '.join(MIG_PROFILES)})")
    names = [p.name for p in profiles]
    if profile not in names:
        raise ValueError(f"{gpu} has no MIG profile {profile!r}{hint(profile, names)}")
    return f"{family}-{profile}"


def slice_of(name: str) -> tuple[str, MigProfile] | None:
    """(family, profile) of a canonical MIG slice name, or None for a whole GPU."""
    return _SLICE_OF.get(name)


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
    names = gpu_names() + slice_names() + list(known or [])
    raise UnknownGpu(f"unknown GPU {name!r}{hint(name, names)}")


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


class HostFloor(NamedTuple):
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
