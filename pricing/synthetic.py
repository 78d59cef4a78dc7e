"""Synthetic offers catalogs of any size, for benchmarks and property tests.

Plausible, not real: GPU models from `pricing.gpus`, regions from
`pricing.regions`, prices scaled by each model's throughput with noise. Seeded,
so the same arguments always give the same table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pricing.gpus import GPU_MODELS
from pricing.regions import REGION_COUNTRY
from pricing.schema import conform

if TYPE_CHECKING:
    import pandas as pd

COUNTS = (1.0, 2.0, 4.0, 8.0)


def synthetic_offers(rows: int, seed: int = 0, cpu_share: float = 0.1) -> pd.DataFrame:
    """A conforming offers table of `rows` rows."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    regions = sorted(REGION_COUNTRY)
    region_pick = rng.integers(0, len(regions), rows)
    cloud = np.array([regions[i][0] for i in region_pick], dtype=object)
    region = np.array([regions[i][1] for i in region_pick], dtype=object)
    zone_letter = np.array(list("abc"), dtype=object)[rng.integers(0, 3, rows)]
    is_cpu = rng.random(rows) < cpu_share
    models = GPU_MODELS
    model_pick = rng.integers(0, len(models), rows)
    accelerator = np.array([models[i].name for i in model_pick], dtype=object)
    memory = np.array([models[i].memory_gib for i in model_pick], dtype=float)
    speed = np.array([models[i].relative_throughput for i in model_pick])
    count = np.array(COUNTS)[rng.integers(0, len(COUNTS), rows)]
    accelerator[is_cpu] = ""
    count[is_cpu] = 0.0
    memory[is_cpu] = np.nan
    vcpus = np.where(is_cpu, 2.0 ** rng.integers(1, 7, rows), count * 12)
    per_gpu = 1.2 * speed * rng.uniform(0.8, 1.4, rows)
    on_demand = np.where(is_cpu, vcpus * 0.048, count * per_gpu).round(5)
    spot = (on_demand * rng.uniform(0.25, 0.7, rows)).round(5)
    on_demand[rng.random(rows) < 0.03] = np.nan  # some offers are spot-only
    spot[rng.random(rows) < 0.15] = np.nan  # some have no spot market
    frame = pd.DataFrame(
        {
            "cloud": cloud,
            "region": region,
            "zone": np.char.add(region.astype(str), np.char.add("-", zone_letter.astype(str))),
            "instance_type": [
                f"syn-{a or 'cpu'}-{int(c)}x-{i % 7}"
                for i, (a, c) in enumerate(zip(accelerator, count, strict=True))
            ],
            "accelerator": accelerator,
            "accelerator_count": count,
            "accelerator_memory_gib": memory,
            "vcpus": vcpus,
            "memory_gib": vcpus * 8,
            "interconnect": np.where(count >= 8, "nvlink", ""),
            "price_on_demand": on_demand,
            "price_spot": spot,
            "spot_interruption_rate": np.where(
                np.isnan(spot), np.nan, rng.uniform(0.005, 0.1, rows)
            ),
            "capacity": np.nan,
            "source": "synthetic",
            "as_of": "2026-01-01",
        }
    )
    return conform(frame)
