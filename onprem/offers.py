"""On-prem pools as rows of the offers table, so the planner weighs them beside the clouds.

One row per pool; the unit sold is one whole node of the pool:

| column | value |
|---|---|
| cloud, region, zone | "onprem", the pool's `location.region`, the pool name |
| instance_type | "<pool>-node" |
| accelerator, accelerator_count | canonical GPU name, `gpus_per_node` |
| accelerator_memory_gib | memory per GPU from `pricing.gpus` |
| vcpus, memory_gib | per node |
| interconnect | "nvlink" if `nvlink_domain` > 1, "infiniband" if `fabric` is; "+"-joined |
| price_on_demand | `cost_per_gpu_hour` x `gpus_per_node` (the amortised price of a node-hour) |
| price_spot, spot_interruption_rate | NaN: pools have no spot market |
| capacity | free GPUs / `gpus_per_node` (see below) |
| source, as_of | "onprem:<path>", the file's modification date |

Capacity follows the offers schema: it counts instances, here nodes, and for a
pool it is the pool's free GPUs divided by the GPUs per node, a float (12 free
GPUs on 8-GPU nodes give 1.5), so that a partly used pool still shows what it
can hold. Every GPU is free until the broker runs work there: pass the GPUs in
use per pool as `used_gpus`; `free_gpus` gives the count in GPUs.

RoCE is not in the interconnect vocabulary (nvlink, infiniband, efa) and is not
InfiniBand, so a RoCE pool claims no fabric in the table; the `Pool` keeps its
`fabric` for the topology-aware allocator.

`pool_countries` (region -> country, for data-residency filters) is defined in
`onprem.inventory` and re-exported here beside the offers it qualifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import TYPE_CHECKING

from onprem.inventory import Pool, pool_countries

if TYPE_CHECKING:
    from pricing.table import OfferTable

__all__ = ["free_gpus", "interconnect", "pool_countries", "pools_to_offers"]


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
        free[pool.name] = max(0, pool.total_gpus - used)
    return free


def pools_to_offers(
    pools: list[Pool],
    used_gpus: Mapping[str, int] | None = None,
    *,
    today: date | None = None,
) -> OfferTable:
    """The pools as an offers table (pricing.schema), one row per pool.

    `today` stands for the clock: the `as_of` of pools built in code rather than
    read from a file (theirs is the file's date).
    """
    from pricing.gpus import find_gpu
    from pricing.schema import COLUMN_NAMES
    from pricing.table import OfferTable

    if not pools:
        return OfferTable.from_columns({name: [] for name in COLUMN_NAMES})
    free = free_gpus(pools, used_gpus)
    fallback_date = (today or date.today()).isoformat()
    rows = []
    for pool in pools:
        model = find_gpu(pool.gpu)
        rows.append(
            {
                "cloud": "onprem",
                "region": pool.region,
                "zone": pool.name,
                "instance_type": f"{pool.name}-node",
                "accelerator": model.name if model else pool.gpu,
                "accelerator_count": float(pool.gpus_per_node),
                "accelerator_memory_gib": model.memory_gib if model else float("nan"),
                "vcpus": float(pool.vcpus_per_node),
                "memory_gib": float(pool.memory_gib_per_node),
                "interconnect": interconnect(pool.nvlink_domain, pool.fabric),
                "price_on_demand": pool.price_per_node_hour,
                "price_spot": float("nan"),
                "spot_interruption_rate": float("nan"),
                "capacity": free[pool.name] / pool.gpus_per_node,
                "source": pool.source,
                "as_of": pool.as_of or fallback_date,
            }
        )
    return OfferTable.from_columns({name: [row[name] for row in rows] for name in COLUMN_NAMES})
