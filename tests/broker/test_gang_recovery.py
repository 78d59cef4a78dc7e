"""Gang migration in the sandbox, with real processes, sockets and checkpoint files: a
2-node spot gang whose rank 1 is reclaimed mid-run stops as a unit, its checkpoint
(rank 0's) moves once, and the gang resumes elsewhere with the total of a run that was
never interrupted (examples/distributed/allreduce.py)."""

from __future__ import annotations

import json
from pathlib import Path

from broker.manifest.load import load_manifests
from broker.state import AttemptState
from broker.submit import submit_manifests
from tests.broker.test_recovery import finish
from tests.broker.test_recovery import rt as rt  # the fixture: a sandbox runtime
from tests.cli.test_distributed_cli import expected_total
from tests.waiting import wait_ended, wait_until

REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY = 1500, 50
JOB = f"""\
apiVersion: broker/v1
name: gang
team: nlp
resources:
  accelerators: T4:1
  nodes: 2
placement:
  clouds: [aws, gcp]
  spot: only
run:
  workdir: {REPO / "examples" / "distributed"}
  command: python3 allreduce.py --steps {STEPS} --checkpoint-every {EVERY} --step-seconds 0.002
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://acme-ckpt/gang/
  interval_minutes: 30
  size_gb: 20
"""


def submit(rt) -> str:
    path = rt.workdir.parent / "gang.yaml"
    path.write_text(JOB)
    (manifest,) = load_manifests([path]).manifests
    (result,) = submit_manifests(rt.store, [manifest])
    return result.job_id


def rank_log(rt, attempt_id: str, rank: int) -> str:
    return (rt.workdir / attempt_id / f"rank-{rank}" / "log.txt").read_text()


def test_a_reclaimed_gang_moves_once_and_resumes_as_a_unit(rt):
    job_id = submit(rt)
    rt.controller.run_pass()
    (first,) = rt.store.attempts(job_id)
    here = first.placed_on
    assert here.nodes == 2
    store = Path(rt.provider.checkpoint_store(job_id, here.cloud, here.region))
    assert wait_until((store / "checkpoint.json").exists)
    rt.controller.run_pass()  # sees the gang running, with its nodes
    (instance,) = rt.store.instances(attempt_id=first.id)
    assert [m.rank for m in instance.members] == [0, 1]
    notice = rt.provider.interrupt(instance.members[1].node_id)  # one node is reclaimed
    assert notice is not None and notice.instance_id == instance.provider_id
    wait_ended(rt.provider, instance.provider_id, 30)

    finish(rt, job_id)
    attempts = rt.store.attempts(job_id)
    assert [a.state for a in attempts] == [AttemptState.INTERRUPTED, AttemptState.SUCCEEDED]
    second = attempts[1]
    there = second.placed_on
    assert (here.cloud, here.region) != (there.cloud, there.region)
    assert second.market == "spot" and there.nodes == 2
    # Both ranks stopped on the notice; rank 0 saved the checkpoint.
    (gone,) = rt.store.instances(attempt_id=first.id)
    assert [m.state for m in gone.members] == ["interrupted", "interrupted"]
    stopped = rank_log(rt, first.id, 0)
    saved = int(stopped.split("rank 0: stopped at step ")[1].split(",")[0])
    assert "rank 1: stopped at step" in rank_log(rt, first.id, 1)
    # The checkpoint moved once, as one unit, to the new place's store.
    migration = rt.store.migration(second.id)
    assert migration["from"] == f"{here.cloud}/{here.region}"
    assert migration["to"] == f"{there.cloud}/{there.region}"
    assert rt.store.migration(first.id) is None
    moves = [e for e in rt.store.events(job_id) if e.kind == "checkpoint_migrated"]
    assert len(moves) == 1
    assert f"rank 0: resumed at step {saved}" in rank_log(rt, second.id, 0)
    # The same total as a gang that never stopped, agreed by both ranks.
    target = Path(rt.provider.checkpoint_store(job_id, there.cloud, there.region))
    final = json.loads((target / "checkpoint.json").read_text())
    assert final == {"step": STEPS, "total": expected_total(2, STEPS), "done": True}
    for rank in (0, 1):
        agreed = json.loads((target / f"agreed-{rank}.json").read_text())
        assert agreed["total"] == expected_total(2, STEPS)
    (last,) = rt.store.instances(attempt_id=second.id)
    assert [m.state for m in last.members] == ["succeeded", "succeeded"]
