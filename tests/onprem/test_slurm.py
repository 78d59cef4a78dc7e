"""OnPremProvider on the real 3-node Slurm cluster (tests/conftest.py: slurm_cluster):
typed and MIG gres, switches, Slurm's allocation and elapsed time, a restart that finds
its jobs, requeue preemption with resume, --signal before the time limit, sinfo offers."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from broker.offers import load_offers
from onprem.inventory import Executor
from providers.errors import InvalidRequest
from tests.onprem.harness import mig_pool, request, slurm_pool
from tests.waiting import wait_until


def _id() -> str:
    return uuid.uuid4().hex[:10]


def _ended(provider, instance, timeout=60):
    assert wait_until(lambda: not provider.describe(instance.id).active, timeout), instance.id
    return provider.describe(instance.id)


def test_a_gpu_job_gets_slurms_gpus_and_is_billed_slurms_elapsed_time(make, slurm_cluster):
    pool = slurm_pool(slurm_cluster, f"a100-{_id()}")
    provider = make(pool)
    command = 'echo "cvd=$CUDA_VISIBLE_DEVICES job=$BROKER_JOB"; sleep 1; exit 3'
    instance = provider.launch(request(pool, _id(), accelerator_count=2, command=command))
    attempt = instance.id.rsplit(":", 1)[1]
    assert wait_until(lambda: provider.describe(instance.id).state != "pending", 30)
    running = provider.executor(pool.name).status(attempt)
    assert running.gpus == 2 and running.nodes[0] in ("n1", "n2")  # Slurm's allocation
    done = _ended(provider, instance)
    assert (done.state, done.exit_code) == ("failed", 3)
    assert "cvd=0,1 job=j-contract" in provider.log(instance.id)
    hours = provider.billed_hours(done)
    assert hours == (done.ended_at - done.launched_at).total_seconds() / 3600 and hours > 0


def test_mig_slices_are_typed_gres_on_the_sliced_node(make, slurm_cluster):
    pool = mig_pool(slurm_cluster, f"mig-{_id()}")
    provider = make(pool)
    instance = provider.launch(
        request(
            pool,
            _id(),
            instance_type=f"{pool.name}-1g.10gbx3",
            accelerator="A100-1g.10gb",
            accelerator_count=3,
            command='echo "slices=$CUDA_VISIBLE_DEVICES"',
        )
    )
    done = _ended(provider, instance)
    assert done.state == "succeeded" and done.instance_type == f"{pool.name}-1g.10gbx3"
    assert "slices=0,1,2" in provider.log(instance.id)
    status = provider.executor(pool.name).status(instance.id.rsplit(":", 1)[1])
    assert status.nodes == ("n3",)


def test_a_two_node_job_stays_under_one_leaf_switch(make, slurm_cluster, tmp_path):
    pool = slurm_pool(slurm_cluster, f"a100-{_id()}", switch_wait=30)
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), nodes=2, command="hostname"))
    done = _ended(provider, instance)
    attempt = instance.id.rsplit(":", 1)[1]
    assert done.state == "succeeded" and done.nodes == 2
    assert set(provider.executor(pool.name).status(attempt).nodes) == {"n1", "n2"}  # leaf1
    script = next((tmp_path / "slurm").glob(f"*/{attempt}/batch.sh")).read_text()
    assert "#SBATCH --switches=1@00:00:30" in script


def test_a_restarted_provider_finds_its_jobs_and_never_submits_twice(make, slurm_cluster):
    pool = slurm_pool(slurm_cluster, f"a100-{_id()}")
    first = make(pool)
    launched = first.launch(request(pool, "restart-1", job_id="j-restart", command="sleep 60"))
    restarted = make(pool)  # the controller was killed: a new provider, nothing in memory
    found = {i.id: i for i in restarted.list_instances()}
    assert launched.id in found and found[launched.id].tag("broker-job") == "j-restart"
    again = restarted.launch(request(pool, "restart-1", job_id="j-restart", command="sleep 60"))
    assert again.id == launched.id
    names = slurm_cluster.run("squeue", "-h", "-o", "%j")
    assert names.splitlines().count(f"broker:broker:{pool.name}:j-restart:restart-1") == 1
    assert restarted.terminate(launched.id) is True
    assert restarted.describe(launched.id).state == "terminated"
    # Once squeue has forgotten the job (MinJobAge), sacct -c and the marker still tell.
    gone = f"broker:broker:{pool.name}:j-restart:restart-1"
    assert wait_until(
        lambda: gone not in slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%j"), 60
    )
    later = make(pool)
    assert later.describe(launched.id).state == "terminated"
    assert (
        later.launch(request(pool, "restart-1", job_id="j-restart", command="sleep 60")).id
        == launched.id
    )
    assert later.describe(launched.id).state == "terminated"  # nothing new was started


def test_a_preempted_requeue_job_checkpoints_and_resumes(make, slurm_cluster):
    """requeue: true lets Slurm requeue the preempted attempt; the broker hears of it once."""
    pool = slurm_pool(slurm_cluster, f"a100-{_id()}", requeue=True)
    provider = make(pool)
    trainer = (
        "step=$(cat step 2>/dev/null || echo 0); "
        "trap 'echo \"checkpoint at step $step\"; echo $step > step; exit 0' TERM; "
        'echo "start at step $step"; '  # after the trap: once it shows, TERM is handled
        "while [ $step -lt 20 ]; do step=$((step+1)); sleep 0.2; done; echo done"
    )
    instance = provider.launch(request(pool, _id(), accelerator_count=8, command=trainer))
    provider.interruptions()
    assert wait_until(lambda: provider.describe(instance.id).state == "running", 30)
    assert wait_until(lambda: "start at step 0" in provider.log(instance.id), 30)
    node = provider.executor(pool.name).status(instance.id.rsplit(":", 1)[1]).nodes[0]
    slurm_cluster.run(
        "sbatch", "-p", "high", "-w", node, "--gres=gpu:a100:8", "-o", "/dev/null",
        "--wrap", "sleep 2",
    )  # fmt: skip
    assert wait_until(lambda: "checkpoint at step" in provider.log(instance.id), 30)
    notices = []
    assert wait_until(lambda: notices.extend(provider.interruptions()) or notices, 30)
    assert [(n.instance_id, n.kind) for n in notices] == [(instance.id, "preemption")]
    assert provider.interruptions() == []
    assert provider.describe(instance.id).active  # Slurm requeued it: the attempt goes on
    # Slurm holds a requeued job back for cred_expire + 1 s (11 s here); let it go at once.
    job = provider.executor(pool.name).status(instance.id.rsplit(":", 1)[1]).handle
    assert wait_until(lambda: provider.describe(instance.id).state == "pending", 30)
    slurm_cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    done = _ended(provider, instance, timeout=60)  # resumed and finished
    log = provider.log(instance.id)
    assert done.state == "succeeded" and "done" in log
    resumed = [line for line in log.splitlines() if line.startswith("start at step")]
    assert len(resumed) == 2 and resumed[1] != "start at step 0"


def test_sigterm_arrives_before_the_time_limit(make, slurm_cluster):
    """--signal=B:TERM@30 with a one-minute limit: the job hears SIGTERM once and ends
    cleanly before the limit, instead of ending TIMEOUT ("failed"). slurmctld sends the
    signal from a check every 30 s and loses it when that check comes before the batch
    shell exists; the batch script's own timer covers that case."""
    pool = slurm_pool(slurm_cluster, f"a100-{_id()}")
    provider = make(pool, grace=30)
    command = "trap 'echo got SIGTERM; exit 0' TERM; sleep 300 & wait"
    instance = provider.launch(request(pool, _id(), command=command, time_limit_seconds=60))
    done = _ended(provider, instance, timeout=75)
    assert provider.log(instance.id).count("got SIGTERM") == 1
    assert done.state == "succeeded" and (done.ended_at - done.launched_at).total_seconds() < 60


def test_offers_and_free_nodes_come_from_sinfo(make, slurm_cluster, tmp_path):
    pool, mig = slurm_pool(slurm_cluster, f"a100-{_id()}"), mig_pool(slurm_cluster, f"mig-{_id()}")
    provider = make(pool, mig)
    whole = provider.launch(request(pool, _id(), accelerator_count=8, command="sleep 60"))
    sliced = provider.launch(
        request(
            mig,
            _id(),
            instance_type=f"{mig.name}-1g.10gbx3",
            accelerator="A100-1g.10gb",
            accelerator_count=3,
            command="sleep 60",
        )
    )
    for instance in (whole, sliced):
        assert wait_until(lambda i=instance: provider.describe(i.id).state == "running", 30)
    rows = {
        (r["instance_type"], r["accelerator_count"]): r
        for r in provider.offers().to_frame().to_dict("records")
    }
    assert rows[(f"{pool.name}-node", 8)]["capacity"] == 1.0  # 8 of 16 GPUs busy
    assert rows[(f"{pool.name}-node", 2)]["capacity"] == 4.0  # four 2-GPU shares are free
    assert rows[(f"{mig.name}-1g.10gbx1", 1)]["capacity"] == 4.0  # 3 of 7 slices busy
    assert provider.free_nodes()[("onprem", pool.region)] == 1 + 1
    # The same figures for any command loading the offers in force with live pools.
    path = tmp_path / "pools.yaml"
    path.write_text(
        f"pools:\n  - name: {pool.name}\n    location: {{region: {pool.region}, country: US}}\n"
        "    gpu: A100-80GB\n    gpus_per_node: 8\n    vcpus_per_node: 16\n"
        "    memory_gib_per_node: 62\n    cost_per_gpu_hour: 1.1\n    nodes: [n1, n2]\n"
        "    executor: {kind: slurm, partition: low, gres: a100, "
        f"slurm_conf: {slurm_cluster.conf}}}\n"
    )
    def whole_node(frame):
        node = (frame["instance_type"] == f"{pool.name}-node") & (frame["accelerator_count"] == 8)
        return frame[node].iloc[0]

    live = load_offers(pools_path=path, live_pools=tmp_path).index.offers.to_frame()
    assert whole_node(live)["capacity"] == 1.0
    still = load_offers(pools_path=path).index.offers.to_frame()
    assert whole_node(still)["capacity"] == 2.0


def test_a_gres_the_cluster_lacks_is_an_invalid_request(make, slurm_cluster):
    pool = slurm_pool(slurm_cluster, f"h100-{_id()}")
    options = replace(pool.executor.options, gres="h100")
    broken = replace(pool, executor=Executor("slurm", options))
    provider = make(broken)
    with pytest.raises(InvalidRequest, match="slurm"):
        provider.launch(request(broken, _id()))
    assert provider.list_instances() == []


def test_over_ssh_the_jobs_run_as_the_login_user(make, slurm_cluster, ssh_nodes):
    pool = slurm_pool(slurm_cluster, f"login-{_id()}", ssh=ssh_nodes)
    provider = make(pool)
    instance = provider.launch(request(pool, _id(), command='echo "user=$(whoami)"'))
    done = _ended(provider, instance)
    assert done.state == "succeeded" and "user=brokerci" in provider.log(instance.id)
    assert done.log_path.startswith("/home/brokerci/")


def test_a_packed_workdir_reaches_the_cluster_through_the_login(
    make, slurm_cluster, ssh_nodes, tmp_path
):
    from providers.workdir import pack_workdir

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('trained on', open('data.txt').read().strip())\n")
    (project / "data.txt").write_text("42 samples\n")
    packed = pack_workdir(project, tmp_path / "packs", limit=1 << 20)
    pool = slurm_pool(slurm_cluster, f"login-{_id()}", ssh=ssh_nodes)
    provider = make(pool)
    instance = provider.launch(
        request(pool, _id(), workdir_uri=packed.uri, command="python3 train.py")
    )
    done = _ended(provider, instance)
    assert done.state == "succeeded" and "trained on 42 samples" in provider.log(instance.id)
