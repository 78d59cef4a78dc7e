"""The SkyPilot (schema v8) catalog importer and the instance-family facts it uses.

Two sets of tests: on the tiny hand-written catalog in tests/fakes/skypilot_small
(always run), and on the real snapshot in shared/catalogs/skypilot/v8 (skipped,
with the reason, when that folder is absent).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pricing.families import (
    accelerator_override,
    interconnect_column,
    interconnect_for,
)
from pricing.gpus import find_gpu
from pricing.importers.skypilot import CatalogImportError, import_skypilot
from pricing.schema import COLUMN_NAMES, conform

SMALL = Path(__file__).resolve().parents[1] / "fakes" / "skypilot_small"


def _shared_skypilot_dir() -> Path:
    shared = os.environ.get("BROKER_SHARED_DIR")
    base = Path(shared) if shared else Path(__file__).resolve().parents[3] / "shared"
    return base / "catalogs" / "skypilot"


REAL = _shared_skypilot_dir()


def _one(frame: pd.DataFrame, **where) -> pd.Series:
    """The single row matching every column == value in `where`."""
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        mask &= frame[column] == value
    rows = frame[mask]
    assert len(rows) == 1, f"expected one row for {where}, got {len(rows)}"
    return rows.iloc[0]


def _absent(frame: pd.DataFrame, **where) -> bool:
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        mask &= frame[column] == value
    return not mask.any()


def _check_common(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == list(COLUMN_NAMES)
    pd.testing.assert_frame_equal(conform(frame), frame)
    for price in ("price_on_demand", "price_spot"):
        assert not (frame[price] <= 0).any(), f"{price} has 0 or negative values"
    assert (frame["price_on_demand"].notna() | frame["price_spot"].notna()).all()
    for name in frame["accelerator"].unique():
        model = find_gpu(name) if name else None
        assert model is None or model.name == name, f"{name!r} is not canonical"
    cpu = frame["accelerator"] == ""
    assert (frame.loc[cpu, "accelerator_count"] == 0).all()
    assert (frame.loc[~cpu, "accelerator_count"] > 0).all()
    assert (frame.loc[frame["cloud"] == "azure", "zone"] == "").all()


# --- the hand-written catalog -------------------------------------------------------


@pytest.fixture(scope="module")
def small() -> pd.DataFrame:
    return import_skypilot(SMALL, as_of="2026-01-02")


def test_small_schema_and_invariants(small):
    _check_common(small)
    assert small["cloud"].value_counts().to_dict() == {"aws": 5, "gcp": 15, "azure": 4}
    assert set(small["as_of"]) == {"2026-01-02"}
    assert set(small["source"]) == {
        "skypilot:aws/vms.csv",
        "skypilot:gcp/vms.csv",
        "skypilot:azure/vms.csv",
    }


def test_small_gcp_fixed_machine_is_host_plus_gpus(small):
    row = _one(small, cloud="gcp", instance_type="a2-highgpu-1g", zone="us-test1-a")
    assert (row["accelerator"], row["accelerator_count"]) == ("A100", 1)
    assert row["price_on_demand"] == pytest.approx(1.0 + 2.0)
    assert row["price_spot"] == pytest.approx(0.5 + 1.0)
    assert row["accelerator_memory_gib"] == 40
    assert (row["vcpus"], row["memory_gib"]) == (12, 85)
    g2 = _one(small, cloud="gcp", instance_type="g2-standard-24")
    assert (g2["accelerator"], g2["accelerator_count"]) == ("L4", 2)
    assert (g2["price_on_demand"], g2["price_spot"]) == pytest.approx((0.9 + 1.2, 0.4 + 0.5))


def test_small_gcp_fixed_machine_without_gpu_row_in_zone_is_dropped(small):
    assert _absent(small, instance_type="a2-highgpu-1g", zone="us-test1-b")
    assert _absent(small, instance_type="a2-megagpu-16g")


def test_small_gcp_mega_and_a4(small):
    mega = _one(small, instance_type="a3-megagpu-8g")
    assert (mega["accelerator"], mega["interconnect"]) == ("H100", "nvlink")
    assert (mega["price_on_demand"], mega["price_spot"]) == pytest.approx((90.0, 33.0))
    # a4 hosts are listed at 0: GCP bills A4 as GPU slices that include the host.
    a4 = _one(small, instance_type="a4-highgpu-8g")
    assert (a4["accelerator"], a4["accelerator_memory_gib"]) == ("B200", 180)
    assert (a4["price_on_demand"], a4["price_spot"]) == pytest.approx((90.0, 35.0))


def test_small_gcp_spot_missing_when_gpu_spot_missing(small):
    row = _one(small, instance_type="a3-highgpu-8g")
    assert row["price_on_demand"] == pytest.approx(80.0)
    assert math.isnan(row["price_spot"])


def test_small_gcp_n1_attachments_respect_limits(small):
    gpu = small[(small["cloud"] == "gcp") & small["instance_type"].str.startswith("n1-")]
    gpu = gpu[gpu["accelerator"] != ""]
    combos = set(
        zip(gpu["instance_type"], gpu["accelerator"], gpu["accelerator_count"], strict=True)
    )
    # V100:1 allows 12 vCPUs / 78 GB: only n1-standard-8. T4:4 allows 96 / 624.
    # T4:8 is not a GCP configuration; n1-ultramem is not a GPU host.
    assert combos == {
        ("n1-standard-8", "V100", 1),
        ("n1-standard-8", "T4", 4),
        ("n1-standard-16", "T4", 4),
        ("n1-highmem-96", "T4", 4),
    }
    row = _one(gpu, instance_type="n1-standard-8", accelerator="V100")
    assert (row["price_on_demand"], row["price_spot"]) == pytest.approx((0.4 + 2.5, 0.1 + 1.25))
    assert row["zone"] == "us-test1-a"


def test_small_gcp_cpu_rows_tpus_and_zero_prices(small):
    gcp = small[small["cloud"] == "gcp"]
    cpu = set(gcp.loc[gcp["accelerator"] == "", "instance_type"])
    assert cpu == {
        "e2-micro",
        "e2-standard-4",
        "n1-standard-8",
        "n1-standard-16",
        "n1-highmem-96",
        "n1-ultramem-40",
    }
    assert not gcp["accelerator"].str.startswith("tpu").any()
    micro = _one(gcp, instance_type="e2-micro")
    assert math.isnan(micro["price_on_demand"]) and micro["price_spot"] == 0.003
    assert _absent(gcp, instance_type="e2-small")  # price 0 and no spot: no offer


def test_small_aws(small):
    aws = small[small["cloud"] == "aws"]
    p4d = _one(aws, instance_type="p4d.24xlarge", zone="ust1-az1")
    assert (p4d["price_on_demand"], p4d["price_spot"]) == (20.0, 8.0)
    assert (p4d["interconnect"], p4d["accelerator_memory_gib"]) == ("nvlink+efa", 40)
    assert math.isnan(_one(aws, instance_type="p4d.24xlarge", zone="ust1-az2")["price_spot"])
    g6f = _one(aws, instance_type="g6f.2xlarge")
    assert g6f["accelerator_count"] == 0.25
    assert g6f["accelerator_memory_gib"] == 24  # memory of the whole GPU: 6144 MiB / 0.25
    assert _one(aws, instance_type="p3.8xlarge")["interconnect"] == "nvlink"
    cpu = _one(aws, instance_type="m6i.2xlarge")
    assert (cpu["accelerator"], cpu["accelerator_count"], cpu["vcpus"]) == ("", 0, 8)
    assert _absent(aws, instance_type="p5e.48xlarge")  # neither price known


def test_small_azure(small):
    azure = small[small["cloud"] == "azure"]
    assert set(azure["zone"]) == {""}
    nvl = _one(azure, instance_type="Standard_NC40ads_H100_v5")
    assert (nvl["accelerator"], nvl["accelerator_memory_gib"]) == ("H100-NVL", 94)
    nd = _one(azure, instance_type="Standard_ND96isr_H100_v5")
    assert (nd["accelerator"], nd["interconnect"]) == ("H100", "nvlink+infiniband")
    assert _one(azure, instance_type="Standard_NV6ads_A10_v5")["accelerator_count"] == 0.167
    assert _absent(azure, instance_type="Standard_NV12ads_V710_v5")  # GPU unknown
    assert _absent(azure, instance_type="Standard_B1s")  # price 0, no spot


def test_directory_forms_clouds_and_as_of(tmp_path):
    shutil.copytree(SMALL, tmp_path / "v8")
    os.remove(tmp_path / "v8" / "azure" / "vms.csv")
    stamp = 1767355200  # 2026-01-02T12:00:00Z
    os.utime(tmp_path / "v8" / "aws" / "vms.csv", (stamp, stamp))
    frame = import_skypilot(tmp_path)  # the parent of v8/ is accepted; azure is skipped
    assert set(frame["cloud"]) == {"aws", "gcp"}
    assert set(frame.loc[frame["cloud"] == "aws", "as_of"]) == {"2026-01-02"}
    only = import_skypilot(tmp_path / "v8", clouds=["GCP"])
    assert set(only["cloud"]) == {"gcp"}
    empty = import_skypilot(tmp_path, clouds=["azure"])
    assert list(empty.columns) == list(COLUMN_NAMES) and empty.empty


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="did you mean azure"):
        import_skypilot(SMALL, clouds=["azur"])
    with pytest.raises(FileNotFoundError):
        import_skypilot(tmp_path / "nowhere")
    (tmp_path / "gcp").mkdir()
    path = tmp_path / "gcp" / "vms.csv"
    path.write_text("InstanceType,vCPUs,MemoryGiB,Region,AvailabilityZone,Price,SpotPrice\n")
    with pytest.raises(CatalogImportError, match="AcceleratorName") as caught:
        import_skypilot(tmp_path)
    assert caught.value.column == "AcceleratorName" and caught.value.path == path
    assert "gcp/vms.csv" in str(caught.value)
    header = (SMALL / "gcp" / "vms.csv").read_text().splitlines()[0]
    path.write_text(f"{header}\nn1-standard-8,8,30,,,,us-test1,us-test1-a,cheap,0.1\n")
    with pytest.raises(CatalogImportError, match="'Price'"):
        import_skypilot(tmp_path)


# --- instance-family facts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("cloud", "instance_type", "expected"),
    [
        ("aws", "p4d.24xlarge", "nvlink+efa"),
        ("aws", "p4de.24xlarge", "nvlink+efa"),
        ("aws", "p5.48xlarge", "nvlink+efa"),
        ("aws", "p5en.48xlarge", "nvlink+efa"),
        ("aws", "p6-b200.48xlarge", "nvlink+efa"),
        ("aws", "p3dn.24xlarge", "nvlink+efa"),
        ("aws", "p3.8xlarge", "nvlink"),
        ("aws", "p3.16xlarge", "nvlink"),
        ("aws", "p3.2xlarge", ""),
        ("aws", "p5.4xlarge", ""),
        ("aws", "g5.48xlarge", ""),
        ("gcp", "a2-highgpu-1g", ""),
        ("gcp", "a2-highgpu-2g", "nvlink"),
        ("gcp", "a2-megagpu-16g", "nvlink"),
        ("gcp", "a3-edgegpu-8g-nolssd", "nvlink"),
        ("gcp", "a4-highgpu-8g", "nvlink"),
        ("gcp", "g2-standard-96", ""),
        ("gcp", "n1-standard-8", ""),
        ("azure", "Standard_ND96asr_v4", "nvlink+infiniband"),
        ("azure", "Standard_ND96amsr_A100_v4", "nvlink+infiniband"),
        ("azure", "Standard_ND96isr_H200_v5", "nvlink+infiniband"),
        ("azure", "Standard_ND96isr_MI300X_v5", "nvlink+infiniband"),
        ("azure", "Standard_ND96is_MI300X_v5", "nvlink"),
        ("azure", "Standard_NC24ads_A100_v4", ""),
        ("azure", "Standard_NC48ads_A100_v4", "nvlink"),
        ("azure", "Standard_NC96ads_A100_v4", "nvlink"),
        ("azure", "Standard_NC40ads_H100_v5", ""),
        ("azure", "Standard_NC80adis_H100_v5", "nvlink"),
        ("azure", "Standard_D2s_v5", ""),
        ("onprem", "anything", ""),
    ],
)
def test_interconnect_for(cloud, instance_type, expected):
    assert interconnect_for(cloud, instance_type) == expected


def test_interconnect_column_matches_scalar():
    clouds = pd.Series(["aws", "gcp", "azure", "aws", "gcp"], index=[5, 6, 7, 8, 9])
    types = pd.Series(
        ["p4d.24xlarge", "a3-megagpu-8g", "Standard_ND96isr_H100_v5", "a3-megagpu-8g", None],
        index=clouds.index,
    )
    out = interconnect_column(clouds, types)
    assert out.tolist() == ["nvlink+efa", "nvlink", "nvlink+infiniband", "", ""]
    assert out.index.tolist() == [5, 6, 7, 8, 9] and out.dtype == "string"
    assert interconnect_column("aws", types).tolist() == ["nvlink+efa", "", "", "", ""]
    assert accelerator_override("azure", "Standard_NC80adis_H100_v5") == ("H100-NVL", 2.0)
    assert accelerator_override("aws", "Standard_NC80adis_H100_v5") is None


# --- the real snapshot ---------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> pd.DataFrame:
    if not (REAL / "v8").is_dir():
        pytest.skip(f"SkyPilot catalog snapshot not found at {REAL} (set BROKER_SHARED_DIR)")
    return import_skypilot(REAL)


def _need(real: pd.DataFrame, cloud: str) -> pd.DataFrame:
    part = real[real["cloud"] == cloud]
    if part.empty:
        pytest.skip(f"{REAL}/v8/{cloud}/vms.csv not present")
    return part


def test_real_schema_and_invariants(real):
    _check_common(real)
    assert "H100-MEGA" not in set(real["accelerator"])
    assert not real["accelerator"].str.startswith("tpu-").any()


def test_real_gcp_a2_highgpu_8g(real):
    gcp = _need(real, "gcp")
    # a2-highgpu-8g,96.0,680.0,,,,us-central1,us-central1-a,5.91582,2.958
    # ,,,A100,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,
    #   23.47126,11.4728
    row = _one(gcp, instance_type="a2-highgpu-8g", zone="us-central1-a")
    assert (row["accelerator"], row["accelerator_count"]) == ("A100", 8)
    assert row["price_on_demand"] == pytest.approx(29.38708)
    assert row["price_spot"] == pytest.approx(14.4308)
    assert (row["vcpus"], row["memory_gib"], row["accelerator_memory_gib"]) == (96, 680, 40)


def test_real_gcp_n1_with_v100(real):
    gcp = _need(real, "gcp")
    # n1-standard-8,8.0,30.0,,,,us-central1,us-central1-a,0.38,0.13954
    # ,,,V100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},us-central1,us-central1-a,2.48,1.24
    zone = "us-central1-a"
    row = _one(gcp, instance_type="n1-standard-8", accelerator="V100", accelerator_count=1.0,
               zone=zone)  # fmt: skip
    assert row["price_on_demand"] == pytest.approx(2.86)
    assert row["price_spot"] == pytest.approx(1.37954)
    # n1-standard-16 has 16 vCPUs: over the 12 allowed with one V100, within 24 for two.
    assert _absent(gcp, instance_type="n1-standard-16", accelerator="V100",
                   accelerator_count=1.0, zone=zone)  # fmt: skip
    _one(gcp, instance_type="n1-standard-16", accelerator="V100", accelerator_count=2.0, zone=zone)
    # n1-standard-96,96.0,360.0,,,,us-central1,us-central1-a,4.55998,1.67448
    # ,,,T4,4,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},us-central1,us-central1-a,1.4,0.6616
    t4 = _one(gcp, instance_type="n1-standard-96", accelerator="T4", zone=zone)
    assert (t4["price_on_demand"], t4["price_spot"]) == pytest.approx((5.95998, 2.33608))


def test_real_gcp_n1_limits_hold_everywhere(real):
    gcp = _need(real, "gcp")
    n1 = gcp[gcp["instance_type"].str.startswith("n1-") & (gcp["accelerator"] != "")]
    max_vcpus = {("T4", 1): 48, ("T4", 2): 48, ("T4", 4): 96, ("V100", 1): 12, ("V100", 2): 24,
                 ("V100", 4): 48, ("V100", 8): 96, ("P100", 1): 16, ("P100", 2): 32,
                 ("P100", 4): 64, ("P4", 1): 24, ("P4", 2): 48, ("P4", 4): 96}  # fmt: skip
    pairs = zip(n1["accelerator"], n1["accelerator_count"].astype(int), strict=True)
    limit = [max_vcpus[pair] for pair in pairs]
    assert len(n1) > 1000
    assert (n1["vcpus"].to_numpy() <= limit).all()


def test_real_gcp_mega_and_a4(real):
    gcp = _need(real, "gcp")
    # a3-megagpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,3.86318
    # ,,,H100-MEGA,8,{...81920...},us-central1,us-central1-a,82.75421,33.8016
    mega = _one(gcp, instance_type="a3-megagpu-8g", zone="us-central1-a")
    assert (mega["accelerator"], mega["interconnect"]) == ("H100", "nvlink")
    assert (mega["price_on_demand"], mega["price_spot"]) == pytest.approx((92.21427, 37.66478))
    # a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-b,0.0,0.0
    # ,,,B200,8,{...184320...},us-central1,us-central1-b,90.216,34.2368
    a4 = _one(gcp, instance_type="a4-highgpu-8g", zone="us-central1-b")
    assert (a4["price_on_demand"], a4["price_spot"]) == pytest.approx((90.216, 34.2368))


def test_real_aws_p4d_us_east_1(real):
    aws = _need(real, "aws")
    p4d = aws[(aws["instance_type"] == "p4d.24xlarge") & (aws["region"] == "us-east-1")]
    # p4d.24xlarge,A100,8.0,96.0,1152.0,"{...}",21.957642,2.465500,us-east-1,use1-az1,x86_64
    assert set(p4d["zone"]) == {"use1-az1", "use1-az2", "use1-az4", "use1-az6"}
    assert (p4d["price_on_demand"] == 21.957642).all()
    assert _one(p4d, zone="use1-az1")["price_spot"] == 2.4655
    assert set(p4d["interconnect"]) == {"nvlink+efa"}


def test_real_azure_per_region(real):
    azure = _need(real, "azure")
    assert set(azure["zone"]) == {""}
    # Standard_ND96isr_H100_v5,H100,8,96,1900,H100,98.32,18.169536,eastus,V2
    nd = _one(azure, instance_type="Standard_ND96isr_H100_v5", region="eastus")
    assert (nd["price_on_demand"], nd["price_spot"]) == (98.32, 18.169536)
    assert nd["interconnect"] == "nvlink+infiniband"
