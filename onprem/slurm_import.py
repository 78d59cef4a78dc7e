"""Pools from a running Slurm cluster: what `broker pools import --slurm` writes.

`sinfo -N -O` (explicit fields, \\x1f separated) gives each node's partitions, GPU
gres (typed, MIG types too), CPUs and memory; `scontrol show topology` gives the
leaf switch of each node. Nodes of one partition with the same GPUs, CPUs and
memory become one pool; a node in several partitions goes to its default one (or
the first), since a node belongs to one pool. A node whose gres are MIG types only
(`a100_1g.10gb:7`) becomes a sliced pool: the GPU model is the one of that family
whose MIG profiles fit the slices on the fewest GPUs (7 x 1g.10gb is one A100-80GB).

What Slurm cannot say is written as a placeholder with a comment: the amortised
cost, the country, the NVLink domain. The text loads with `onprem.inventory`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from onprem.executors import slurm_text as text
from onprem.executors.shell import Shell
from providers.errors import ProviderError

SINFO_FIELDS = ("NodeList", "Partition", "Gres", "CPUs", "Memory")  # Partition: "low*" = default


@dataclass(frozen=True)
class ImportedPool:
    """One pool as the cluster describes it, ready to be written."""

    name: str
    partition: str
    gpu: str  # canonical name (pricing.gpus)
    gres: str  # Slurm's type of the whole GPU ("" = untyped)
    gpus_per_node: int
    vcpus_per_node: int
    memory_gib_per_node: float
    nodes: tuple[tuple[str, str], ...]  # (name, leaf switch or "")
    mig: tuple[tuple[str, int], ...] = ()  # per-GPU layout of a sliced pool
    notes: tuple[str, ...] = field(default=(), compare=False)


def read_cluster(shell: Shell, env: dict[str, str] | None = None) -> list[ImportedPool]:
    """The pools of the cluster `shell` reaches (see the module docstring)."""
    fields = ",".join(f"{f}:{text.US}" for f in SINFO_FIELDS)
    nodes = shell.run(["sinfo", "-h", "-N", "-O", fields], env=env)
    if nodes.returncode != 0:
        raise ProviderError("onprem", f"sinfo: {nodes.stderr.strip()[-300:]}")
    topology = shell.run(["scontrol", "show", "topology"], env=env)
    return pools_from(nodes.stdout, topology.stdout if topology.returncode == 0 else "")


def pools_from(sinfo: str, topology: str) -> list[ImportedPool]:
    """The pools of sinfo's and scontrol's outputs (pure)."""
    switch_of = leaf_switches(topology)
    chosen: dict[str, tuple[str, str, int, int]] = {}  # node -> (partition, gres, cpus, mem)
    for line in sinfo.splitlines():
        values = [v.strip() for v in line.split(text.US)]
        if len(values) < len(SINFO_FIELDS):
            continue
        node, partition, gres, cpus, memory = values[: len(SINFO_FIELDS)]
        default = partition.endswith("*")
        partition = partition.rstrip("*")
        if not text.parse_gres(gres) or not cpus.isdigit() or not memory.isdigit():
            continue  # a CPU-only node is no GPU pool
        if node not in chosen or default:
            chosen[node] = (partition, gres, int(cpus), int(memory))
    groups: dict[tuple[str, str, int, int], list[str]] = {}
    for node, key in chosen.items():
        groups.setdefault(key, []).append(node)
    pools = []
    for (partition, gres, cpus, memory), members in sorted(groups.items()):
        pool = _pool(partition, gres, cpus, memory, sorted(members), switch_of)
        if pool is not None:
            pools.append(pool)
    return _unique_names(pools)


def leaf_switches(topology: str) -> dict[str, str]:
    """Node -> its leaf switch, from `scontrol show topology` (Level=0 switches)."""
    out: dict[str, str] = {}
    for line in topology.splitlines():
        found = dict(re.findall(r"(\w+)=(\S+)", line))
        if found.get("Level") == "0" and "SwitchName" in found and "Nodes" in found:
            for node in text.expand_hostlist(found["Nodes"]):
                out[node] = found["SwitchName"]
    return out


def _pool(
    partition: str, gres: str, cpus: int, memory_mb: int, members: list[str], switch_of: dict
) -> ImportedPool | None:
    from pricing.gpus import find_gpu

    kinds = text.parse_gres(gres)
    whole = [(kind, n) for kind, n in kinds if "_" not in kind]
    sliced = [(kind, n) for kind, n in kinds if "_" in kind]
    nodes = tuple((m, switch_of.get(m, "")) for m in members)
    memory = round(memory_mb / 1024, 1)
    if whole:
        kind, count = whole[0]
        model = find_gpu(kind) if kind else None
        notes = ()
        if sliced:
            notes = (f"MIG gres left out: {', '.join(k for k, _ in sliced)} beside whole GPUs",)
        if model is None:
            return None
        name = f"{partition}-{kind or 'gpu'}"
        return ImportedPool(
            name, partition, model.name, kind, count, cpus, memory, nodes, (), notes
        )
    layout = _layout(sliced)
    if layout is None:
        return None
    gpu, gpus, per_gpu, family_gres = layout
    name = f"{partition}-{family_gres}-mig"
    return ImportedPool(name, partition, gpu, family_gres, gpus, cpus, memory, nodes, per_gpu)


def _layout(sliced: Sequence[tuple[str, int]]):
    """(GPU model, GPUs, per-GPU layout, whole-GPU gres type) for MIG-only gres, or None
    when no GPU model of the family fits them evenly."""
    from pricing.gpus import MIG_PROFILES

    if not sliced:
        return None
    family_gres = sliced[0][0].split("_", 1)[0]
    profiles = {kind.split("_", 1)[1]: n for kind, n in sliced}
    best = None
    for gpu, (family, known) in MIG_PROFILES.items():
        if family.lower().replace("-", "") != family_gres:
            continue
        per_gpu = {p.name: p for p in known}
        if not set(profiles) <= set(per_gpu):
            continue
        fewest = max(-(-n // per_gpu[p].per_gpu) for p, n in profiles.items())
        for gpus in range(fewest, max(profiles.values()) + 1):
            if any(n % gpus for n in profiles.values()):
                continue
            layout = tuple((p, n // gpus) for p, n in profiles.items())
            compute = sum(per_gpu[p].compute * n for p, n in layout)
            memory = sum(per_gpu[p].memory_slices * n for p, n in layout)
            if compute <= 7 and memory <= 8:
                key = (gpus, -max(p.memory_gib for p in known))  # fewest GPUs, larger GPU
                if best is None or key < best[0]:
                    best = (key, (gpu, gpus, layout, family_gres))
                break
    return None if best is None else best[1]


def _unique_names(pools: list[ImportedPool]) -> list[ImportedPool]:
    from dataclasses import replace

    seen: dict[str, int] = {}
    out = []
    for pool in pools:
        n = seen.get(pool.name, 0)
        seen[pool.name] = n + 1
        out.append(pool if n == 0 else replace(pool, name=f"{pool.name}-{n + 1}"))
    return out


def render(
    pools: Sequence[ImportedPool],
    *,
    region: str,
    country: str,
    cost_per_gpu_hour: float,
    executor_extra: dict[str, object],
    source: str,
) -> str:
    """pools.yaml text for `pools` (see docs/pools.md)."""
    lines = [
        f"# Written by `broker pools import --slurm` from {source}.",
        "# Slurm cannot say these; check them: cost_per_gpu_hour (amortised USD), the",
        "# location's country (data residency), nvlink_domain (0 = none written here).",
        "pools:",
    ]
    for pool in pools:
        lines += [
            f"  - name: {pool.name}",
            f"    location: {{region: {region}, country: {_quote(country)}}}",
            f"    gpu: {pool.gpu}",
            f"    gpus_per_node: {pool.gpus_per_node}",
            f"    vcpus_per_node: {pool.vcpus_per_node}",
            f"    memory_gib_per_node: {pool.memory_gib_per_node:g}",
            f"    fabric: {'infiniband' if any(s for _, s in pool.nodes) else 'ethernet'}"
            "   # from the topology's switches; roce / ethernet if that is what it is",
            f"    cost_per_gpu_hour: {cost_per_gpu_hour:g}",
        ]
        if pool.mig:
            layout = ", ".join(f"{profile}: {count}" for profile, count in pool.mig)
            lines.append(f"    mig: {{{layout}}}   # slices per GPU, from the MIG gres types")
        lines.append("    nodes:")
        for name, switch in pool.nodes:
            lines.append(
                f"      - {{name: {name}, switch: {switch}}}" if switch else f"      - {name}"
            )
        executor = {"kind": "slurm", "partition": pool.partition, **executor_extra}
        if pool.gres:
            executor["gres"] = pool.gres
        body = ", ".join(f"{key}: {_quote(value)}" for key, value in executor.items())
        lines.append(f"    executor: {{{body}}}")
        lines += [f"    # note: {note}" for note in pool.notes]
    return "\n".join(lines) + "\n"


def _quote(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text_value = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./@-]+", text_value) and text_value.upper() not in (
        "NO", "YES", "ON", "OFF", "TRUE", "FALSE", "NULL", "Y", "N",
    ):  # fmt: skip
        return text_value
    return '"' + text_value.replace("\\", "\\\\").replace('"', '\\"') + '"'
