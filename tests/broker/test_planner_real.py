"""The planner on real SkyPilot catalogs (../shared), checked against the raw CSV rows.

The expected figures are recomputed here from the CSV files with the csv module,
independently of the importer and the planner: GCP offers as host + GPUs in the
same zone, spot costs with the documented default interruption rates.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from broker.planner import cost
from broker.planner.plan import plan
from broker.spec import Amount, GpuAsk, JobSpec, Requirements, RuntimeEstimate
from pricing.query import OfferIndex
from pricing.regions import country_of
from pricing.table import OfferTable
from tests.conftest import skypilot_catalogs

CATALOGS = skypilot_catalogs()
pytestmark = pytest.mark.skipif(
    CATALOGS is None, reason="../shared/catalogs/skypilot/v8 not present (real-data tests)"
)
NOW = datetime(2026, 11, 1, tzinfo=UTC)
EU = ("DE", "NL", "FR", "IE", "BE", "FI", "SE", "IT", "ES", "PL", "AT")


@pytest.fixture(scope="module")
def index() -> OfferIndex:
    from pricing.importers.skypilot import import_skypilot

    return OfferIndex(OfferTable.from_frame(import_skypilot(CATALOGS)))


def rows(cloud: str) -> list[dict]:
    with (CATALOGS / cloud / "vms.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def number(text: str) -> float | None:
    return float(text) if text and float(text) > 0 else None


def gcp_fixed(types: set[str], gpus: set[str], count: str, column: str) -> list[tuple]:
    """(price, region) of GCP fixed GPU machines: host + accelerator row of the zone."""
    accel = {}
    hosts = []
    for r in rows("gcp"):
        if (
            not r["InstanceType"]
            and r["AcceleratorName"] in gpus
            and r["AcceleratorCount"] in (count, f"{count}.0")
        ):
            accel[r["AvailabilityZone"]] = number(r[column])
        elif r["InstanceType"] in types:
            hosts.append(r)
    out = []
    for host in hosts:
        gpu_price = accel.get(host["AvailabilityZone"])
        host_price = float(host[column]) if host[column] else None
        if gpu_price is not None and host_price is not None:
            out.append((host_price + gpu_price, host["Region"], "gcp"))
    return out


def simple(cloud: str, gpu: str, count: float, column: str) -> list[tuple]:
    return [
        (number(r[column]), r["Region"], cloud)
        for r in rows(cloud)
        if r["AcceleratorName"] == gpu
        and float(r["AcceleratorCount"] or 0) == count
        and number(r[column]) is not None
    ]


def job(gpu: str, count: float, spot: str, **placement) -> JobSpec:
    return JobSpec(
        "real",
        "t",
        Requirements(accelerators=(GpuAsk(gpu, count),), spot=spot, **placement),
        runtime=RuntimeEstimate(estimate_hours=1.0),
    )


def test_cheapest_a100x8_on_demand(index):
    candidates = (
        simple("aws", "A100", 8, "Price")
        + simple("azure", "A100", 8, "Price")
        + gcp_fixed({"a2-highgpu-8g"}, {"A100"}, "8", "Price")
    )
    best = min(candidates)
    top = plan(job("A100", 8, "never"), index, NOW).placements[0]
    assert top.market == "on-demand"
    assert top.price_per_hour == pytest.approx(best[0], rel=1e-9)
    assert top.expected_cost == pytest.approx(best[0], rel=1e-9)  # 1 hour, nothing to move
    assert (top.cloud, top.region) in {(c, r) for p, r, c in candidates if p == best[0]}


def test_cheapest_h100x8_spot_counts_interruptions(index):
    per_interruption = 0.5 * 1.0 + cost.RESTART_HOURS  # no checkpoint: half the 1 h run
    candidates = (
        simple("aws", "H100", 8, "SpotPrice")
        + simple("azure", "H100", 8, "SpotPrice")
        + gcp_fixed(
            {"a3-highgpu-8g", "a3-edgegpu-8g", "a3-edgegpu-8g-nolssd", "a3-megagpu-8g"},
            {"H100", "H100-MEGA"},
            "8",
            "SpotPrice",
        )
    )
    expected = min(
        price / (1 - cost.DEFAULT_INTERRUPTION_RATE[c] * per_interruption)
        for price, region, c in candidates
    )
    top = plan(job("H100", 8, "only"), index, NOW).placements[0]
    assert top.market == "spot"
    assert top.expected_cost == pytest.approx(expected, rel=1e-9)


def gcp_n1_t4(min_vcpus: float, min_memory: float) -> float:
    """The cheapest GCP N1 host with at least these vCPUs and GiB, plus one T4 in its
    zone, from the raw rows (the importer's host limits: 48 vCPUs, 312 GiB)."""
    hosts = defaultdict(list)
    t4 = {}
    for r in rows("gcp"):
        if (
            r["InstanceType"].startswith("n1-")
            and min_vcpus <= float(r["vCPUs"]) <= 48
            and min_memory <= float(r["MemoryGiB"]) <= 312
            and r["Price"]
        ):
            hosts[r["AvailabilityZone"]].append((float(r["Price"]), r["InstanceType"]))
        if (
            not r["InstanceType"]
            and r["AcceleratorName"] == "T4"
            and r["AcceleratorCount"] in ("1", "1.0")
            and number(r["Price"])
        ):
            t4[r["AvailabilityZone"]] = float(r["Price"])
    return min(min(hosts[z])[0] + price for z, price in t4.items() if hosts[z])


def test_t4_pinned_to_gcp_gets_the_cheapest_n1_host_fit_for_a_t4(index):
    """No cpus or memory stated: the T4's host floor (4 vCPUs, 16 GiB), not n1-standard-1."""
    top = plan(job("T4", 1, "never", clouds=("gcp",)), index, NOW).placements[0]
    assert top.cloud == "gcp" and top.instance_type.startswith("n1-")
    assert top.instance_type != "n1-standard-1"
    assert top.price_per_hour == pytest.approx(gcp_n1_t4(4, 16), rel=1e-9)
    assert any(
        "host default per node: T4:1 4+ vCPUs and 16+ GiB" in note for note in top.cost.assumptions
    )


def test_t4_with_explicit_small_host_gets_the_cheapest_allowed_n1_host(index):
    """Explicit cpus and memory win over the GPU's floor."""
    small = job("T4", 1, "never", clouds=("gcp",))
    small = replace(
        small,
        requirements=replace(small.requirements, cpus=Amount(1), memory_gib=Amount(1)),
    )
    top = plan(small, index, NOW).placements[0]
    assert top.instance_type == "n1-standard-1"
    assert top.price_per_hour == pytest.approx(gcp_n1_t4(0, 0), rel=1e-9)


def test_eu_only_request_stays_in_the_eu(index):
    candidates = [
        c
        for c in simple("aws", "A100", 8, "Price")
        + simple("azure", "A100", 8, "Price")
        + gcp_fixed({"a2-highgpu-8g"}, {"A100"}, "8", "Price")
        if country_of(c[2], c[1]) in EU
    ]
    decision = plan(job("A100", 8, "never", countries=EU), index, NOW)
    assert decision.placements
    assert all(country_of(p.cloud, p.region) in EU for p in decision.placements)
    assert decision.placements[0].price_per_hour == pytest.approx(min(candidates)[0], rel=1e-9)
