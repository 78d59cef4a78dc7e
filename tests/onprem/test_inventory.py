"""onprem.inventory and onprem.offers: the pools file, its errors, and pools as offers."""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onprem.executors.options import LocalOptions
from onprem.inventory import Executor, Pool, PoolNode, load_pools, pool_countries
from onprem.offers import free_gpus, interconnect, pools_to_offers
from pricing.schema import COLUMN_NAMES, OFFER_COLUMNS, conform
from pricing.userio.errors import UserInputError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools.yaml"

# Line numbers in the tests below refer to this text (line 1 is "pools:").
POOL = """\
pools:
  - name: lab-a100
    location: {region: onprem-us-east, country: US}
    gpu: A100-80GB
    gpus_per_node: 8
    vcpus_per_node: 128
    memory_gib_per_node: 1024
    nvlink_domain: 8
    fabric: infiniband
    cost_per_gpu_hour: 1.10
    nodes: [gpu-a01, gpu-a02]
    executor: {kind: local}
"""

SECOND = """\
  - name: lab-t4
    location: {region: onprem-eu, country: DE}
    gpu: t4
    gpus_per_node: 4
    vcpus_per_node: 32
    memory_gib_per_node: 256
    cost_per_gpu_hour: 0.25
    count: 3
"""


def write(tmp_path, text, name="pools.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path, text) -> UserInputError:
    path = write(tmp_path, text)
    with pytest.raises(UserInputError) as info:
        load_pools(path)
    return info.value


def located(err: UserInputError) -> list[tuple[int, int, str]]:
    return [(e.line, e.column, e.field) for e in err.errors]


def test_load_full_pool(tmp_path):
    path = write(tmp_path, POOL + SECOND)
    a100, t4 = load_pools(path)
    assert a100 == Pool(
        name="lab-a100",
        region="onprem-us-east",
        country="US",
        gpu="A100-80GB",
        gpus_per_node=8,
        vcpus_per_node=128,
        memory_gib_per_node=1024.0,
        nvlink_domain=8,
        fabric="infiniband",
        cost_per_gpu_hour=1.10,
        nodes=(PoolNode("gpu-a01", "lab-a100", 8), PoolNode("gpu-a02", "lab-a100", 8)),
        executor=Executor("local", LocalOptions()),
        source=f"onprem:{path.resolve()}",
        as_of=date.fromtimestamp(path.stat().st_mtime).isoformat(),
    )
    assert a100.total_gpus == 16
    # defaults, alias, generated node names
    assert (t4.gpu, t4.fabric, t4.nvlink_domain, t4.executor.kind) == ("T4", "ethernet", 0, "local")
    assert [n.name for n in t4.nodes] == ["lab-t4-0", "lab-t4-1", "lab-t4-2"]


def test_example_file_loads():
    pools = load_pools(EXAMPLE)
    assert [p.name for p in pools] == ["lab-a100", "lab-l40s", "desk-t4"]
    assert pools[0].executor.kind == "slurm" and pools[0].executor.options.partition == "a100"
    assert pool_countries(pools) == {"onprem-us-east": "US", "onprem-oslo": "NO"}


def test_several_documents_are_one_list(tmp_path):
    path = write(tmp_path, POOL + "---\npools:\n" + SECOND)
    assert [p.name for p in load_pools(path)] == ["lab-a100", "lab-t4"]


def test_empty_list_and_missing_ok(tmp_path):
    assert load_pools(write(tmp_path, "pools: []\n")) == []
    assert load_pools(tmp_path / "absent.yaml", missing_ok=True) == []
    with pytest.raises(UserInputError, match="file not found"):
        load_pools(tmp_path / "absent.yaml")


def test_misspelt_key(tmp_path):
    err = load_error(tmp_path, POOL.replace("gpus_per_node:", "gpus_per_nod:"))
    assert located(err) == [(5, 5, "pools[0].gpus_per_nod")]
    assert str(err) == (
        f"{tmp_path / 'pools.yaml'}:5:5: pools[0].gpus_per_nod: "
        "unknown field (did you mean 'gpus_per_node'?)"
    )


def test_bad_gpu_name(tmp_path):
    err = load_error(tmp_path, POOL.replace("A100-80GB", "A10O"))
    assert located(err) == [(4, 10, "pools[0].gpu")]
    assert "unknown GPU 'A10O' (did you mean A100" in err.message


def test_bad_fabric(tmp_path):
    err = load_error(tmp_path, POOL.replace("fabric: infiniband", "fabric: infinband"))
    assert located(err) == [(9, 13, "pools[0].fabric")]
    assert err.message == (
        "'infinband' is not one of infiniband, roce, ethernet (did you mean 'infiniband'?)"
    )


def test_bad_executor_kind(tmp_path):
    err = load_error(tmp_path, POOL.replace("{kind: local}", "{kind: slurmm}"))
    assert located(err) == [(12, 22, "pools[0].executor.kind")]
    assert "(did you mean 'slurm'?)" in err.message


def test_yaml_syntax_error(tmp_path):
    err = load_error(
        tmp_path, POOL.replace("nodes: [gpu-a01, gpu-a02]", "nodes: [gpu-a01, gpu-a02")
    )
    assert (err.line, err.column, err.field) == (12, 13, "")  # the ':' the open list cannot hold
    assert err.message == (
        "YAML syntax error: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 11, column 12)"
    )


def test_duplicate_pool_names(tmp_path):
    second = SECOND.replace("name: lab-t4", "name: lab-a100")
    err = load_error(tmp_path, POOL + second)
    assert located(err) == [(13, 11, "pools[1].name")]
    assert err.message == "duplicate pool name 'lab-a100' (first at line 2)"


def test_duplicate_pool_names_across_documents(tmp_path):
    err = load_error(tmp_path, POOL + "---\n" + POOL)
    assert located(err) == [(15, 11, "pools[0].name")]


def test_duplicate_nodes(tmp_path):
    same_pool = POOL.replace("[gpu-a01, gpu-a02]", "[gpu-a01, gpu-a01]")
    err = load_error(tmp_path, same_pool)
    assert located(err) == [(11, 22, "pools[0].nodes[1]")]
    assert err.message == "node 'gpu-a01' is already listed earlier in this pool"
    other_pool = SECOND.replace("count: 3", "nodes: [gpu-a02]")
    err = load_error(tmp_path, POOL + other_pool)
    assert located(err) == [(20, 13, "pools[1].nodes[0]")]
    assert err.message == "node 'gpu-a02' is already listed in pool 'lab-a100'"


def test_region_in_two_countries(tmp_path):
    err = load_error(tmp_path, POOL + SECOND.replace("onprem-eu", "onprem-us-east"))
    assert located(err) == [(14, 49, "pools[1].location.country")]
    assert err.message == "region 'onprem-us-east' is in US (line 3): one region, one country"


def test_unquoted_norway(tmp_path):
    err = load_error(tmp_path, POOL.replace("country: US", "country: NO"))
    assert located(err) == [(3, 49, "pools[0].location.country")]
    assert 'quote it ("NO")' in err.message


def test_lower_case_country_is_upper_cased(tmp_path):
    (pool,) = load_pools(write(tmp_path, POOL.replace("country: US", "country: us")))
    assert pool.country == "US"


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        ("    nodes: [gpu-a01, gpu-a02]\n", "", (2, 5, "pools[0]"), "give exactly one of nodes"),
        ("nodes: [gpu-a01, gpu-a02]", "nodes: [a]\n    count: 2", (2, 5, "pools[0]"), "exactly"),
        ("nvlink_domain: 8", "nvlink_domain: 3", (8, 20, "pools[0].nvlink_domain"), "divide"),
        ("gpus_per_node: 8", "gpus_per_node: 0", (5, 20, "pools[0].gpus_per_node"), "greater"),
        ("gpus_per_node: 8", "gpus_per_node: '8'", (5, 20, "pools[0].gpus_per_node"), "integer"),
        (
            "cost_per_gpu_hour: 1.10",
            "cost_per_gpu_hour: 0",
            (10, 24, "pools[0].cost_per_gpu_hour"),
            "greater than 0",
        ),
        ("name: lab-a100", "name: lab a100", (2, 11, "pools[0].name"), "pool name 'lab a100'"),
        ("nodes: [gpu-a01, gpu-a02]", "nodes: []", (11, 12, "pools[0].nodes"), "at least 1"),
        ("    cost_per_gpu_hour: 1.10\n", "", (2, 5, "pools[0].cost_per_gpu_hour"), "required"),
    ],
)
def test_field_rules(tmp_path, old, new, where, message):
    assert old in POOL
    err = load_error(tmp_path, POOL.replace(old, new))
    assert located(err) == [where]
    assert message in err.message


def test_all_errors_are_reported_together(tmp_path):
    text = POOL.replace("A100-80GB", "A10O").replace("fabric: infiniband", "fabric: ib")
    err = load_error(tmp_path, text)
    assert [e.field for e in err.errors] == ["pools[0].gpu", "pools[0].fabric"]
    assert len(str(err).splitlines()) == 2


def test_top_level_must_be_pools(tmp_path):
    err = load_error(tmp_path, "pool:\n  - name: x\n")
    assert located(err)[0] == (1, 1, "pool")
    assert "did you mean 'pools'" in err.message


def test_pool_countries_conflict():
    pools = load_pools(EXAMPLE)
    clash = Pool(**{**_fields(pools[2]), "region": "onprem-us-east"})
    with pytest.raises(ValueError, match="onprem-us-east"):
        pool_countries([pools[0], clash])


def _fields(pool: Pool) -> dict:
    return {name: getattr(pool, name) for name in Pool.__dataclass_fields__}


# ---- pools as offers -------------------------------------------------------------------------


def test_pools_to_offers_rows(tmp_path):
    path = write(tmp_path, POOL + SECOND)
    offers = pools_to_offers(load_pools(path), {"lab-a100": 4}).to_frame()
    assert list(offers.columns) == list(COLUMN_NAMES)
    assert [str(offers[c].dtype) for c in COLUMN_NAMES] == [t for _, t in OFFER_COLUMNS]
    a100 = offers.iloc[0].to_dict()
    assert {k: a100[k] for k in ("cloud", "region", "zone", "instance_type", "accelerator")} == {
        "cloud": "onprem",
        "region": "onprem-us-east",
        "zone": "lab-a100",
        "instance_type": "lab-a100-node",
        "accelerator": "A100-80GB",
    }
    assert a100["accelerator_count"] == 8 and a100["accelerator_memory_gib"] == 80
    assert (a100["vcpus"], a100["memory_gib"]) == (128, 1024)
    assert a100["interconnect"] == "nvlink+infiniband"
    assert a100["price_on_demand"] == 1.10 * 8
    assert math.isnan(a100["price_spot"]) and math.isnan(a100["spot_interruption_rate"])
    assert a100["capacity"] == (16 - 4) / 8  # in nodes: 12 free GPUs on 8-GPU nodes
    assert a100["source"] == f"onprem:{path.resolve()}"
    assert a100["as_of"] == date.fromtimestamp(path.stat().st_mtime).isoformat()
    # then each smaller share of a node, priced per GPU, as many as the free GPUs hold
    shares = offers[offers["zone"] == "lab-a100"].iloc[1:]
    assert list(shares["accelerator_count"]) == [7, 6, 5, 4, 3, 2, 1]
    two = shares[shares["accelerator_count"] == 2].iloc[0]
    assert (two["price_on_demand"], two["capacity"]) == (1.10 * 2, 12 / 2)
    assert (two["vcpus"], two["memory_gib"]) == (32, 256)  # the node's, pro rata
    assert two["interconnect"] == "nvlink+infiniband"  # inside one NVLink domain of 8
    t4 = offers[offers["zone"] != "lab-a100"].iloc[0]
    assert (t4["interconnect"], t4["capacity"], t4["accelerator"]) == ("", 3.0, "T4")
    conform(offers)  # still valid


def test_pools_built_in_code_use_the_injected_date():
    pool = Pool("p", "r", "US", "L4", 1, 4, 16.0, 0, "roce", 0.3, (PoolNode("n", "p", 1),))
    offers = pools_to_offers([pool], today=date(2025, 1, 2)).to_frame()
    assert offers.loc[0, "as_of"] == "2025-01-02"
    assert offers.loc[0, "source"] == "onprem"
    assert offers.loc[0, "interconnect"] == ""  # RoCE is not InfiniBand


def test_no_pools_no_offers():
    offers = pools_to_offers([]).to_frame()
    assert offers.empty and list(offers.columns) == list(COLUMN_NAMES)


def test_free_gpus():
    pools = load_pools(EXAMPLE)
    assert free_gpus(pools) == {"lab-a100": 16, "lab-l40s": 16, "desk-t4": 1}
    assert free_gpus(pools, {"lab-a100": 99, "gone": 3})["lab-a100"] == 0
    with pytest.raises(ValueError, match="negative"):
        free_gpus(pools, {"desk-t4": -1})


@pytest.mark.parametrize(
    ("domain", "fabric", "expected"),
    [
        (0, "ethernet", ""),
        (1, "infiniband", "infiniband"),
        (2, "roce", "nvlink"),
        (8, "infiniband", "nvlink+infiniband"),
    ],
)
def test_interconnect(domain, fabric, expected):
    assert interconnect(domain, fabric) == expected


@given(
    gpus_per_node=st.integers(1, 16),
    nodes=st.integers(1, 50),
    used=st.integers(0, 2000),
    cost=st.floats(0.01, 100, allow_nan=False),
)
def test_capacity_and_price_bounds(gpus_per_node, nodes, used, cost):
    node_list = tuple(PoolNode(f"n{i}", "p", gpus_per_node) for i in range(nodes))
    pool = Pool("p", "r", "US", "H100", gpus_per_node, 8, 64.0, 0, "ethernet", cost, node_list)
    row = pools_to_offers([pool], {"p": used}, today=date(2025, 1, 1)).to_frame().iloc[0]
    assert 0 <= row["capacity"] <= nodes
    assert row["capacity"] == max(0, nodes * gpus_per_node - used) / gpus_per_node
    assert row["price_on_demand"] == cost * gpus_per_node > 0


# ---- executor options, switches and addresses --------------------------------------------


@pytest.mark.parametrize(
    ("executor", "field", "message"),
    [
        ("{kind: slurm, partiton: a100}", "pools[0].executor.partiton", "did you mean 'partition'"),
        ("{kind: ssh}", "pools[0].executor", "the ssh executor needs 'user'"),
        ("{kind: ssh, user: ci, port: 70000}", "pools[0].executor.port", "not between 1 and 65535"),
        ("{kind: slurm, login: host-only}", "pools[0].executor.login", "must be user@host"),
        ("{kind: slurm, requeue: 'yes'}", "pools[0].executor.requeue", "valid boolean"),
        ("{kind: local, devices: [0, 0]}", "pools[0].executor.devices", "distinct"),
    ],
)
def test_executor_options_are_checked_per_kind(tmp_path, executor, field, message):
    err = load_error(tmp_path, POOL.replace("{kind: local}", executor))
    assert [(e.line, e.field) for e in err.errors] == [(12, field)]
    assert message in err.message


def test_executor_options_are_typed(tmp_path):
    text = POOL.replace(
        "{kind: local}",
        "{kind: slurm, partition: low, gres: a100, login: ci@login1, requeue: true}",
    )
    (pool,) = load_pools(write(tmp_path, text))
    options = pool.executor.options
    assert (options.partition, options.gres, options.login, options.requeue) == (
        "low",
        "a100",
        "ci@login1",
        True,
    )
    assert options.port == 22 and options.switch_wait == 300  # defaults


def test_nodes_carry_switch_and_address(tmp_path):
    text = POOL.replace(
        "nodes: [gpu-a01, gpu-a02]",
        "nodes: [{name: gpu-a01, switch: leaf1, address: 10.0.0.1, port: 2222}, gpu-a02]",
    )
    (pool,) = load_pools(write(tmp_path, text))
    first, second = pool.nodes
    assert (first.switch, first.address, first.port) == ("leaf1", "10.0.0.1", 2222)
    assert (second.name, second.switch, second.address) == ("gpu-a02", "", "")
    bad = load_error(tmp_path, text.replace("leaf1", "leaf 1"))
    assert bad.field == "pools[0].nodes[0].switch"


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("count", "1000000000000", "less than or equal to 100000"),
        ("cost_per_gpu_hour", ".inf", "finite number"),
        ("cost_per_gpu_hour", ".nan", "finite number"),
        ("gpus_per_node", "1000000000000000000000000000000", "less than or equal to 1024"),
    ],
)
def test_numbers_out_of_bounds_are_refused_before_any_node_is_made(tmp_path, field, value, said):
    """`count: 1000000000000` once built a trillion nodes (10^7 took 14 s and 1.6 GB)."""
    text = (
        "pools:\n  - name: lab\n    location: {region: lab, country: US}\n    gpu: T4\n"
        "    gpus_per_node: 4\n    vcpus_per_node: 8\n    memory_gib_per_node: 32\n"
        "    cost_per_gpu_hour: 0.2\n    count: 2\n"
    )
    lines = [
        f"    {field}: {value}" if line.startswith(f"    {field}:") else line
        for line in text.splitlines()
    ]
    path = tmp_path / "pools.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=said) as info:  # refused before a node is made
        load_pools(path)
    assert info.value.field == f"pools[0].{field}" and info.value.line > 1
