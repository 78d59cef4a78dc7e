"""What runs on the pools now, in the units of the offers table: GPUs and MIG slices in
use per pool, read from the engines (Slurm's `sinfo` for Slurm pools, plus what the
pool's pending jobs ask for; the broker's own attempts on the nodes for SSH and local
pools).

A pool whose engine cannot be asked counts as full: nothing should be placed where
the broker cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from onprem.executors.base import Executor
from onprem.inventory import Pool
from providers.errors import ProviderError

if TYPE_CHECKING:
    from pricing.table import OfferTable


@dataclass(frozen=True)
class PoolUse:
    """GPUs in use per pool, slices in use per pool and profile, and per pool the sliced
    nodes that still have a free slice."""

    gpus: dict[str, int] = field(default_factory=dict)
    slices: dict[str, dict[str, int]] = field(default_factory=dict)
    sliced_free_nodes: dict[str, int] = field(default_factory=dict)


def pool_use(pools: Iterable[Pool], executor_of: Callable[[str], Executor]) -> PoolUse:
    """The use of every pool (see the module docstring)."""
    from onprem.executors.slurm import SlurmExecutor

    use = PoolUse()
    for pool in pools:
        executor = executor_of(pool.name)
        waiting: dict[str, int] = {}  # Slurm: what the pool's pending jobs ask, per profile
        try:
            if isinstance(executor, SlurmExecutor):
                per_node, waiting = _slurm_snapshot(pool, executor)
            else:
                per_node = _own_use(pool, executor)
        except ProviderError:
            per_node = {n.name: (n.gpus if not n.mig else 0, dict(n.slices)) for n in pool.nodes}
        gpus = waiting.pop("", 0)
        slices: dict[str, int] = dict(waiting)
        free_sliced = 0
        for node in pool.nodes:
            whole, sliced = per_node.get(node.name, (0, {}))
            gpus += whole if not node.mig else 0
            for profile, count in sliced.items():
                slices[profile] = slices.get(profile, 0) + count
            if node.mig and any(sliced.get(p, 0) < total for p, total in node.slices.items()):
                free_sliced += 1
        use.gpus[pool.name] = gpus
        use.slices[pool.name] = slices
        use.sliced_free_nodes[pool.name] = free_sliced
    return use


def _slurm_use(pool: Pool, executor) -> dict[str, tuple[int, dict[str, int]]]:
    """Node -> (whole GPUs in use, slices in use per profile) from sinfo."""
    from onprem.shapes import Shape, gres_type

    table = executor.gres_use()
    gres = executor.options.gres
    out = {}
    for node in pool.nodes:
        kinds = table.get(node.name)
        if kinds is None:  # Slurm does not know the node: nothing can run there
            out[node.name] = (node.gpus, dict(node.slices))
            continue
        whole = kinds.get(gres, (0, 0))[1] if not node.mig else 0
        sliced = {
            profile: kinds.get(gres_type(Shape(pool, profile=profile, slices=1), gres), (0, 0))[1]
            for profile in node.slices
        }
        out[node.name] = (whole, sliced)
    return out


def _slurm_snapshot(
    pool: Pool, executor, attempts: int = 3
) -> tuple[dict[str, tuple[int, dict[str, int]]], dict[str, int]]:
    """Use per node (sinfo) and what pending jobs ask (squeue), read as one picture.

    A job that starts between the two reads would be in neither, so the pending jobs
    are read before and after sinfo: when the same jobs are pending both times, no job
    crossed over. After `attempts` tries, a job pending in either read counts as
    waiting: counting a starting job twice makes the pool look fuller, never emptier.
    """
    before = executor.pending_gres()
    for _ in range(attempts):
        per_node = _slurm_use(pool, executor)
        after = executor.pending_gres()
        if after.keys() == before.keys():
            return per_node, _slurm_waiting(pool, executor, after)
        either, before = {**after, **before}, after
    return per_node, _slurm_waiting(pool, executor, either)


def _slurm_waiting(pool: Pool, executor, pending: dict[str, dict[str, int]]) -> dict[str, int]:
    """Profile ("" for whole GPUs) -> GPUs or slices the pool's pending jobs ask for."""
    from onprem.shapes import Shape, gres_type

    gres = executor.options.gres
    profiles = {p for node in pool.nodes for p in node.slices}
    kind_of = {gres_type(Shape(pool, profile=p, slices=1), gres): p for p in profiles}
    kind_of[gres] = ""
    out: dict[str, int] = {}
    for asks in pending.values():
        for kind, count in asks.items():
            if kind in kind_of:
                out[kind_of[kind]] = out.get(kind_of[kind], 0) + count
    return out


def _own_use(pool: Pool, executor: Executor) -> dict[str, tuple[int, dict[str, int]]]:
    """Node -> (whole GPUs in use, slices in use per profile) from the broker's attempts."""
    from onprem.allocation import slot_names

    profile_of = {
        node.name: {
            slot: p for p, slots in slot_names(node.gpus, node.mig).items() for slot in slots
        }
        for node in pool.nodes
    }
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for status in executor.list_attempts():
        if not status.active:
            continue
        for held in status.gpu_ids:
            host, _, ids = held.partition(":")
            whole, sliced = out.get(host, (0, {}))
            for item in filter(None, ids.split(",")):
                if "." in item:
                    profile = profile_of.get(host, {}).get(item, "")
                    sliced[profile] = sliced.get(profile, 0) + 1
                else:
                    whole += 1
            out[host] = (whole, sliced)
    return out


def live_pool_offers(pools: list[Pool], workdir: Path) -> OfferTable:
    """The pools as offers with their capacity as the engines report it now (the offers
    of an OnPremProvider over `pools`, without one)."""
    from onprem.executors import executor_for
    from onprem.offers import pools_to_offers

    executors: dict[str, Executor] = {}
    by_name = {pool.name: pool for pool in pools}

    def executor_of(name: str) -> Executor:
        if name not in executors:
            executors[name] = executor_for(by_name[name], workdir)
        return executors[name]

    try:
        use = pool_use(pools, executor_of)
    finally:
        for executor in executors.values():
            executor.close()
    return pools_to_offers(pools, use.gpus, used_slices=use.slices)
