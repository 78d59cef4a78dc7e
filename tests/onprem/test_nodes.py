"""The SSH executor on real sshd nodes and the local executor on this machine: the broker's
own GPU allocation as CUDA_VISIBLE_DEVICES, gangs, staging, a clean environment, TERM
with grace on preemption, and transport failures that are not job failures."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from onprem.executors.base import AttemptRequest, NodeUnreachable
from onprem.executors.nodes import LocalExecutor, SshExecutor
from onprem.executors.options import LocalOptions
from onprem.inventory import Executor, PoolNode
from providers.errors import CredentialsError, InsufficientCapacity
from tests.conftest import _free_ports
from tests.onprem.harness import local_pool, request, ssh_pool
from tests.waiting import wait_until


def _id() -> str:
    return uuid.uuid4().hex[:10]


def _rack(ssh_nodes, **changes):
    return ssh_pool(ssh_nodes, f"rack-{_id()}", base_dir=f".broker/{_id()}", **changes)


def _ended(provider, instance, timeout=30):
    assert wait_until(lambda: not provider.describe(instance.id).active, timeout), instance.id
    return provider.describe(instance.id)


def test_gpus_are_the_brokers_allocation_packed_best_fit(make, ssh_nodes):
    pool = _rack(ssh_nodes)  # three nodes of 2 GPUs
    provider = make(pool)
    show = 'echo "on $(hostname) cvd=$CUDA_VISIBLE_DEVICES"; sleep 30'
    first, second, third = (
        provider.launch(request(pool, _id(), accelerator_count=c, command=show)) for c in (1, 1, 2)
    )
    executor = provider.executor(pool.name)
    held = [executor.status(i.id.rsplit(":", 1)[1]).gpu_ids for i in (first, second, third)]
    (a,), (b,) = held[0], held[1]
    assert a.split(":")[0] == b.split(":")[0]  # the second 1-GPU job fills the first's node
    assert {a.split(":")[1], b.split(":")[1]} == {"0", "1"}
    assert held[2][0].split(":")[0] != a.split(":")[0] and held[2][0].endswith(":0,1")
    assert wait_until(lambda: "cvd=" in provider.log(first.id), 10)
    assert f"cvd={a.split(':')[1]}" in provider.log(first.id)
    assert provider.offers().to_frame().iloc[0]["capacity"] == 1.0  # 2 of 6 GPUs free
    with pytest.raises(InsufficientCapacity):
        provider.launch(request(pool, _id(), accelerator_count=2, nodes=2))


def test_a_two_node_attempt_gets_the_rank_environment(make, ssh_nodes):
    pool = _rack(ssh_nodes)
    provider = make(pool)
    show = 'echo "rank=$BROKER_NODE_RANK of $BROKER_NUM_NODES master=$MASTER_ADDR"'
    instance = provider.launch(request(pool, _id(), nodes=2, accelerator_count=2, command=show))
    done = _ended(provider, instance)
    log = provider.log(instance.id)
    assert done.state == "succeeded" and done.nodes == 2
    assert "rank=0 of 2 master=127.0.0.1" in log and "rank=1 of 2 master=127.0.0.1" in log


def test_preemption_gives_the_job_its_grace_then_kills(make, ssh_nodes):
    pool = _rack(ssh_nodes)
    provider = make(pool, grace=1.0)
    checkpoints = "trap 'echo checkpointed; exit 0' TERM; echo ready; sleep 60 & wait"
    polite = provider.launch(request(pool, _id(), command=checkpoints))
    stubborn = provider.launch(request(pool, _id(), command="trap '' TERM; echo ready; sleep 60"))
    # "running" is the wrapper's pid recorded, not the job's trap installed: wait for the
    # job to say its handler is in place, or a TERM sent first ends it with 143.
    for instance in (polite, stubborn):
        assert wait_until(lambda i=instance: "ready" in provider.log(i.id), 10)
    assert provider.preempt(polite.id) is not None
    assert provider.preempt(stubborn.id, grace_seconds=0.5) is not None
    done = provider.describe(polite.id)
    assert (done.state, done.exit_code) == ("interrupted", 0)  # exit 0, still not "succeeded"
    assert "checkpointed" in provider.log(polite.id)
    killed = provider.describe(stubborn.id)
    assert (killed.state, killed.exit_code) == ("interrupted", 137)
    assert provider.preempt(polite.id) is None  # already ended
    notices = provider.interruptions()
    assert sorted(n.instance_id for n in notices) == sorted([polite.id, stubborn.id])


def test_a_node_that_does_not_answer_is_unreachable_not_failed(make, ssh_nodes):
    pool = _rack(ssh_nodes)
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), command="sleep 30"))
    attempt = instance.id.rsplit(":", 1)[1]
    node = provider.executor(pool.name).status(attempt).nodes[0]
    # The same pool, seen by a restarted broker while that node's sshd is gone.
    dead = _free_ports(1)
    nodes = tuple(replace(n, port=dead) if n.name == node else n for n in pool.nodes)
    cut_off = make(replace(pool, nodes=nodes))
    with pytest.raises(NodeUnreachable) as error:
        cut_off.describe(instance.id)
    assert error.value.retryable
    assert provider.describe(instance.id).state == "running"  # the job is fine


def test_host_keys_are_checked(ssh_nodes, tmp_path):
    strangers = tmp_path / "known_hosts"
    strangers.write_text("")
    pool = _rack(ssh_nodes, known_hosts=str(strangers))
    executor = SshExecutor([(n.name, n.address, n.port) for n in pool.nodes], pool.executor.options)
    try:
        with pytest.raises(CredentialsError, match="refused"):
            executor.list_attempts()
    finally:
        executor.close()


def test_the_workdir_is_staged_and_a_restart_finds_the_attempt(ssh_nodes, tmp_path):
    pool = _rack(ssh_nodes)
    nodes = [(n.name, n.address, n.port) for n in pool.nodes]
    work = tmp_path / "project"
    work.mkdir()
    (work / "data.txt").write_text("staged bytes\n")
    attempt = AttemptRequest(
        attempt_id=_id(),
        job_id="j-stage",
        tags=(("broker-attempt", "x"),),
        hosts=("node2",),
        script="#!/bin/sh\ncat data.txt; pwd\n",
        workdir=str(work),
    )
    first = SshExecutor(nodes, pool.executor.options)
    again = SshExecutor(nodes, pool.executor.options)
    try:
        first.submit(attempt)
        assert wait_until(lambda: not first.status(attempt.attempt_id).active, 10)
        found = {s.attempt_id: s for s in again.list_attempts()}
        assert found[attempt.attempt_id].tags == (("broker-attempt", "x"),)
        assert found[attempt.attempt_id].state == "succeeded"
        assert again.submit(attempt).state == "succeeded"  # the same attempt: nothing new ran
        log = again.log(attempt.attempt_id)
        assert log.count("staged bytes") == 1 and f"/{attempt.attempt_id}/work" in log
    finally:
        first.close()
        again.close()


def test_local_jobs_get_mapped_devices_and_a_clean_environment(make, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-jobs")
    base = local_pool(f"desk-{_id()}", gpus=2)
    node = PoolNode(base.nodes[0].name, base.name, 2)
    pool = replace(base, nodes=(node,), executor=Executor("local", LocalOptions(devices=(3, 5))))
    provider = make(pool)
    show = 'echo "cvd=$CUDA_VISIBLE_DEVICES secret=${AWS_SECRET_ACCESS_KEY:-none}"'
    first = provider.launch(request(pool, _id(), command=show + "; sleep 5"))
    second = provider.launch(request(pool, _id(), command=show + "; sleep 5"))
    for instance in (first, second):
        assert wait_until(lambda i=instance: "cvd=" in provider.log(i.id), 10)
    logs = provider.log(first.id) + provider.log(second.id)
    assert "cvd=3 secret=none" in logs and "cvd=5 secret=none" in logs
    with pytest.raises(InsufficientCapacity):
        provider.launch(request(pool, _id()))


def test_local_executor_records_before_it_runs(tmp_path):
    executor = LocalExecutor(["ws"], LocalOptions(), tmp_path)
    attempt = AttemptRequest(
        attempt_id="rec-1", job_id="j", hosts=("ws",), script="#!/bin/sh\nexit 7\n"
    )
    executor.submit(attempt)
    assert wait_until(lambda: not executor.status("rec-1").active, 10)
    status = executor.status("rec-1")
    assert (status.state, status.exit_code, status.nodes) == ("failed", 7, ("ws",))
    folder = tmp_path / "attempts" / "ws" / "rec-1"
    assert {p.name for p in folder.iterdir()} >= {"attempt.json", "log.txt", "exit_code", "pid"}
    assert executor.cancel("rec-1", 1.0) is False and executor.status("nope") is None


def test_a_packed_workdir_and_setup_reach_an_ssh_node(make, ssh_nodes, tmp_path):
    from providers.workdir import pack_workdir

    project = tmp_path / "project"
    project.mkdir()
    (project / "data.txt").write_text("from the broker's machine\n")
    packed = pack_workdir(project, tmp_path / "packs", limit=1 << 20)
    pool = _rack(ssh_nodes)
    provider = make(pool)
    instance = provider.launch(
        request(
            pool,
            _id(),
            workdir_uri=packed.uri,
            setup="echo set up > setup.txt",
            command="cat data.txt setup.txt; hostname",
        )
    )
    done = _ended(provider, instance)
    log = provider.log(instance.id)
    assert done.state == "succeeded", log
    assert "from the broker's machine" in log and "set up" in log
    assert not (tmp_path / "staging" / instance.id.rsplit(":", 1)[1]).exists()  # not kept here
