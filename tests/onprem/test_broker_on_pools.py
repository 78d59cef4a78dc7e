"""The broker end to end on real pools: `broker submit` and `broker run` through the
command line onto the 3-node Slurm cluster and the sshd nodes (tests/conftest.py), with
cost reports at the pool rate from Slurm's own times, a controller SIGKILLed mid-run that
neither duplicates nor orphans a Slurm job, and a high-priority job preempting a
checkpointing one on Slurm, which then resumes from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
BROKER = [sys.executable, "-m", "broker"]


def _pools(cluster, ssh, tag: str) -> str:
    """Slurm pools on n1+n2 (whole A100s) and n3 (MIG slices), an SSH pool on the sshd
    nodes, each in its own region so a manifest can pick one."""
    nodes = "\n".join(
        f"      - {{name: {tag}-node{i + 1}, address: 127.0.0.1, port: {port}}}"
        for i, port in enumerate(ssh.ports)
    )
    return f"""pools:
  - name: {tag}-a100
    location: {{region: onprem-slurm, country: US}}
    gpu: A100-80GB
    gpus_per_node: 8
    vcpus_per_node: 16
    memory_gib_per_node: 60
    nvlink_domain: 8
    fabric: infiniband
    cost_per_gpu_hour: 1.10
    nodes:
      - {{name: n1, switch: leaf1}}
      - {{name: n2, switch: leaf1}}
    executor: {{kind: slurm, partition: low, gres: a100, slurm_conf: {cluster.conf},
                switch_wait: 30}}
  - name: {tag}-mig
    location: {{region: onprem-slurm, country: US}}
    gpu: A100-80GB
    gpus_per_node: 1
    vcpus_per_node: 16
    memory_gib_per_node: 60
    cost_per_gpu_hour: 1.40
    mig: {{1g.10gb: 7}}
    nodes: [n3]
    executor: {{kind: slurm, partition: low, gres: a100, slurm_conf: {cluster.conf}}}
  - name: {tag}-rack
    location: {{region: onprem-ssh, country: US}}
    gpu: A100-80GB
    gpus_per_node: 2
    vcpus_per_node: 16
    memory_gib_per_node: 60
    cost_per_gpu_hour: 1.20
    nodes:
{nodes}
    executor: {{kind: ssh, user: {ssh.user}, identity_file: {ssh.identity_file},
                known_hosts: {ssh.known_hosts}}}
"""


def _job(name: str, gpus: str, region: str, command: str, **extra: str) -> str:
    lines = [
        "apiVersion: broker/v1",
        f"name: {name}",
        "team: lab",
        f"priority: {extra.get('priority', '0')}",
        "resources:",
        f"  accelerators: {gpus}",
        f"  nodes: {extra.get('nodes', '1')}",
        "placement:",
        "  clouds: [onprem]",
        f"  regions: [{region}]",
        "run:",
        "  workdir: .",
        f"  command: {command}",
        "runtime:",
        "  estimate_hours: 0.01",
    ]
    if "checkpoint" in extra:
        lines += ["checkpoint:", f"  uri: {extra['checkpoint']}", "  interval_minutes: 1"]
    return "\n".join(lines) + "\n"


def _broker(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*BROKER, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def lab(tmp_path, slurm_cluster, ssh_nodes):
    """A state file, the pools file and a jobs folder with examples/train.py in it."""
    tag = uuid.uuid4().hex[:6]
    (tmp_path / "pools.yaml").write_text(_pools(slurm_cluster, ssh_nodes, tag))
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "train.py").write_text((REPO / "examples" / "train.py").read_text())
    env = {
        **os.environ,
        "SLURM_CONF": str(slurm_cluster.conf),
        "BROKER_STATE": str(tmp_path / "state" / "state.db"),
        "BROKER_POOLS": str(tmp_path / "pools.yaml"),
        "BROKER_CATALOG": str(REPO / "pricing" / "data" / "offers.csv"),
    }
    return tmp_path, jobs, env, tag


def _sacct(cluster) -> list[dict[str, str]]:
    """Every termination the cluster recorded (sacct -c reads the jobcomp file)."""
    out = cluster.run(
        "sacct", "-c", "-X", "-n", "--parsable2", "-o", "JobID,JobName,State,Start,End"
    )
    rows = []
    for line in out.splitlines():
        job, name, state, start, end = line.split("|")[:5]
        rows.append({"id": job, "name": name, "state": state, "start": start, "end": end})
    return rows


def test_jobs_drain_onto_slurm_mig_and_ssh_pools_billed_at_the_pool_rate(lab, slurm_cluster):
    tmp, jobs, env, tag = lab
    (jobs / "two-gpu.yaml").write_text(
        _job("two-gpu", "A100-80GB:2", "onprem-slurm", "echo cvd=$CUDA_VISIBLE_DEVICES; sleep 2")
    )
    (jobs / "slice.yaml").write_text(
        _job("slice", "A100-1g.10gb:1", "onprem-slurm", "echo slices=$CUDA_VISIBLE_DEVICES")
    )
    (jobs / "pair.yaml").write_text(
        _job("pair", "A100-80GB:8", "onprem-slurm", "echo rank=$BROKER_NODE_RANK", nodes="2")
    )
    (jobs / "rack.yaml").write_text(
        _job("rack", "A100-80GB:2", "onprem-ssh", "python3 train.py --steps 20")
    )
    submitted = _broker("submit", str(jobs), env=env)
    assert submitted.returncode == 0, submitted.stderr
    ran = _broker("run", "--poll", "0.5", env=env)
    assert ran.returncode == 0, ran.stderr
    for name in ("two-gpu", "slice", "pair", "rack"):
        status = json.loads(_broker("status", name, "-o", "json", env=env).stdout)
        assert status["state"] == "succeeded", (name, status)
        assert len(status["attempts"]) == 1
    report = json.loads(_broker("cost-report", "--by", "job,kind", "-o", "json", env=env).stdout)
    kinds = {group["kind"] for group in report["groups"]}
    assert kinds == {"onprem"}  # every charge at a pool's rate
    # Slurm's own elapsed time, at the pool's rate: the two-GPU job on the a100 pool
    status = json.loads(_broker("status", "two-gpu", "-o", "json", env=env).stdout)
    attempt = status["attempts"][0]
    # the Slurm job's name ends with the attempt id (onprem.executors.slurm_text.job_name)
    (slurm,) = [r for r in _sacct(slurm_cluster) if r["name"].endswith(attempt["attempt"])]
    seconds = (
        datetime.fromisoformat(slurm["end"]) - datetime.fromisoformat(slurm["start"])
    ).total_seconds()
    billed = Decimal(attempt["billed_hours"])
    assert abs(billed * 3600 - Decimal(seconds)) <= 1  # Slurm's seconds, not the broker's
    cost = Decimal(attempt["cost_usd"])
    assert abs(cost - billed * Decimal("1.10") * 2) < Decimal("0.01")


def test_a_killed_controller_finds_its_slurm_jobs_and_never_submits_twice(lab, slurm_cluster):
    tmp, jobs, env, tag = lab
    for name in ("long-a", "long-b"):
        (jobs / f"{name}.yaml").write_text(_job(name, "A100-80GB:4", "onprem-slurm", "sleep 12"))
    assert _broker("submit", str(jobs), env=env).returncode == 0
    controller = subprocess.Popen(
        [*BROKER, "run", "--poll", "0.5"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def both_running() -> bool:
            out = slurm_cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%j")
            return sum(1 for line in out.splitlines() if line.strip()) >= 2

        assert wait_until(both_running, 60)
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait(30)
    again = _broker("run", "--poll", "0.5", env=env)
    assert again.returncode == 0, again.stderr
    for name in ("long-a", "long-b"):
        status = json.loads(_broker("status", name, "-o", "json", env=env).stdout)
        assert status["state"] == "succeeded" and len(status["attempts"]) == 1
        attempt = status["attempts"][0]["attempt"]
        runs = [r for r in _sacct(slurm_cluster) if r["name"].endswith(attempt)]
        assert len(runs) == 1, runs  # one Slurm job per attempt: nothing doubled
    left = slurm_cluster.run("squeue", "-h", "-o", "%j")
    assert tag not in left and "long-" not in left  # nothing orphaned


def test_a_high_priority_job_preempts_a_checkpointing_one_which_resumes(lab, slurm_cluster):
    tmp, jobs, env, tag = lab
    checkpoints = tmp / "ckpt"
    policy = tmp / "policy.yaml"
    policy.write_text("preemption:\n  enabled: true\n  protect_minutes: 0\n")
    env = {**env, "BROKER_POLICY": str(policy)}
    for name in ("low-a", "low-b"):
        (jobs / f"{name}.yaml").write_text(
            _job(
                name, "A100-80GB:8", "onprem-slurm",
                "python3 train.py --steps 4000 --step-seconds 0.01 --checkpoint-every 50",
                checkpoint=(checkpoints / name).as_uri(),
            )
        )  # fmt: skip
    assert _broker("submit", str(jobs), env=env).returncode == 0
    controller = subprocess.Popen(
        [*BROKER, "run", "--poll", "0.5", "--policy", str(policy)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_until(lambda: len(list(checkpoints.glob("*/checkpoint.json"))) == 2, 90)
        urgent = tmp / "urgent"
        urgent.mkdir()
        (urgent / "urgent.yaml").write_text(
            _job("urgent", "A100-80GB:8", "onprem-slurm", "sleep 1", priority="10")
        )
        assert _broker("submit", str(urgent), env=env).returncode == 0
        assert controller.wait(300) == 0
    finally:
        if controller.poll() is None:
            controller.kill()
    urgent = json.loads(_broker("status", "urgent", "-o", "json", env=env).stdout)
    assert urgent["state"] == "succeeded"
    lows = [
        json.loads(_broker("status", n, "-o", "json", env=env).stdout) for n in ("low-a", "low-b")
    ]
    assert all(low["state"] == "succeeded" for low in lows)
    preempted = [low for low in lows if len(low["attempts"]) == 2]
    assert len(preempted) == 1, [len(low["attempts"]) for low in lows]  # one victim
    first, second = preempted[0]["attempts"]
    assert first["state"] == "interrupted" and second["state"] == "succeeded"
    log = _broker("logs", preempted[0]["name"], env=env).stdout
    assert "resumed from step" in log  # from its checkpoint, not from zero
