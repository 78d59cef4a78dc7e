"""The bundled offline price snapshot `pricing/data/offers.csv` (see SOURCES.md beside it)."""

from __future__ import annotations

import csv
import re
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

import pricing
from pricing.gpus import find_gpu
from pricing.schema import COLUMN_NAMES, INTERCONNECTS, conform

SNAPSHOT = Path(pricing.__file__).parent / "data" / "offers.csv"
SOURCES = SNAPSHOT.parent / "SOURCES.md"

G_SIZES = (
    "xlarge",
    "2xlarge",
    "4xlarge",
    "8xlarge",
    "12xlarge",
    "16xlarge",
    "24xlarge",
    "48xlarge",
)
G4DN_SIZES = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal")

# Instance types the snapshot must carry, by cloud, each in at least 3 of its cloud's regions.
REQUIRED: dict[str, list[str]] = {
    "aws": [
        "p5.48xlarge",
        "p5en.48xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p3.2xlarge",
        "p3.8xlarge",
        "p3.16xlarge",
        "p3dn.24xlarge",
        *(f"g6e.{size}" for size in G_SIZES),
        *(f"g6.{size}" for size in G_SIZES),
        *(f"g5.{size}" for size in G_SIZES),
        *(f"g4dn.{size}" for size in G4DN_SIZES),
        "m6i.2xlarge",
        "m6i.4xlarge",
    ],
    "gcp": [
        "a3-highgpu-8g",
        "a3-megagpu-8g",
        "a2-highgpu-1g",
        "a2-highgpu-2g",
        "a2-highgpu-4g",
        "a2-highgpu-8g",
        "a2-megagpu-16g",
        "a2-ultragpu-1g",
        "a2-ultragpu-2g",
        "a2-ultragpu-4g",
        "a2-ultragpu-8g",
        *(f"g2-standard-{n}" for n in (4, 8, 12, 16, 24, 32, 48, 96)),
        "n2-standard-8",
        "n2-standard-16",
    ],
    "azure": [
        "Standard_ND96isr_H100_v5",
        "Standard_ND96asr_v4",
        "Standard_ND96amsr_A100_v4",
        "Standard_NC24ads_A100_v4",
        "Standard_NC48ads_A100_v4",
        "Standard_NC96ads_A100_v4",
        "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5",
        "Standard_NC4as_T4_v3",
        "Standard_NC8as_T4_v3",
        "Standard_NC16as_T4_v3",
        "Standard_NC64as_T4_v3",
        "Standard_NV6ads_A10_v5",
        "Standard_NV12ads_A10_v5",
        "Standard_NV18ads_A10_v5",
        "Standard_NV36ads_A10_v5",
        "Standard_NV72ads_A10_v5",
        "Standard_D8s_v5",
        "Standard_D16s_v5",
    ],
}
# GCP N1 hosts with attached GPUs: (accelerator, count) -> host machine type.
GCP_N1: dict[tuple[str, int], str] = {
    ("T4", 1): "n1-standard-8",
    ("T4", 2): "n1-standard-16",
    ("T4", 4): "n1-standard-32",
    ("V100", 1): "n1-standard-8",
    ("V100", 2): "n1-standard-16",
    ("V100", 4): "n1-standard-32",
    ("V100", 8): "n1-standard-64",
    ("P100", 1): "n1-standard-8",
    ("P100", 2): "n1-standard-16",
    ("P100", 4): "n1-standard-32",
}

# GCP list prices (cloud.google.com/compute/gpus-pricing and vm-instance-pricing, us-central1).
A100_GPU_HOURLY = 2.933908
A2_HIGHGPU_8G_HOST_HOURLY = 5.91582


@pytest.fixture(scope="module")
def offers() -> pd.DataFrame:
    raw = pd.read_csv(SNAPSHOT, keep_default_na=False, na_values=[""])
    return conform(raw)


def regions_of(offers: pd.DataFrame, cloud: str, mask: pd.Series) -> set[str]:
    return set(offers.loc[(offers["cloud"] == cloud) & mask, "region"])


def test_header_is_the_offers_columns_in_order() -> None:
    with SNAPSHOT.open(newline="") as f:
        header = next(csv.reader(f))
    assert tuple(header) == COLUMN_NAMES


def test_loads_through_conform(offers: pd.DataFrame) -> None:
    assert len(offers) > 300
    assert set(offers["cloud"]) == {"aws", "gcp", "azure"}
    assert not offers.duplicated(
        ["cloud", "region", "zone", "instance_type", "accelerator", "accelerator_count"]
    ).any()


@pytest.mark.parametrize("cloud", sorted(REQUIRED))
def test_required_types_in_three_regions(offers: pd.DataFrame, cloud: str) -> None:
    thin = {}
    for itype in REQUIRED[cloud]:
        regions = regions_of(offers, cloud, offers["instance_type"] == itype)
        if len(regions) < 3:
            thin[itype] = sorted(regions)
    assert not thin, f"{cloud} types in fewer than 3 regions: {thin}"


def test_p5e_is_listed_where_sold(offers: pd.DataFrame) -> None:
    # p5e.48xlarge has no public on-demand price (Capacity Blocks only) and a spot
    # market in two regions only; it is the one required type below 3 regions.
    rows = offers[offers["instance_type"] == "p5e.48xlarge"]
    assert len(set(rows["region"])) >= 2
    assert (rows["accelerator"] == "H200").all()
    assert rows["price_on_demand"].isna().all()
    assert rows["price_spot"].notna().all()


def test_gcp_n1_hosts_with_gpus_in_three_regions(offers: pd.DataFrame) -> None:
    thin = {}
    for (gpu, count), host in GCP_N1.items():
        mask = (
            (offers["instance_type"] == host)
            & (offers["accelerator"] == gpu)
            & (offers["accelerator_count"] == count)
        )
        regions = regions_of(offers, "gcp", mask)
        if len(regions) < 3:
            thin[f"{host}+{gpu}x{count}"] = sorted(regions)
    assert not thin, f"GCP N1 GPU offers in fewer than 3 regions: {thin}"


def test_each_cloud_has_at_least_three_regions(offers: pd.DataFrame) -> None:
    for cloud, group in offers.groupby("cloud"):
        assert group["region"].nunique() >= 3, cloud


def test_no_price_is_zero_and_every_row_has_one(offers: pd.DataFrame) -> None:
    for column in ("price_on_demand", "price_spot"):
        present = offers[column].dropna()
        assert (present > 0).all(), column
    assert (offers["price_on_demand"].notna() | offers["price_spot"].notna()).all()


def test_spot_is_cheaper_than_on_demand(offers: pd.DataFrame) -> None:
    both = offers.dropna(subset=["price_on_demand", "price_spot"])
    assert len(both) > 200
    dear = both[both["price_spot"] >= both["price_on_demand"]]
    assert dear.empty, dear[["cloud", "region", "instance_type"]].to_string()


def test_accelerators_are_canonical(offers: pd.DataFrame) -> None:
    gpu_rows = offers[offers["accelerator"] != ""]
    for name in sorted(set(gpu_rows["accelerator"])):
        model = find_gpu(name)
        assert model is not None and model.name == name, name
    for _, row in gpu_rows.iterrows():
        assert row["accelerator_count"] > 0
        assert row["accelerator_memory_gib"] == find_gpu(row["accelerator"]).memory_gib


def test_cpu_rows_have_no_accelerator(offers: pd.DataFrame) -> None:
    cpu = offers[offers["accelerator"] == ""]
    assert set(cpu["instance_type"]) == {
        "m6i.2xlarge",
        "m6i.4xlarge",
        "n2-standard-8",
        "n2-standard-16",
        "Standard_D8s_v5",
        "Standard_D16s_v5",
    }
    assert (cpu["accelerator_count"] == 0).all()
    assert cpu["accelerator_memory_gib"].isna().all()


def test_fractional_a10_sizes(offers: pd.DataFrame) -> None:
    expected = {
        "Standard_NV6ads_A10_v5": 1 / 6,
        "Standard_NV12ads_A10_v5": 1 / 3,
        "Standard_NV18ads_A10_v5": 1 / 2,
        "Standard_NV36ads_A10_v5": 1.0,
        "Standard_NV72ads_A10_v5": 2.0,
    }
    for itype, count in expected.items():
        counts = offers.loc[offers["instance_type"] == itype, "accelerator_count"]
        assert counts.to_numpy() == pytest.approx([count] * len(counts), abs=1e-5), itype


def test_interconnect_values(offers: pd.DataFrame) -> None:
    for value in set(offers["interconnect"]):
        if value:
            assert set(value.split("+")) <= set(INTERCONNECTS), value
    single_gpu = offers[offers["accelerator_count"] <= 1]
    assert set(single_gpu["interconnect"]) <= {"", "efa"}


def test_rows_have_source_url_and_iso_as_of(offers: pd.DataFrame) -> None:
    assert offers["source"].str.startswith("https://").all()
    assert offers["zone"].eq("").all()  # prices are per region
    for as_of in set(offers["as_of"]):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", as_of), as_of
        assert date.fromisoformat(as_of) <= date.today()


def test_gcp_price_is_host_plus_gpus(offers: pd.DataFrame) -> None:
    row = offers[
        (offers["cloud"] == "gcp")
        & (offers["region"] == "us-central1")
        & (offers["instance_type"] == "a2-highgpu-8g")
    ]
    assert len(row) == 1
    price = float(row["price_on_demand"].iloc[0])
    assert price > 8 * A100_GPU_HOURLY  # the host's cores and memory were added
    assert price == pytest.approx(8 * A100_GPU_HOURLY + A2_HIGHGPU_8G_HOST_HOURLY, abs=1e-3)
    # N1: the host alone costs more than nothing, so host + one T4 is above the T4 price.
    t4 = offers[
        (offers["cloud"] == "gcp")
        & (offers["region"] == "us-central1")
        & (offers["instance_type"] == "n1-standard-8")
        & (offers["accelerator"] == "T4")
    ]
    assert float(t4["price_on_demand"].iloc[0]) > 0.35


def test_small_file_with_provenance_note() -> None:
    assert SNAPSHOT.stat().st_size < 300 * 1024
    assert SOURCES.exists()
