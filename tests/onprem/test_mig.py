"""MIG slices: the GPU facts, pools.yaml layouts and their errors, slice offers, and a plan
that places a slice job on a pool and never on a cloud."""

from __future__ import annotations

import json
from datetime import date
from fractions import Fraction

import pytest

from onprem.inventory import load_pools
from onprem.offers import pools_to_offers, slice_share
from pricing.gpus import (
    GPU_MODELS,
    MIG_SLICES,
    canonical_gpu,
    find_gpu,
    mig_profiles,
    mig_slice_name,
    parse_gpu_request,
    slice_of,
)
from pricing.userio.errors import UserInputError
from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog

SLICED = """\
pools:
  - name: mig-lab
    location: {region: lab-us, country: US}
    gpu: A100-80GB
    gpus_per_node: 2
    vcpus_per_node: 28
    memory_gib_per_node: 280
    cost_per_gpu_hour: 1.40
    mig: {1g.10gb: 7}
    nodes:
      - m1
      - {name: m2, mig: {3g.40gb: 2}}
      - {name: m3, mig: {}}
"""


def test_slices_are_gpu_names_of_their_own_but_not_cloud_models():
    assert canonical_gpu("a100-1G.10GB") == "A100-1g.10gb"
    assert find_gpu("a100_1g.10gb").name == "A100-1g.10gb"  # Slurm's gres type spelling
    assert parse_gpu_request("H100-3g.40gb:2") == ("H100-3g.40gb", 2.0)
    assert not {m.name for m in MIG_SLICES} & {m.name for m in GPU_MODELS}
    one, seven = find_gpu("A100-1g.10gb"), find_gpu("A100-7g.80gb")
    assert (one.memory_gib, seven.memory_gib) == (10, 80)
    assert (
        one.relative_throughput
        < seven.relative_throughput
        <= find_gpu("A100-80GB").relative_throughput
    )
    assert slice_of("H100-3g.40gb")[1].compute == 3 and slice_of("H100") is None


def test_profiles_follow_nvidias_tables():
    a100_80 = {p.name: p.per_gpu for p in mig_profiles("A100-80GB")}
    assert a100_80 == {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }
    assert {p.name: p.per_gpu for p in mig_profiles("A100")}["1g.10gb"] == 4  # 40 GB A100
    assert mig_profiles("T4") == ()
    assert mig_slice_name("A100-80GB", "3g.40gb") == "A100-3g.40gb"
    with pytest.raises(ValueError, match="did you mean 1g.10gb"):
        mig_slice_name("A100-80GB", "1g.10g")


def test_layouts_load_per_pool_and_per_node(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(SLICED)
    (pool,) = load_pools(path)
    m1, m2, m3 = pool.nodes
    assert m1.mig == (("1g.10gb", 7),) and m1.slices == {"1g.10gb": 14}
    assert m2.slices == {"3g.40gb": 4} and m3.mig == ()
    assert pool.whole_gpus == 2 and pool.total_gpus == 6


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("1g.10gb: 7}", "1g.10g: 7}", "pools[0].mig.1g.10g", "did you mean '1g.10gb'"),
        ("1g.10gb: 7}", "1g.10gb: 8}", "pools[0].mig.1g.10gb", "at most 7 x 1g.10gb"),
        ("1g.10gb: 7}", "3g.40gb: 2, 1g.10gb: 1}", "pools[0].mig", "7 compute and 9 memory"),
        ("gpu: A100-80GB", "gpu: T4", "pools[0].mig", "T4 cannot be partitioned"),
    ],
)
def test_bad_layouts_are_located(tmp_path, old, new, field, message):
    path = tmp_path / "pools.yaml"
    path.write_text(SLICED.replace(old, new, 1))
    with pytest.raises(UserInputError) as info:
        load_pools(path)
    first = info.value.errors[0]
    assert (first.line, first.field) == (9, field)
    assert message in first.message


def test_node_layouts_are_checked_too(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(
        SLICED.replace("{name: m2, mig: {3g.40gb: 2}}", "{name: m2, mig: {3g.40gb: 3}}")
    )
    with pytest.raises(UserInputError) as info:
        load_pools(path)
    assert info.value.field == "pools[0].nodes[1].mig.3g.40gb"
    assert info.value.line == 12


def test_slice_rows_are_priced_at_their_share(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(SLICED)
    pools = load_pools(path)
    rows = pools_to_offers(pools, used_slices={"mig-lab": {"1g.10gb": 5}}).to_frame()
    records = sorted(rows.to_dict("records"), key=lambda row: row["accelerator_count"])
    by_type = {row["instance_type"]: row for row in records}  # a node's row: its whole GPUs
    assert set(by_type) == {
        "mig-lab-node",
        *(f"mig-lab-1g.10gbx{c}" for c in range(1, 15)),
        *(f"mig-lab-3g.40gbx{c}" for c in range(1, 5)),
    }
    one = by_type["mig-lab-1g.10gbx1"]
    assert one["accelerator"] == "A100-1g.10gb" and one["accelerator_count"] == 1
    assert one["price_on_demand"] == pytest.approx(1.40 / 7)
    assert one["capacity"] == 14 - 5 and by_type["mig-lab-1g.10gbx2"]["capacity"] == 4.5
    assert one["vcpus"] == pytest.approx(28 / 2 / 7) and one["accelerator_memory_gib"] == 10
    half = by_type["mig-lab-3g.40gbx1"]
    assert half["price_on_demand"] == pytest.approx(1.40 / 2)  # 2 x 3g.40gb make one GPU
    whole = by_type["mig-lab-node"]
    assert whole["capacity"] == 1.0 and whole["price_on_demand"] == pytest.approx(2.80)
    assert slice_share((("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2)), "2g.20gb", "H100") == (
        Fraction(2, 7)
    )


def test_a_fully_sliced_pool_sells_no_whole_nodes():
    from onprem.inventory import Pool, PoolNode

    node = PoolNode("n3", "p", 1, mig=(("1g.10gb", 7),))
    pool = Pool("p", "r", "US", "A100-80GB", 1, 16, 64.0, 0, "ethernet", 1.0, (node,))
    rows = pools_to_offers([pool], today=date(2026, 1, 1)).to_frame()
    assert set(rows["accelerator"]) == {"A100-1g.10gb"} and len(rows) == 7


def test_plan_places_a_slice_job_on_the_pool_and_never_on_a_cloud(capsys, tmp_path):
    catalog = write_catalog(tmp_path / "offers.csv")
    pools = tmp_path / "pools.yaml"
    pools.write_text(SLICED)
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: broker/v1\nname: tiny\nteam: ml\nresources:\n"
        "  accelerators: A100-1g.10gb:2\nrun:\n  command: echo hi\n"
        "runtime:\n  estimate_hours: 1\n"
    )
    result = run_cli(
        capsys, "plan", str(job), "--catalog", str(catalog), "--pools", str(pools), "-o", "json"
    )
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["placements"] and all(p["cloud"] == "onprem" for p in plan["placements"])
    best = plan["placements"][0]
    assert best["instance_type"] == "mig-lab-1g.10gbx2" and best["accelerator"] == "A100-1g.10gb"
    assert best["price_per_hour"] == pytest.approx(2 * 1.40 / 7)
    without = run_cli(capsys, "plan", str(job), "--catalog", str(catalog), "-o", "json")
    assert without.code == 3  # no pool: no cloud sells a slice
