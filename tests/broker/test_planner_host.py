"""GPU host floors in the planner: a GPU job that states no vCPUs or memory gets a host
no smaller than the clouds pair with that GPU (pricing.gpus.HOST_FLOORS)."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd

from broker.planner.plan import plan
from broker.spec import Amount, GpuAsk, JobSpec, Requirements
from pricing.gpus import host_floor
from pricing.query import OfferIndex
from pricing.synthetic import synthetic_offers
from pricing.table import OfferTable

NOW = datetime(2026, 11, 1, tzinfo=UTC)
NAN = float("nan")


def table(rows: list[tuple[str, str, str, str, float, float, float, float]]) -> OfferIndex:
    """Offers (cloud, region, type, GPU, count, vCPUs, GiB, on-demand price)."""
    template = synthetic_offers(1, seed=1).iloc[:1]
    frame = pd.concat([template] * len(rows), ignore_index=True)
    for i, (cloud, region, kind, gpu, count, vcpus, memory, price) in enumerate(rows):
        frame.loc[i, ["cloud", "region", "zone", "instance_type", "accelerator"]] = [
            cloud,
            region,
            "",
            kind,
            gpu,
        ]
        frame.loc[i, ["accelerator_count", "vcpus", "memory_gib", "price_on_demand"]] = [
            count,
            vcpus,
            memory,
            price,
        ]
    frame["interconnect"] = ""
    frame["price_spot"] = NAN
    return OfferIndex(OfferTable.from_frame(frame))


T4_OFFERS = [
    ("gcp", "us-central1", "n1-standard-1", "T4", 1.0, 1.0, 3.75, 0.40),
    ("gcp", "us-central1", "n1-standard-4", "T4", 1.0, 4.0, 15.0, 0.54),
    ("gcp", "us-central1", "n1-highmem-4", "T4", 1.0, 4.0, 26.0, 0.58),
    ("aws", "us-east-1", "g4dn.xlarge", "T4", 1.0, 4.0, 16.0, 0.60),
]


def job(*asks: GpuAsk, **requirements) -> JobSpec:
    return JobSpec("j", "t", Requirements(accelerators=asks, **requirements))


def test_a_t4_gets_the_cheapest_host_with_4_vcpus_and_16_gib():
    decision = plan(job(GpuAsk("T4", 1.0)), table(T4_OFFERS), NOW)
    assert [p.instance_type for p in decision.placements] == ["n1-highmem-4", "g4dn.xlarge"]
    reasons = {r.reason: r.count for r in decision.rejected}
    assert reasons["vCPUs not 4+ (the host default for T4:1; set resources.cpus to change it)"] == 1
    assert (
        reasons["memory not 16+ GiB (the host default for T4:1; set resources.memory to change it)"]
        == 1
    )
    notes = decision.placements[0].cost.assumptions
    assert any(n.startswith("host default per node: T4:1 4+ vCPUs and 16+ GiB") for n in notes)


def test_the_floor_scales_with_the_gpu_count():
    rows = [
        ("gcp", "us-central1", "n1-standard-8", "T4", 4.0, 8.0, 30.0, 1.5),
        ("gcp", "us-central1", "n1-standard-16", "T4", 4.0, 16.0, 60.0, 2.0),
        ("gcp", "us-central1", "n1-highmem-16", "T4", 4.0, 16.0, 104.0, 2.4),
    ]
    decision = plan(job(GpuAsk("T4", 4.0)), table(rows), NOW)
    floor = host_floor("T4")
    assert floor is not None and (floor.vcpus_per_gpu, floor.memory_gib_per_gpu) == (4, 16)
    assert [p.instance_type for p in decision.placements] == ["n1-highmem-16"]


def test_explicit_cpus_and_memory_win_over_the_floor():
    small = job(GpuAsk("T4", 1.0), cpus=Amount(1), memory_gib=Amount(1))
    assert plan(small, table(T4_OFFERS), NOW).placements[0].instance_type == "n1-standard-1"
    # Only cpus stated: memory still gets the T4's floor (16 GiB), so the 15-GiB host is out.
    cpus_only = job(GpuAsk("T4", 1.0), cpus=Amount(4))
    decision = plan(cpus_only, table(T4_OFFERS), NOW)
    assert [p.instance_type for p in decision.placements] == ["n1-highmem-4", "g4dn.xlarge"]
    notes = decision.placements[0].cost.assumptions
    assert any("T4:1 16+ GiB (" in n and "vCPUs" not in n.split("(")[0] for n in notes)


def test_each_gpu_alternative_gets_its_own_floor():
    rows = [
        ("gcp", "us-central1", "n1-standard-4", "T4", 1.0, 4.0, 15.0, 0.30),  # below T4's
        ("gcp", "us-central1", "n1-highmem-8", "V100", 1.0, 8.0, 52.0, 2.9),
        ("gcp", "us-central1", "n1-standard-8", "V100", 1.0, 8.0, 30.0, 2.5),  # below V100's
    ]
    decision = plan(job(GpuAsk("T4", 1.0), GpuAsk("V100", 1.0)), table(rows), NOW)
    assert [p.instance_type for p in decision.placements] == ["n1-highmem-8"]
    reasons = [r.reason for r in decision.rejected]
    default = "(the host default for {}; set resources.memory to change it)"
    assert f"memory not 16+ GiB {default.format('T4:1')}" in reasons
    assert f"memory not 32+ GiB {default.format('V100:1')}" in reasons


def test_on_prem_nodes_and_unknown_figures_pass_the_floor_but_not_an_ask():
    rows = [
        ("onprem", "lab", "desk-t4-node", "T4", 1.0, 2.0, 8.0, 0.05),
        ("aws", "us-east-1", "odd-t4", "T4", 1.0, NAN, NAN, 0.10),
        ("aws", "us-east-1", "g4dn.xlarge", "T4", 1.0, 4.0, 16.0, 0.60),
    ]
    index = table(rows)
    floor = plan(job(GpuAsk("T4", 1.0)), index, NOW)
    assert [p.instance_type for p in floor.placements] == ["desk-t4-node", "odd-t4", "g4dn.xlarge"]
    asked = plan(job(GpuAsk("T4", 1.0), cpus=Amount(4), memory_gib=Amount(16)), index, NOW)
    assert [p.instance_type for p in asked.placements] == ["g4dn.xlarge"]


def test_cpu_only_jobs_get_no_floor():
    rows = [("aws", "us-east-1", "t3.micro", "", 0.0, 2.0, 1.0, 0.01)]
    decision = plan(job(), table(rows), NOW)
    assert [p.instance_type for p in decision.placements] == ["t3.micro"]
    assert not any("host default" in n for n in decision.placements[0].cost.assumptions)


def test_a_job_the_floor_makes_infeasible_gets_a_hint_to_state_a_smaller_host():
    from broker.planner.hints import relaxation_hints

    small_hosts = [("gcp", "us-central1", "n1-standard-1", "T4", 1.0, 1.0, 3.75, 0.40)]
    index = table(small_hosts)
    t4 = job(GpuAsk("T4", 1.0), memory_gib=Amount(1))
    assert not plan(t4, index, NOW).feasible
    hints = {h.constraint: h.suggestion for h in relaxation_hints(t4, index, NOW)}
    assert hints["resources.cpus"].startswith("set a smaller host than the GPU's default")
    assert "n1-standard-1" in hints["resources.cpus"]
    # Dropping the stated memory brings the T4's floor back: still infeasible, no hint.
    assert "resources.memory" not in hints
