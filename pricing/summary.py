"""One row per GPU model: the cheapest price per GPU-hour per cloud and market."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pricing.schema import CLOUDS

if TYPE_CHECKING:
    import pandas as pd


def cheapest_by_gpu(offers: pd.DataFrame) -> pd.DataFrame:
    """Columns: accelerator, accelerator_memory_gib, then `<cloud>_on_demand` and
    `<cloud>_spot` with the lowest USD per GPU-hour (NaN where not sold).

    Prices are divided by the GPU count so that a 1-GPU and an 8-GPU box compare;
    rows without GPUs are left out.
    """
    import pandas as pd

    gpu = offers[(offers["accelerator"] != "") & (offers["accelerator_count"] > 0)]
    per_gpu = pd.DataFrame(
        {
            "accelerator": gpu["accelerator"],
            "cloud": gpu["cloud"],
            "on_demand": gpu["price_on_demand"] / gpu["accelerator_count"],
            "spot": gpu["price_spot"] / gpu["accelerator_count"],
        }
    )
    best = per_gpu.groupby(["accelerator", "cloud"], observed=True)[["on_demand", "spot"]].min()
    wide = best.unstack("cloud")
    clouds = [c for c in CLOUDS if c in set(wide.columns.get_level_values("cloud"))]
    wide = wide.reindex(columns=[(m, c) for c in clouds for m in ("on_demand", "spot")])
    wide.columns = [f"{cloud}_{market}" for market, cloud in wide.columns]
    memory = gpu.groupby("accelerator", observed=True)["accelerator_memory_gib"].max()
    table = wide.join(memory).reset_index()
    return table.sort_values("accelerator_memory_gib", ascending=False, kind="stable")
