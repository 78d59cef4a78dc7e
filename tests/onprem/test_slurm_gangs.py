"""Slurm gangs on the real 3-node cluster (tests/conftest.py: slurm_cluster): one
`sbatch --nodes=N`, one task per node, each with the rank environment derived from
Slurm's own variables; a gang larger than its pool is refused when it is planned."""

from __future__ import annotations

import uuid

from tests.onprem.harness import request, slurm_pool
from tests.waiting import wait_until

DUMP = (
    'printf "rank=%s nodes=%s ips=%s master=%s:%s world=%s cvd=%s\\n" "$BROKER_NODE_RANK" '
    '"$BROKER_NUM_NODES" "$(printf "%s" "$BROKER_NODE_IPS" | tr "\\n" ,)" "$MASTER_ADDR" '
    '"$MASTER_PORT" "$WORLD_SIZE" "$CUDA_VISIBLE_DEVICES"'
)


def _id() -> str:
    return uuid.uuid4().hex[:10]


def _ended(provider, instance, timeout=60):
    assert wait_until(lambda: not provider.describe(instance.id).active, timeout), instance.id
    return provider.describe(instance.id)


def seen(log: str) -> dict[int, dict[str, str]]:
    """What each rank printed (DUMP), by rank."""
    ranks = {}
    for line in log.splitlines():
        if line.startswith("rank="):
            fields = dict(part.split("=", 1) for part in line.split())
            ranks[int(fields["rank"])] = fields
    return ranks


def test_a_two_node_gang_sees_its_ranks_ips_and_gpus(make, slurm_cluster):
    pool = slurm_pool(slurm_cluster, f"gang-{_id()}")
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), nodes=2, accelerator_count=2.0, command=DUMP))
    done = _ended(provider, instance)
    log = provider.log(instance.id)
    assert done.state == "succeeded", log
    ranks = seen(log)
    assert sorted(ranks) == [0, 1], log
    assert {r["ips"] for r in ranks.values()} == {"127.0.0.1,127.0.0.1"}
    assert {r["nodes"] for r in ranks.values()} == {"2"}
    assert {r["world"] for r in ranks.values()} == {"4"}
    assert len({r["master"] for r in ranks.values()}) == 1
    assert {r["cvd"] for r in ranks.values()} == {"0,1"}


def test_terminating_a_running_gang_returns_once_slurm_says_it_ended(
    make, slurm_cluster, ssh_nodes
):
    """Both ranks ignore SIGTERM, so Slurm kills them only after KillWait, and the job is
    COMPLETING (active) until every node reports: terminate, through an SSH login node,
    returns once squeue/sacct say the gang ended, bounded by the cluster's time limits
    rather than a number of polls, and a second terminate finds nothing to stop."""
    pool = slurm_pool(slurm_cluster, f"stop-{_id()}", ssh=ssh_nodes)
    provider = make(pool, grace=1.0)
    stubborn = request(
        pool, _id(), nodes=2, accelerator_count=2.0, command="trap '' TERM; echo up; sleep 300"
    )
    instance = provider.launch(stubborn)
    assert wait_until(lambda: provider.log(instance.id).count("up\n") == 2, 60)  # both ranks
    assert provider.terminate(instance.id) is True
    ended = provider.describe(instance.id)
    assert ended.state == "terminated", ended
    assert ended.nodes == 2 and all(m.state == "terminated" for m in ended.members)
    assert provider.terminate(instance.id) is False
