"""`broker pools import --slurm`: pools.yaml from the real cluster's sinfo and topology."""

from __future__ import annotations

from onprem.executors.slurm_text import US
from onprem.inventory import load_pools
from onprem.slurm_import import leaf_switches, pools_from
from tests.cli.runner import run_cli

TOPOLOGY = """\
SwitchName=leaf-a Level=0 LinkSpeed=1 Nodes=g[01-02]
SwitchName=leaf-b Level=0 LinkSpeed=1 Nodes=g03,m1
SwitchName=spine Level=1 LinkSpeed=1 Nodes=g[01-03],m1 Switches=leaf-[a-b]
"""


def _sinfo(*rows: tuple[str, ...]) -> str:
    return "".join(US.join(row) + US + "\n" for row in rows)


def test_nodes_group_by_partition_and_shape():
    sinfo = _sinfo(
        ("g01", "gpu*", "gpu:h100:8(S:0-1)", "96", "1024000"),
        ("g01", "prio", "gpu:h100:8(S:0-1)", "96", "1024000"),  # its default partition wins
        ("g02", "gpu*", "gpu:h100:8(S:0-1)", "96", "1024000"),
        ("g03", "gpu*", "gpu:h100:4", "48", "512000"),  # another shape: another pool
        ("m1", "gpu*", "gpu:h100_3g.40gb:2,gpu:h100_2g.20gb:2,gpu:h100_1g.10gb:2", "32", "256000"),
        ("c1", "cpu*", "(null)", "64", "256000"),  # no GPU: no pool
    )
    pools = {p.name: p for p in pools_from(sinfo, TOPOLOGY)}
    assert set(pools) == {"gpu-h100", "gpu-h100-2", "gpu-h100-mig"}
    eight = next(p for p in pools.values() if p.gpus_per_node == 8)
    assert eight.nodes == (("g01", "leaf-a"), ("g02", "leaf-a")) and eight.partition == "gpu"
    assert (eight.gpu, eight.gres, eight.vcpus_per_node) == ("H100", "h100", 96)
    sliced = pools["gpu-h100-mig"]
    assert (sliced.gpu, sliced.gpus_per_node) == ("H100", 2)
    assert sliced.mig == (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 1))  # per GPU
    assert leaf_switches(TOPOLOGY)["m1"] == "leaf-b"


def test_import_from_the_real_cluster_writes_a_file_that_loads(
    capsys, tmp_path, slurm_cluster, monkeypatch
):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    target = tmp_path / "pools.yaml"
    result = run_cli(
        capsys, "pools", "import", "--slurm", "--region", "lab-ci", "--country", "de",
        "--cost-per-gpu-hour", "1.25", "-o", str(target),
    )  # fmt: skip
    assert result.code == 0, result.stderr
    pools = {p.name: p for p in load_pools(target)}
    whole, sliced = pools["low-a100"], pools["low-a100-mig"]
    assert [(n.name, n.switch) for n in whole.nodes] == [("n1", "leaf1"), ("n2", "leaf1")]
    assert (whole.gpus_per_node, whole.vcpus_per_node, whole.country) == (8, 16, "DE")
    assert whole.executor.options.partition == "low" and whole.executor.options.gres == "a100"
    assert whole.fabric == "infiniband" and whole.cost_per_gpu_hour == 1.25
    assert sliced.gpu == "A100-80GB" and sliced.nodes[0].mig == (("1g.10gb", 7),)
    assert sliced.nodes[0].switch == "leaf2"
    again = run_cli(capsys, "pools", "import", "--slurm", "-o", str(target))
    assert again.code == 2 and "exists" in again.stderr  # never overwrites


def test_import_over_ssh_names_the_login(capsys, slurm_cluster, ssh_nodes):
    result = run_cli(
        capsys, "pools", "import", "--slurm", "--login", f"{ssh_nodes.user}@127.0.0.1",
        "--port", str(ssh_nodes.ports[0]), "--identity-file", ssh_nodes.identity_file,
        "--known-hosts", ssh_nodes.known_hosts,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert f"login: {ssh_nodes.user}@127.0.0.1" in result.stdout
    assert "- {name: n3, switch: leaf2}" in result.stdout


def test_bad_flags_exit_2(capsys):
    assert run_cli(capsys, "pools", "import").code == 2
    bad = run_cli(capsys, "pools", "import", "--slurm", "--login", "no-user-here")
    assert bad.code == 2 and "user@host" in bad.stderr
