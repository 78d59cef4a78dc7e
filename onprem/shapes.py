"""From a launch request to what an on-prem pool must run: which pool, how many GPUs or
MIG slices per node, and (for pools the broker allocates itself) which ones.

A request names its pool by `zone` (the pool's name in the offers table) or by its
instance type: `<pool>-node` is whole GPUs (the pool's GPUs per node unless the
request plans fewer), `<pool>-<profile>x<count>` is `count` MIG slices of one node
(`onprem.offers`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from onprem.allocation import Allocation, allocate, allocate_slices, node_states
from onprem.executors.base import AttemptStatus
from onprem.inventory import Pool
from pricing.userio.suggest import hint
from providers.base import LaunchRequest
from providers.errors import InvalidRequest

_SLICE_TYPE = re.compile(r"(?P<profile>\d+g\.\d+gb)x(?P<count>\d+)")


@dataclass(frozen=True)
class Shape:
    """What one node of an attempt holds: whole GPUs, or `slices` of `profile`."""

    pool: Pool
    gpus_per_node: int = 0
    profile: str = ""
    slices: int = 0

    @property
    def share(self) -> float:
        """The fraction of a node's GPUs (for its share of CPUs)."""
        if self.profile:
            from onprem.offers import slice_share

            layout = next((n.mig for n in self.pool.nodes if self.profile in n.slices), ())
            gpus = slice_share(layout, self.profile, self.pool.gpu) * self.slices if layout else 0
            return float(gpus) / self.pool.gpus_per_node
        return self.gpus_per_node / self.pool.gpus_per_node


def shape_of(pools: Mapping[str, Pool], request: LaunchRequest, provider: str) -> Shape:
    """The pool and shape `request` asks for; InvalidRequest (with a hint) otherwise."""
    if request.cloud != "onprem":
        raise InvalidRequest(provider, f"on-prem pools do not run {request.cloud} instances")
    pool = pools.get(request.zone) if request.zone else None
    if pool is None:
        prefixed = [p for name, p in pools.items() if request.instance_type.startswith(name + "-")]
        pool = max(prefixed, key=lambda p: len(p.name), default=None)
    if pool is None:
        wanted = request.zone or request.instance_type
        raise InvalidRequest(provider, f"no pool {wanted!r}{hint(wanted, list(pools))}")
    if pool.region != request.region:
        raise InvalidRequest(
            provider, f"pool {pool.name} is in {pool.region}, not {request.region}"
        )
    if request.nodes > len(pool.nodes):
        raise InvalidRequest(
            provider, f"pool {pool.name} has {len(pool.nodes)} nodes, {request.nodes} asked"
        )
    kind = request.instance_type.removeprefix(pool.name + "-")
    if kind == "node":
        asked = int(request.accelerator_count)
        per_node = asked if 0 < asked <= pool.gpus_per_node else pool.gpus_per_node
        return Shape(pool, gpus_per_node=per_node)
    match = _SLICE_TYPE.fullmatch(kind)
    if match is None or not any(match["profile"] in n.slices for n in pool.nodes):
        types = [f"{pool.name}-node"] + sorted(
            {f"{pool.name}-{p}x1" for n in pool.nodes for p in n.slices}
        )
        wanted = request.instance_type
        raise InvalidRequest(provider, f"pool {pool.name} sells no {wanted}{hint(wanted, types)}")
    if request.nodes != 1:
        raise InvalidRequest(provider, "MIG slices of one attempt come from one node")
    return Shape(pool, profile=match["profile"], slices=int(match["count"]))


def gres_type(shape: Shape, gres: str) -> str:
    """Slurm's gres type for the shape: the pool's `gres`, or `<gres>_<profile>` for a
    slice (Slurm's NVML naming), or the slice's Slurm alias when no `gres` is set."""
    if not shape.profile:
        return gres
    if gres:
        return f"{gres}_{shape.profile}"
    from pricing.gpus import find_gpu, mig_slice_name

    model = find_gpu(mig_slice_name(shape.pool.gpu, shape.profile))
    return model.aliases[0] if model and model.aliases else ""


def place(
    shape: Shape, nodes: int, running: Iterable[AttemptStatus], *, nvlink: bool = False
) -> Allocation | None:
    """The broker's own allocation for a pool it runs (SSH, local), given what runs there
    now; None when it does not fit now."""
    pool = shape.pool
    used: dict[str, list[int | str]] = {}
    for status in running:
        if not status.active:
            continue
        for held in status.gpu_ids:
            host, _, ids = held.partition(":")
            used.setdefault(host, []).extend(i if "." in i else int(i) for i in ids.split(",") if i)
    states = node_states(
        [(n.name, n.gpus, n.switch, n.mig) for n in pool.nodes], pool.nvlink_domain, used
    )
    if shape.profile:
        return allocate_slices(states, shape.profile, shape.slices)
    policy = "prefer" if pool.fabric == "infiniband" else "ignore"
    return allocate(states, shape.gpus_per_node, nodes, nvlink=nvlink, same_switch=policy)


def devices_of(allocation: Allocation, device_ids: Sequence[int]) -> tuple[tuple[str, ...], ...]:
    """Per granted node, the device ids its GPUs are (a local pool's `devices` maps the
    pool's GPU indices onto the machine's; otherwise they are the same)."""
    out = []
    for grant in allocation.grants:
        ids = [str(device_ids[g]) if device_ids else str(g) for g in grant.gpus]
        out.append(tuple(ids))
    return tuple(out)


def pool_gang_nodes(pools: Iterable[Pool], region: str, instance_type: str) -> int:
    """The most nodes one gang of `instance_type` may have in `region`'s pools: every node
    of the pool that sells it (one Slurm job or one allocation spans at most all of
    them; a larger gang would wait forever), 1 for MIG slices (no gang of slices), 0
    where no pool sells the type. The pool is found as `shape_of` finds it."""
    named = [p for p in pools if instance_type.startswith(p.name + "-") and p.region == region]
    pool = max(named, key=lambda p: len(p.name), default=None)
    if pool is None:
        return 0
    return len(pool.nodes) if instance_type == f"{pool.name}-node" else 1
