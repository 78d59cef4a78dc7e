"""Small hand-written offers tables for tests that must know every row."""

from __future__ import annotations

from pathlib import Path

HEADER = (
    "cloud,region,zone,instance_type,accelerator,accelerator_count,accelerator_memory_gib,"
    "vcpus,memory_gib,interconnect,price_on_demand,price_spot,spot_interruption_rate,"
    "capacity,source,as_of"
)

ROWS = (
    "aws,us-east-1,,p4d.24xlarge,A100,8,40,96,1152,nvlink+efa,21.9576,9.5,,,test,2026-11-20",
    "aws,eu-central-1,,p4d.24xlarge,A100,8,40,96,1152,nvlink+efa,25.5,,,,test,2026-11-20",
    "gcp,us-central1,us-central1-a,a2-highgpu-8g,A100,8,40,96,680,nvlink,29.39,11.6,,,test,2026-11-20",
    "gcp,europe-west4,europe-west4-a,a2-highgpu-1g,A100,1,40,12,85,,3.67,1.2,,,test,2020-01-01",
    "azure,westeurope,,Standard_ND96asr_v4,A100,8,40,96,900,nvlink+infiniband,27.2,,,,test,2026-11-20",
    "aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
    "gcp,us-central1,us-central1-a,n1-standard-4,T4,1,16,4,15,,0.54,0.18,,,test,2026-11-20",
    "aws,us-east-1,,m6i.2xlarge,,0,,8,32,,0.384,0.15,,,test,2026-11-20",
)


def write_catalog(path: Path, rows: tuple[str, ...] = ROWS) -> Path:
    path.write_text("\n".join((HEADER, *rows)) + "\n")
    return path
