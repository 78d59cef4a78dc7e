"""The provider contract (tests/providers/contract.py), run against OnPremProvider on each
executor: local processes, a real sshd (three nodes), and a real Slurm cluster, here
and through an SSH login node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.onprem.harness import (
    OnPremHarness,
    local_pool,
    make_bad_key,
    slurm_pool,
    ssh_pool,
)
from tests.providers.contract import (
    BillingContract,
    CapacityContract,
    GangMembersContract,
    GangsContract,
    PoolSharesContract,
    ProviderContract,
)
from tests.waiting import wait_until


def _quiet(cluster) -> bool:
    """No job of an earlier test is left on the cluster: the pools of these harnesses
    share its nodes, so a job still ending elsewhere would move their free counts."""
    return cluster.run("squeue", "-h", "-o", "%i").strip() == ""


def _unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def local_harness(tmp_path) -> Iterator[OnPremHarness]:
    harness = OnPremHarness(local_pool(_unique("desk"), nodes=2), tmp_path, ("capacity", "invalid"))
    yield harness
    harness.close()


@pytest.fixture
def ssh_harness(tmp_path, ssh_nodes) -> Iterator[OnPremHarness]:
    pool = ssh_pool(ssh_nodes, _unique("rack"), base_dir=f".broker/{uuid.uuid4().hex[:8]}")
    harness = OnPremHarness(
        pool,
        tmp_path,
        ("capacity", "invalid", "credentials"),
        bad_key=make_bad_key(tmp_path),
    )
    yield harness
    harness.close()


@pytest.fixture
def slurm_harness(tmp_path, slurm_cluster) -> Iterator[OnPremHarness]:
    assert wait_until(lambda: _quiet(slurm_cluster), 120)
    pool = slurm_pool(slurm_cluster, _unique("a100"), base_dir=str(tmp_path / "attempts"))
    harness = OnPremHarness(
        pool, tmp_path, ("capacity", "invalid"), slurm=slurm_cluster, whole_node=True
    )
    yield harness
    harness.close()


@pytest.fixture
def slurm_login_harness(tmp_path, slurm_cluster, ssh_nodes) -> Iterator[OnPremHarness]:
    assert wait_until(lambda: _quiet(slurm_cluster), 120)
    pool = slurm_pool(slurm_cluster, _unique("login"), ssh=ssh_nodes)
    harness = OnPremHarness(
        pool,
        tmp_path,
        ("capacity", "invalid", "credentials"),
        slurm=slurm_cluster,
        bad_key=make_bad_key(tmp_path),
        whole_node=True,
    )
    yield harness
    harness.close()


class TestLocalContract(
    ProviderContract, CapacityContract, PoolSharesContract, BillingContract, GangsContract,
    GangMembersContract,
):  # fmt: skip
    @pytest.fixture
    def harness(self, local_harness):
        return local_harness


class TestSshContract(
    ProviderContract, CapacityContract, PoolSharesContract, BillingContract, GangsContract,
    GangMembersContract,
):  # fmt: skip
    @pytest.fixture
    def harness(self, ssh_harness):
        return ssh_harness


class TestSlurmContract(
    ProviderContract, CapacityContract, PoolSharesContract, BillingContract, GangsContract,
    GangMembersContract,
):  # fmt: skip
    @pytest.fixture
    def harness(self, slurm_harness):
        return slurm_harness


class TestSlurmOverSshContract(
    ProviderContract, CapacityContract, PoolSharesContract, BillingContract, GangsContract,
    GangMembersContract,
):  # fmt: skip
    @pytest.fixture
    def harness(self, slurm_login_harness):
        return slurm_login_harness
