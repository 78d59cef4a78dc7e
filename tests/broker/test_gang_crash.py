"""A controller killed while it launches a gang: no orphaned rank, no doubled gang.

Two ways: a controller that dies between starting rank 0 and rank 1 (a BaseException
nothing catches, standing for SIGKILL at that exact point), and real SIGKILLs of
`broker run` at random moments while gang jobs start and run."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import AttemptState, JobState, StateStore
from broker.submit import submit_manifests
from providers.sandbox import SandboxProvider
from tests.broker.killed_runs import broker, run_killed_at_random

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "distributed"
TEMPLATE = """\
apiVersion: broker/v1
name: gang-{i}
team: team-{team}
resources:
  accelerators: {gpu}
  nodes: {nodes}
placement:
  clouds: [gcp, aws]
run:
  workdir: {example}
  command: python3 allreduce.py --steps 30 --step-seconds 0.001
runtime:
  estimate_hours: 1
"""


class ControllerDied(BaseException):
    """Stands for SIGKILL between two ranks' launches: nothing catches it."""


def manifest(folder: Path, i: int, nodes: int, gpu: str = "T4:1") -> Path:
    path = folder / f"gang-{i}.yaml"
    path.write_text(TEMPLATE.format(i=i, team=i % 2, gpu=gpu, nodes=nodes, example=EXAMPLE))
    return path


def rank_dirs(workdir: Path, attempt_id: str) -> list[str]:
    return sorted(p.name for p in (workdir / attempt_id).glob("rank-*"))


def assert_clean(state: Path, jobs: int) -> None:
    """Every job succeeded once, on one gang whose every rank ran once; nothing alive."""
    with StateStore.open(state, SystemClock()) as store:
        assert {job.state for job in store.jobs()} == {JobState.SUCCEEDED}
        assert len(store.jobs()) == jobs
        attempts = store.attempts()
        assert set(Counter(a.job_id for a in attempts).values()) == {1}, "a gang ran twice"
        assert {a.state for a in attempts} == {AttemptState.SUCCEEDED}
        charges = Counter(entry.attempt_id for entry in store.ledger())
        assert charges == Counter({a.id: 1 for a in attempts}), "a charge lost or doubled"
        nodes = {a.id: a.placed_on.nodes for a in attempts}
    runtime = open_runtime(state, load_offers())
    try:
        instances = runtime.provider.list_instances()
        assert [i for i in instances if i.ended_at is None] == [], "a rank outlived its gang"
        assert sorted(i.attempt_id for i in instances) == sorted(nodes), "a gang doubled"
        for instance in instances:
            wanted = nodes[instance.attempt_id]
            assert [m.state for m in instance.members] == ["succeeded"] * wanted
            assert rank_dirs(runtime.workdir, instance.attempt_id) == [
                f"rank-{r}" for r in range(wanted)
            ]
            for rank in range(wanted):
                log = runtime.workdir / instance.attempt_id / f"rank-{rank}" / "log.txt"
                assert log.read_text().count(f"rank {rank}: done") == 1, "a rank ran twice"
    finally:
        runtime.close()


def test_a_controller_dead_between_two_ranks_leaves_a_gang_the_next_completes(
    tmp_path, monkeypatch
):
    state = tmp_path / "state.db"
    rt = open_runtime(state, load_offers(), clock=SystemClock())
    (loaded,) = load_manifests([manifest(tmp_path, 0, nodes=3)]).manifests
    submit_manifests(rt.store, [loaded])
    started = SandboxProvider._start

    def dies_at_rank_two(self, *args, key: str = "", **kwargs):
        if key.endswith("rank-2"):
            raise ControllerDied
        return started(self, *args, key=key, **kwargs)

    monkeypatch.setattr(SandboxProvider, "_start", dies_at_rank_two)
    with pytest.raises(ControllerDied):
        rt.controller.run_pass()
    rt.close()
    monkeypatch.setattr(SandboxProvider, "_start", started)
    with StateStore.open(state, SystemClock()) as store:
        (attempt,) = store.attempts()
    assert attempt.state == AttemptState.LAUNCHING
    assert rank_dirs(tmp_path / "state-sandbox", attempt.id) == ["rank-0", "rank-1"]

    name = rt.controller.holder.id  # restarted under its name: it resumes its claims at once
    done = subprocess.run(
        broker("run", "--poll", "0.05", "--state", str(state), "--controller-id", name),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert_clean(state, 1)


def test_sigkill_while_gangs_launch_and_run_orphans_and_doubles_nothing(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(8):
        manifest(jobs, i, nodes=2 + i % 2, gpu=("L4:1", "T4:1", "A100:1")[i % 3])
    state = tmp_path / "state.db"
    env = dict(os.environ, BROKER_STATE=str(state))
    subprocess.run(broker("submit", str(jobs)), env=env, check=True, capture_output=True)
    kills = run_killed_at_random(env, seed=11, finish_timeout=180)
    assert kills >= 2, "the controller should have been killed mid-run at least twice"
    assert_clean(state, 8)
