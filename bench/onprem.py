"""On-prem benchmark (issue 17): launches per second through OnPremProvider.launch on the
3-node Slurm cluster of .ci/services, against raw `sbatch` in a loop on the same cluster.
Prints one JSON document of figures; asserts nothing.

    sudo python bench/onprem.py [--jobs 1000] [--rounds 0]

Needs root and the Debian packages slurm-wlm and munge (as .ci/run installs them). The
cluster is started in a fresh folder and stopped at the end. While measuring, partition
`low` is DOWN: it still takes jobs but starts none, so the figures are submission
throughput (slurmctld's and ours), not two CPUs running a thousand jobs.

- raw_sbatch: `sbatch --parsable --gres=gpu:a100:1 -o /dev/null --wrap true`, one
  process per job from Python (the same process cost the executor pays);
- broker_launch: OnPremProvider.launch of one-GPU attempts on a Slurm pool: the
  attempt directory and batch script, sbatch (the provider's one lookup of the pool's
  jobs is made before the clock starts, as a running controller has made it);
- the two alternate, one job each by default (`--rounds`), so that other load on the
  machine hits both alike;
- list_instances: one reconcile listing by a new provider with all of them queued;
- controller_pass: `--jobs` one-GPU manifests submitted to a broker state whose pools
  file holds that Slurm pool, then the controller's passes timed: the first plans the
  whole queue and launches what the pool holds (16 GPUs), the next is the steady pass
  with the rest queued (planned again, found full, waiting).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SERVICES = REPO / ".ci" / "services"


def service(script: str, env: dict[str, str]) -> None:
    subprocess.run(["bash", str(SERVICES / script)], env=env, check=True, capture_output=True)


def raw_sbatch(jobs: int, env: dict[str, str]) -> float:
    argv = ["sbatch", "--parsable", "--gres=gpu:a100:1", "-o", "/dev/null", "--wrap", "true"]
    start = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def make_provider(conf: Path, workdir: Path):
    from broker.clock import SystemClock
    from onprem.executors.options import SlurmOptions
    from onprem.inventory import Executor, Pool, PoolNode
    from onprem.provider import OnPremProvider
    from providers.base import LaunchRequest

    options = SlurmOptions(partition="low", gres="a100", slurm_conf=str(conf))
    nodes = tuple(PoolNode(n, "bench", 8, switch="leaf1") for n in ("n1", "n2"))
    pool = Pool(
        "bench", "onprem-bench", "US", "A100-80GB", 8, 16, 62.0, 8, "infiniband", 1.1, nodes,
        Executor("slurm", options),
    )  # fmt: skip

    def provider() -> OnPremProvider:
        return OnPremProvider([pool], clock=SystemClock(), workdir=workdir)

    def request(i: int) -> LaunchRequest:
        return LaunchRequest(
            attempt_id=f"a-{i:05d}",
            job_id=f"j-{i:05d}",
            cloud="onprem",
            region=pool.region,
            zone="bench",
            instance_type="bench-node",
            accelerator_count=1.0,
            command="true",
        )

    return provider, request


def broker_launch(provider, requests) -> float:
    start = time.perf_counter()
    for request in requests:
        provider.launch(request)
    return time.perf_counter() - start


POOLS = """\
pools:
  - name: bench
    location: {{region: onprem-bench, country: US}}
    gpu: A100-80GB
    gpus_per_node: 8
    vcpus_per_node: 16
    memory_gib_per_node: 62
    cost_per_gpu_hour: 1.1
    nodes: [n1, n2]
    executor: {{kind: slurm, partition: low, gres: a100, slurm_conf: {conf}}}
"""
JOB = """\
apiVersion: broker/v1
name: bench-{i:05d}
team: bench
resources:
  accelerators: A100-80GB:1
placement:
  clouds: [onprem]
run:
  command: "true"
runtime:
  estimate_hours: 1
"""


def controller_passes(folder: Path, conf: Path, jobs: int) -> dict:
    """Seconds of the controller's first pass over `jobs` queued jobs and of the next."""
    from broker.clock import SystemClock
    from broker.manifest.load import load_manifests
    from broker.offers import load_offers
    from broker.runtime import open_runtime
    from broker.submit import submit_manifests

    pools = folder / "pools.yaml"
    pools.write_text(POOLS.format(conf=conf))
    manifests = folder / "jobs"
    manifests.mkdir()
    for i in range(jobs):
        (manifests / f"bench-{i:05d}.yaml").write_text(JOB.format(i=i))
    rt = open_runtime(folder / "state.db", load_offers(pools_path=pools), clock=SystemClock())
    try:
        start = time.perf_counter()
        submit_manifests(rt.store, load_manifests([manifests]).manifests)
        submitted = time.perf_counter() - start
        passes = []
        for _ in range(2):
            start = time.perf_counter()
            report = rt.controller.run_pass()
            passes.append((time.perf_counter() - start, len(report.launched)))
        queued = len(rt.store.queued())
    finally:
        rt.close()
    return {
        "submit_seconds": round(submitted, 3),
        "first_pass": {"seconds": round(passes[0][0], 3), "launched": passes[0][1]},
        "steady_pass": {"seconds": round(passes[1][0], 3), "queued": queued},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=0, help="alternations (0: one per job)")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        sys.exit("needs root and slurm-wlm + munge (apt-get install slurm-wlm munge)")
    folder = Path(tempfile.mkdtemp(prefix="svc-bench-", dir="/tmp"))
    folder.chmod(0o755)
    conf = folder / "slurm" / "etc" / "slurm.conf"
    env = {
        **os.environ,
        "SVC_DIR": str(folder),
        "SLURM_PORT_BASE": "17400",
        "SLURM_CONF": str(conf),
    }
    try:
        service("slurm-up.sh", env)
        down = ["scontrol", "update", "PartitionName=low", "State=DOWN"]
        subprocess.run(down, env=env, check=True)
        os.environ["SLURM_CONF"] = str(conf)
        new_provider, request = make_provider(conf, folder / "work")
        provider = new_provider()
        provider.list_instances()  # its one lookup of the pool's jobs, before the clock
        rounds = args.rounds or args.jobs
        per_round = args.jobs // rounds
        raw = launched = 0.0
        for r in range(rounds):  # alternate, so that load on the machine hits both
            raw += raw_sbatch(per_round, env)
            batch = [request(r * per_round + i) for i in range(per_round)]
            launched += broker_launch(provider, batch)
        start = time.perf_counter()
        listed = len(new_provider().list_instances())
        listing = time.perf_counter() - start
        subprocess.run(["scancel", "--user=root"], env=env, check=True)
        passes = controller_passes(folder, conf, args.jobs)
        subprocess.run(["scancel", "--user=root"], env=env, check=True)
    finally:
        service("slurm-down.sh", env)
        shutil.rmtree(folder, ignore_errors=True)
    jobs = per_round * rounds
    figures = {
        "jobs": jobs,
        "rounds": rounds,
        "cluster": "3 slurmd on localhost (Slurm 22.05), partition low DOWN while measuring",
        "raw_sbatch": {"seconds": round(raw, 3), "per_second": round(jobs / raw, 1)},
        "broker_launch": {"seconds": round(launched, 3), "per_second": round(jobs / launched, 1)},
        "broker_vs_raw": round(raw / launched, 3),
        "list_instances": {"seconds": round(listing, 3), "instances": listed},
        "controller_pass": passes,
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
