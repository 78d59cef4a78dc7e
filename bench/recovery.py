"""Spot-survival benchmark (issue 6). Prints one JSON document of figures; asserts nothing.

    python bench/recovery.py [--reclaims 5] [--checkpoint-mb 200]

In the sandbox, with real processes: a job checkpoints, its spot instance is reclaimed,
and the controller (passes back to back, no polling delay) closes the attempt, re-plans
(the reclaimed place is closed for spot), copies the checkpoint to the new place's
store with the ObjectStore, and relaunches it. Measured per reclaim:

- recovery: from the notice to the job running again, minus the launch call itself
  (a cloud's provisioning time is not the broker's);
- the share of recovery spent copying the checkpoint (`--checkpoint-mb` of extra state
  is put beside the training script's checkpoint so the copy has real bytes to move);
- lost work: training steps redone after the resume, and the hours the controller
  recorded as lost since the last checkpoint.

And per gang reclaim (`--gangs`, `--gang-nodes`; docs/distributed.md): a gang of
examples/distributed/allreduce.py checkpoints, one of its nodes is reclaimed, and every
rank stops; measured from that notice to every rank of the new gang running again
(`recovery_s`, less the launch call) and to the ranks having met again over TCP
(`rejoined_s`, from rank 0's log), with the checkpoint copy's share.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from broker.state.model import Attempt, InstanceRow

JOB = """\
apiVersion: broker/v1
name: {name}
team: bench
resources:
  accelerators: T4:1
  nodes: {nodes}
placement:
  clouds: [aws, gcp, azure]
  spot: only
run:
  workdir: {workdir}
  command: python3 {script} --steps 100000 --checkpoint-every 50 --step-seconds 0.002
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://bench/{name}/
  interval_minutes: 30
  size_gb: {size_gb}
"""


class Timed:
    """Wraps a callable and keeps how long each call took."""

    def __init__(self, call):
        self.call, self.seconds = call, []

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.call(*args, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - start)


def wait_until(condition, timeout: float = 60.0) -> bool:
    """`condition` polled every 5 ms (the figures are in tens of milliseconds)."""
    from providers.polling import wait_for

    return wait_for(condition, timeout, first=0.005, most=0.005)


@dataclass(frozen=True)
class Launched:
    """A submitted job running its first attempt, with a checkpoint written."""

    job_id: str
    first: Attempt
    store: Path  # the checkpoint store of its place
    instance: InstanceRow  # as the store recorded it


def launch_checkpointed(rt, name: str, nodes: int, script: str, size_gb: float) -> Launched:
    """Submit the bench job `name` (`script` of the examples, on `nodes` nodes), start it
    and wait for its first checkpoint."""
    from broker.manifest.load import load_manifests
    from broker.submit import submit_manifests

    examples = REPO / "examples"
    workdir = examples / "distributed" if nodes > 1 else examples
    path = rt.workdir.parent / f"{name}.yaml"
    text = JOB.format(name=name, nodes=nodes, workdir=workdir, script=script, size_gb=size_gb)
    path.write_text(text)
    (result,) = submit_manifests(rt.store, load_manifests([path]).manifests)
    rt.controller.run_pass()
    (first,) = rt.store.attempts(result.job_id)
    place = first.placed_on
    store = Path(rt.provider.checkpoint_store(result.job_id, place.cloud, place.region))
    wait_until((store / "checkpoint.json").exists)
    (instance,) = rt.store.instances(attempt_id=first.id)
    return Launched(result.job_id, first, store, instance)


@contextmanager
def timed_recovery(rt) -> Iterator[tuple[Timed, Timed]]:
    """(launch, copy): the provider's launch calls and the checkpoint copies while inside."""
    from providers.storage import ObjectStore

    launch = rt.provider.launch = Timed(rt.provider.launch)
    copy = Timed(ObjectStore.copy_tree)
    ObjectStore.copy_tree = lambda self, *a, **k: copy(self, *a, **k)
    try:
        yield launch, copy
    finally:
        ObjectStore.copy_tree = copy.call
        del rt.provider.launch


def recovered(rt, second, recovery: float, launch: Timed, copy: Timed) -> dict:
    """Stop the relaunched attempt; the figures every reclaim reports."""
    for known in rt.store.instances(attempt_id=second.id):
        rt.provider.terminate(known.provider_id)
    rt.controller.run_pass()
    moved = rt.store.migration(second.id)
    return {
        "recovery_s": recovery,
        "copy_s": sum(copy.seconds),
        "copy_share": sum(copy.seconds) / recovery if recovery > 0 else None,
        "launch_s": sum(launch.seconds),
        "moved": f"{moved['from']} -> {moved['to']}" if moved else "same region",
        "copied_mb": round(moved["bytes"] / 2**20, 1) if moved else 0,
    }


def one_reclaim(rt, n: int, checkpoint_mb: int) -> dict:
    size_gb = max(checkpoint_mb / 1024, 0.001)
    job = launch_checkpointed(rt, f"survivor-{n}", 1, "train.py", size_gb)
    with open(job.store / "state.bin", "wb") as blob:  # the bulk of a real checkpoint
        for _ in range(checkpoint_mb):
            blob.write(os.urandom(1 << 20))
    with timed_recovery(rt) as (launch, copy):
        noticed = time.perf_counter()
        rt.provider.interrupt(job.instance.provider_id)
        while len(rt.store.attempts(job.job_id)) < 2 or not rt.store.instances(
            attempt_id=rt.store.attempts(job.job_id)[-1].id
        ):
            rt.controller.run_pass()
        running = time.perf_counter()
    second = rt.store.attempts(job.job_id)[-1]
    interrupted = rt.store.attempt(job.first.id)
    log = (rt.workdir / job.first.id / "log.txt").read_text()
    saved = int(log.split("interrupted by SIGTERM at step ")[1].split(":")[0])
    figures = recovered(rt, second, running - noticed - sum(launch.seconds), launch, copy)
    return {
        **figures,
        "steps_saved_at_notice": saved,
        "lost_reason": interrupted.reason.split("; ", 1)[-1],
    }


def one_gang_reclaim(rt, n: int, nodes: int) -> dict:
    """Reclaim rank 1 of a running gang; time until the new gang's ranks all run again."""
    job = launch_checkpointed(rt, f"gang-{n}", nodes, "allreduce.py", 0.001)

    def all_running() -> bool:
        attempts = rt.store.attempts(job.job_id)
        known = rt.store.instances(attempt_id=attempts[-1].id) if len(attempts) > 1 else []
        if not known:
            return False
        gang = rt.provider.describe(known[0].provider_id)
        return bool(gang.members) and all(m.state == "running" for m in gang.members)

    with timed_recovery(rt) as (launch, copy):
        noticed = time.perf_counter()
        rt.provider.interrupt(job.instance.members[1].node_id)  # one node of the gang
        while not all_running():
            rt.controller.run_pass()
        running = time.perf_counter()
    second = rt.store.attempts(job.job_id)[-1]
    head = rt.workdir / second.id / "rank-0" / "log.txt"
    wait_until(lambda: "ranks joined" in head.read_text())
    rejoined = time.perf_counter()
    stopped = (rt.workdir / job.first.id / "rank-0" / "log.txt").read_text()
    saved = int(stopped.split("rank 0: stopped at step ")[1].split(",")[0])
    launched = sum(launch.seconds)
    figures = recovered(rt, second, running - noticed - launched, launch, copy)
    figures.pop("copied_mb")
    return {
        "nodes": nodes,
        **figures,
        "rejoined_s": rejoined - noticed - launched,
        "steps_saved_at_notice": saved,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reclaims", type=int, default=5)
    parser.add_argument("--checkpoint-mb", type=int, default=200)
    parser.add_argument("--gangs", type=int, default=3, help="gang reclaims to measure")
    parser.add_argument("--gang-nodes", type=int, default=2)
    args = parser.parse_args()

    from broker.clock import SystemClock
    from broker.offers import load_offers
    from broker.runtime import open_runtime

    with tempfile.TemporaryDirectory(prefix="broker-bench-recovery-") as tmp:
        rt = open_runtime(Path(tmp) / "state.db", load_offers(), clock=SystemClock())
        try:
            runs = [one_reclaim(rt, n, args.checkpoint_mb) for n in range(args.reclaims)]
            gangs = [one_gang_reclaim(rt, n, args.gang_nodes) for n in range(args.gangs)]
        finally:
            for instance in rt.provider.list_instances():
                rt.provider.terminate(instance.id)
            rt.close()
    figures = {
        "reclaims": len(runs),
        "checkpoint_mb": args.checkpoint_mb,
        "recovery_s_median": statistics.median(r["recovery_s"] for r in runs),
        "recovery_s_max": max(r["recovery_s"] for r in runs),
        "copy_share_median": statistics.median(r["copy_share"] or 0 for r in runs),
        "launch_s_median": statistics.median(r["launch_s"] for r in runs),
        "runs": runs,
    }
    if gangs:
        figures["gang"] = {
            "reclaims": len(gangs),
            "nodes": args.gang_nodes,
            "recovery_s_median": statistics.median(g["recovery_s"] for g in gangs),
            "rejoined_s_median": statistics.median(g["rejoined_s"] for g in gangs),
            "launch_s_median": statistics.median(g["launch_s"] for g in gangs),
            "runs": gangs,
        }
    json.dump(figures, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
