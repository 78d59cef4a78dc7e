"""Pools on the real services for the on-prem tests: a local pool, an SSH pool on the sshd
nodes, and Slurm pools on the 3-node cluster (here and through an SSH login), plus the
provider contract harness over each."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.clock import SystemClock
from onprem.executors.options import LocalOptions, SlurmOptions, SshOptions
from onprem.inventory import Executor, Pool, PoolNode
from onprem.provider import OnPremProvider
from providers.base import Instance, LaunchRequest
from providers.gang import TAG_RANK, GangMember
from tests.providers.contract import spot_request
from tests.waiting import wait_until

REGION = "onprem-ci"


def local_pool(name: str = "desk", gpus: int = 4, nodes: int = 1) -> Pool:
    members = tuple(PoolNode(f"{name}-ws{i}", name, gpus) for i in range(nodes))
    return Pool(
        name, REGION, "US", "L4", gpus, 16, 64.0, 2, "ethernet", 0.4, members,
        Executor("local", LocalOptions()),
    )  # fmt: skip


def ssh_pool(ssh, name: str = "rack", gpus: int = 2, **changes) -> Pool:
    members = tuple(
        PoolNode(f"node{i + 1}", name, gpus, switch=f"leaf{i // 2}", address="127.0.0.1", port=port)
        for i, port in enumerate(ssh.ports)
    )
    given = dict(user=ssh.user, identity_file=ssh.identity_file, known_hosts=ssh.known_hosts)
    options = SshOptions(**(given | changes))
    return Pool(
        name, REGION, "US", "A100-80GB", gpus, 32, 256.0, 2, "infiniband", 1.2, members,
        Executor("ssh", options),
    )  # fmt: skip


def slurm_pool(cluster, name: str = "a100", *, ssh=None, base_dir: str = "", **changes) -> Pool:
    """n1 and n2 of the cluster (8 x A100 each, one leaf switch)."""
    members = tuple(PoolNode(n, name, 8, switch="leaf1") for n in ("n1", "n2"))
    login = {}
    if ssh is not None:
        login = dict(
            login=f"{ssh.user}@127.0.0.1",
            port=ssh.ports[0],
            identity_file=ssh.identity_file,
            known_hosts=ssh.known_hosts,
        )
    options = SlurmOptions(
        partition="low", gres="a100", slurm_conf=str(cluster.conf), base_dir=base_dir,
        **login, **changes,
    )  # fmt: skip
    return Pool(
        name, REGION, "US", "A100-80GB", 8, 16, 62.0, 8, "infiniband", 1.1, members,
        Executor("slurm", options),
    )  # fmt: skip


def mig_pool(cluster, name: str = "mig") -> Pool:
    """n3 of the cluster: one A100-80GB sliced into 7 x 1g.10gb."""
    node = PoolNode("n3", name, 1, switch="leaf2", mig=(("1g.10gb", 7),))
    options = SlurmOptions(partition="low", gres="a100", slurm_conf=str(cluster.conf))
    return Pool(
        name, REGION, "US", "A100-80GB", 1, 16, 62.0, 0, "ethernet", 1.4, (node,),
        Executor("slurm", options),
    )  # fmt: skip


def request(pool: Pool, attempt: str, **changes) -> LaunchRequest:
    where = dict(
        cloud="onprem", region=pool.region, zone=pool.name, instance_type=f"{pool.name}-node",
        accelerator=pool.gpu, accelerator_count=1.0,
    )  # fmt: skip
    return spot_request(attempt, where, changes)


@dataclass
class OnPremHarness:
    """The provider contract's harness (tests/providers/contract.py) for one pool."""

    pool: Pool
    workdir: Path
    error_kinds: tuple[str, ...]
    slurm: object | None = None  # the SlurmCluster, for Slurm pools
    bad_key: str = ""  # a key the sshd does not know (the "credentials" error)
    whole_node: bool = False  # Slurm: each request takes a node (a preemption hits one)
    made: list[OnPremProvider] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def new_provider(self) -> OnPremProvider:
        provider = OnPremProvider(
            [self.pool], clock=SystemClock(), workdir=self.workdir, terminate_grace=2.0
        )
        self.made.append(provider)
        return provider

    def request(self, attempt: str, **changes) -> LaunchRequest:
        count = self.pool.gpus_per_node if self.whole_node else 1
        return request(self.pool, attempt, accelerator_count=float(count), **changes)

    def unknown_id(self) -> str:
        return OnPremProvider.instance_id(self.pool.name, "never-launched")

    def interrupt(self, instance: Instance) -> None:
        assert wait_until(lambda: self.provider.describe(instance.id).state == "running", 60)
        if self.slurm is None:  # no engine above the nodes: the broker's own preemption
            self.provider.preempt(instance.id)
            return
        # A job of the high partition takes the node: Slurm preempts ours (PreemptMode=REQUEUE).
        node = self._nodes_of(instance)[0]  # of a gang: its head (the whole job is requeued)
        self.slurm.run(
            "sbatch", "--parsable", "-p", "high", "-w", node, "--gres=gpu:a100:8",
            "-o", "/dev/null", "--wrap", "sleep 1",
        )  # fmt: skip
        assert wait_until(lambda: self.provider.describe(instance.id).state == "interrupted", 60)

    def member_tags(self, instance: Instance, member: GangMember) -> dict[str, str]:
        """What the engine keeps of one node of a gang: the record on the node (SSH,
        local), or for Slurm the node's place in the job's node list (its SLURM_NODEID)."""
        attempt = instance.id.rsplit(":", 1)[1]
        executor = self.provider.executor(self.pool.name)
        if self.slurm is None:
            (seen,) = executor._list(member.node_id, attempt)
            return dict(tuple(pair) for pair in seen.record["tags"])
        assert wait_until(lambda: bool(self._nodes_of(instance)), 60)  # Slurm placed it
        placed = self.provider.describe(instance.id).members[member.rank]
        handle = executor.status(attempt).handle
        nodelist = self.slurm.run("squeue", "-h", "-j", handle, "-o", "%N").strip()
        order = self.slurm.run("scontrol", "show", "hostnames", nodelist).split()
        return {TAG_RANK: str(order.index(placed.address))}  # the node's name

    def _nodes_of(self, instance: Instance) -> tuple[str, ...]:
        attempt = instance.id.rsplit(":", 1)[1]
        status = self.provider.executor(self.pool.name).status(attempt)
        return status.nodes

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        if kind == "capacity" and self.slurm is not None:
            # The partition is drained: slurmctld refuses new jobs for now.
            self.slurm.run("scontrol", "update", "PartitionName=low", "State=DRAIN")
            try:
                yield
            finally:
                self.slurm.run("scontrol", "update", "PartitionName=low", "State=UP")
            return
        if kind == "capacity":  # every GPU of the pool busy with real attempts
            blockers = self._fill()
            try:
                yield
            finally:
                for instance in blockers:
                    self.made[0].terminate(instance.id)
            return
        saved = [(p, p.pools, dict(p._executors)) for p in self.made]
        for provider in self.made:
            if kind == "invalid":  # the pool was taken out of pools.yaml
                provider.pools = {}
            elif kind == "credentials":  # sshd refuses the key
                options = replace(self.pool.executor.options, identity_file=self.bad_key)
                broken = replace(self.pool, executor=Executor(self.pool.executor.kind, options))
                provider._executors.pop(self.pool.name, None)
                provider.pools = {self.pool.name: broken}
            else:
                raise ValueError(kind)
        try:
            yield
        finally:
            for provider, pools, executors in saved:
                for name, executor in provider._executors.items():
                    if executors.get(name) is not executor:
                        executor.close()
                provider.pools, provider._executors = pools, executors

    def _fill(self) -> list[Instance]:
        provider = self.made[0]
        blockers = []
        for node in range(len(self.pool.nodes)):
            blockers.append(
                provider.launch(
                    request(
                        self.pool,
                        f"blocker-{node}-{os.getpid()}",
                        accelerator_count=float(self.pool.gpus_per_node),
                    )
                )
            )
        return blockers

    def close(self) -> None:
        for provider in self.made:
            try:
                for instance in provider.list_instances():
                    if instance.active:
                        provider.terminate(instance.id)
            finally:
                provider.close()


def make_bad_key(folder: Path) -> str:
    """A fresh key pair the sshd does not accept."""
    key = folder / "stranger_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return str(key)
