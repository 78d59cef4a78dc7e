"""Gangs end to end on real pools, through the command line (tests/conftest.py): the
2-node example on the sshd nodes with both ranks agreeing, and a Slurm gang larger than
its pool refused when it is planned, never left pending in Slurm."""

from __future__ import annotations

import json
import shutil

from broker.clock import SystemClock
from onprem.inventory import load_pools
from onprem.provider import OnPremProvider
from tests.cli.test_distributed_cli import expected_total
from tests.onprem.test_broker_on_pools import REPO, _broker, _job
from tests.onprem.test_broker_on_pools import lab as lab  # the fixture

STEPS = 30


def test_the_example_gang_runs_on_ssh_nodes_and_its_ranks_agree(lab):
    tmp, jobs, env, tag = lab
    shutil.copy(REPO / "examples" / "distributed" / "allreduce.py", jobs / "allreduce.py")
    command = f"python3 allreduce.py --steps {STEPS} --step-seconds 0"
    (jobs / "pair.yaml").write_text(_job("pair", "A100-80GB:2", "onprem-ssh", command, nodes="2"))
    assert _broker("submit", str(jobs / "pair.yaml"), env=env).returncode == 0
    ran = _broker("run", "--poll", "0.2", env=env)
    assert ran.returncode == 0, ran.stderr
    status = json.loads(_broker("status", "pair", "-o", "json", env=env).stdout)
    assert status["state"] == "succeeded", status
    (attempt,) = status["attempts"]
    nodes = attempt["nodes"]
    assert [n["rank"] for n in nodes] == [0, 1]
    assert len({n["node"] for n in nodes}) == 2 and {n["address"] for n in nodes} == {"127.0.0.1"}
    # Each node's output, read over SSH from the nodes (`broker logs` reads local files)
    pools = OnPremProvider(load_pools(tmp / "pools.yaml"), clock=SystemClock(), workdir=tmp)
    try:
        log = pools.log(f"onprem:{tag}-rack:{attempt['attempt']}")
    finally:
        pools.close()
    total = expected_total(2, STEPS)
    assert f"rank 0: done at step {STEPS}, total {total}" in log, log
    assert f"rank 1: done at step {STEPS}, total {total}" in log, log


def test_a_gang_larger_than_its_slurm_pool_is_refused_when_planned(lab, slurm_cluster):
    tmp, jobs, env, tag = lab
    (jobs / "trio.yaml").write_text(
        _job("trio", "A100-80GB:2", "onprem-slurm", "hostname", nodes="3")
    )
    planned = _broker("plan", str(jobs / "trio.yaml"), "--explain", env=env)
    assert planned.returncode == 3, planned.stdout + planned.stderr
    assert "no gang of 3 nodes offered here" in planned.stdout
    (jobs / "duo.yaml").write_text(
        _job("duo", "A100-80GB:2", "onprem-slurm", "hostname", nodes="2")
    )
    assert _broker("plan", str(jobs / "duo.yaml"), env=env).returncode == 0  # 2 nodes fit
    assert _broker("submit", str(jobs / "trio.yaml"), env=env).returncode == 0
    assert _broker("run", "--once", env=env).returncode == 0
    status = json.loads(_broker("status", "trio", "-o", "json", env=env).stdout)
    assert status["state"] == "queued" and status["attempts"] == []
    queue = _broker("queue", env=env).stdout
    assert "no gang of 3 nodes offered here" in queue, queue
    assert tag not in slurm_cluster.run("squeue", "-h", "-o", "%j")  # nothing sent to Slurm
