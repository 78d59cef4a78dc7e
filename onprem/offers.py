"""On-prem pools as rows of the offers table, so the planner weighs them beside the clouds.

Rows for a pool's whole GPUs (left out when every node is sliced with MIG): one for
a whole node, and one for each smaller count of its GPUs, which the allocator packs
onto a node (`onprem.allocation`), so a 2-GPU job fits an 8-GPU pool:

| column | value |
|---|---|
| cloud, region, zone | "onprem", the pool's `location.region`, the pool name |
| instance_type | "<pool>-node" |
| accelerator, accelerator_count | canonical GPU name, g = `gpus_per_node`, then g-1 .. 1 |
| accelerator_memory_gib | memory per GPU from `pricing.gpus` |
| vcpus, memory_gib | per node, times count / g |
| interconnect | "nvlink" if the count fits one NVLink domain (> 1), "infiniband" if `fabric` is |
| price_on_demand | `cost_per_gpu_hour` x count (the amortised price of those GPUs for an hour) |
| price_spot, spot_interruption_rate | NaN: pools have no spot market |
| capacity | free GPUs / count (see below) |
| source, as_of | "onprem:<path>", the file's modification date |

Capacity follows the offers schema: it counts instances, here units of `count` GPUs,
the pool's free GPUs divided by the count, a float (12 free GPUs on 8-GPU nodes give
1.5 whole nodes), so that a partly used pool still shows what it can hold. Every GPU
is free until the broker runs work there: pass the GPUs in use per pool as
`used_gpus`; `free_gpus` gives the count in GPUs.

A pool whose nodes are sliced with MIG (`mig:` in pools.yaml) also sells slices:
one row per MIG profile and slice count c from 1 to the slices of that profile on
one node (at most MAX_SLICE_ROWS), since a job's slices come from one node:

| column | value |
|---|---|
| instance_type | "<pool>-<profile>x<c>" (`lab-a100-1g.10gbx2`) |
| accelerator, accelerator_count | the slice's name (`A100-1g.10gb`, pricing.gpus), c |
| accelerator_memory_gib | the profile's memory |
| vcpus, memory_gib | the node's, times the GPUs the c slices stand for / GPUs per node |
| interconnect | "" (a slice has no NVLink of its own) |
| price_on_demand | c x the slice's share (below) x `cost_per_gpu_hour` |
| capacity | free slices of the profile / c (pass the slices in use as `used_slices`) |

A slice's share of its GPU is the profile's compute slices over those of the GPU's
whole layout (7 x 1g.10gb: 1/7 each; 2 x 3g.40gb: 1/2 each), so a fully sliced GPU
costs what the whole GPU costs.

Clouds never sell these names, so a manifest asking `A100-1g.10gb:1` can only be
placed on a pool that has that slice.

RoCE is not in the interconnect vocabulary (nvlink, infiniband, efa) and is not
InfiniBand, so a RoCE pool claims no fabric in the table; the `Pool` keeps its
`fabric` for the topology-aware allocator.

`pool_countries` (region -> country, for data-residency filters) is defined in
`onprem.inventory` and re-exported here beside the offers it qualifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from fractions import Fraction
from typing import TYPE_CHECKING

from onprem.inventory import Pool, pool_countries

if TYPE_CHECKING:
    from pricing.table import OfferTable

__all__ = [
    "free_gpus",
    "interconnect",
    "pool_countries",
    "pools_to_offers",
    "slice_share",
]

MAX_SLICE_ROWS = 16  # slice counts offered per profile: 1 .. min(slices on a node, this)


def interconnect(nvlink_domain: int, fabric: str) -> str:
    """The offers-table interconnect for a pool's NVLink domain and fabric."""
    parts = []
    if nvlink_domain > 1:
        parts.append("nvlink")
    if fabric == "infiniband":
        parts.append("infiniband")
    return "+".join(parts)


def free_gpus(pools: list[Pool], used_gpus: Mapping[str, int] | None = None) -> dict[str, int]:
    """Pool name -> GPUs free. `used_gpus` maps pool names to GPUs in use.

    Use beyond the pool's size counts as full; names of pools not in `pools`
    are ignored (work may still run on a pool just removed from the file).
    """
    used_gpus = used_gpus or {}
    free = {}
    for pool in pools:
        used = used_gpus.get(pool.name, 0)
        if used < 0:
            raise ValueError(f"GPUs in use in pool {pool.name!r} cannot be negative: {used}")
        free[pool.name] = max(0, pool.whole_gpus - used)
    return free


def slice_share(layout: tuple[tuple[str, int], ...], profile: str, gpu: str) -> Fraction:
    """The share of one GPU's rate one `profile` slice of a GPU sliced as `layout` costs:
    its compute slices over those of the whole layout (pricing.gpus profiles)."""
    from pricing.gpus import mig_profiles

    compute = {p.name: p.compute for p in mig_profiles(gpu)}
    total = sum(compute[name] * count for name, count in layout)
    return Fraction(compute[profile], total)


def _slices(pool: Pool) -> dict[str, tuple[int, int, Fraction]]:
    """Profile -> (slices in the pool, the most on one node, share of a GPU) for `pool`;
    a profile's share is that of the first node layout holding it."""
    out: dict[str, tuple[int, int, Fraction]] = {}
    for node in pool.nodes:
        for profile, on_node in node.slices.items():
            total, most, share = out.get(profile, (0, 0, Fraction(0)))
            if not total:
                share = slice_share(node.mig, profile, pool.gpu)
            out[profile] = (total + on_node, max(most, on_node), share)
    return out


def pools_to_offers(
    pools: list[Pool],
    used_gpus: Mapping[str, int] | None = None,
    *,
    used_slices: Mapping[str, Mapping[str, int]] | None = None,
    today: date | None = None,
) -> OfferTable:
    """The pools as an offers table (pricing.schema): a row per pool with whole GPUs, and
    its slice rows (see the module docstring). `used_slices`: pool -> profile -> slices
    in use.

    `today` stands for the clock: the `as_of` of pools built in code rather than
    read from a file (theirs is the file's date).
    """
    from pricing.gpus import find_gpu
    from pricing.schema import COLUMN_NAMES
    from pricing.table import OfferTable

    free = free_gpus(pools, used_gpus)
    fallback_date = (today or date.today()).isoformat()
    rows = []
    for pool in pools:
        as_of = pool.as_of or fallback_date
        slices = _slice_rows(pool, (used_slices or {}).get(pool.name, {}), as_of)
        if not pool.whole_gpus:
            rows.extend(slices)
            continue
        model = find_gpu(pool.gpu)
        for count in range(pool.gpus_per_node, 0, -1):  # the whole node first
            share = count / pool.gpus_per_node
            domain = pool.nvlink_domain if count <= pool.nvlink_domain else 0
            rows.append(
                {
                    "cloud": "onprem",
                    "region": pool.region,
                    "zone": pool.name,
                    "instance_type": f"{pool.name}-node",
                    "accelerator": model.name if model else pool.gpu,
                    "accelerator_count": float(count),
                    "accelerator_memory_gib": model.memory_gib if model else float("nan"),
                    "vcpus": float(pool.vcpus_per_node) * share,
                    "memory_gib": float(pool.memory_gib_per_node) * share,
                    "interconnect": interconnect(domain, pool.fabric),
                    "price_on_demand": pool.cost_per_gpu_hour * count,
                    "price_spot": float("nan"),
                    "spot_interruption_rate": float("nan"),
                    "capacity": free[pool.name] / count,  # of the unsliced nodes
                    "source": pool.source,
                    "as_of": as_of,
                }
            )
        rows.extend(slices)
    return OfferTable.from_columns({name: [row[name] for row in rows] for name in COLUMN_NAMES})


def _slice_rows(pool: Pool, used: Mapping[str, int], as_of: str) -> list[dict]:
    from pricing.gpus import find_gpu, mig_slice_name

    rows = []
    for profile, (total, most, share) in _slices(pool).items():
        name = mig_slice_name(pool.gpu, profile)
        model = find_gpu(name)
        in_use = used.get(profile, 0)
        if in_use < 0:
            raise ValueError(f"slices in use in pool {pool.name!r} cannot be negative")
        left = max(0, total - in_use)
        for count in range(1, min(most, MAX_SLICE_ROWS) + 1):
            gpus = share * count  # the GPUs these slices stand for
            rows.append(
                {
                    "cloud": "onprem",
                    "region": pool.region,
                    "zone": pool.name,
                    "instance_type": f"{pool.name}-{profile}x{count}",
                    "accelerator": name,
                    "accelerator_count": float(count),
                    "accelerator_memory_gib": model.memory_gib if model else float("nan"),
                    "vcpus": float(pool.vcpus_per_node * gpus / pool.gpus_per_node),
                    "memory_gib": float(pool.memory_gib_per_node * gpus / pool.gpus_per_node),
                    "interconnect": "",
                    "price_on_demand": float(gpus * Fraction(str(pool.cost_per_gpu_hour))),
                    "price_spot": float("nan"),
                    "spot_interruption_rate": float("nan"),
                    "capacity": left / count,
                    "source": pool.source,
                    "as_of": as_of,
                }
            )
    return rows
