"""`broker offers --live` with pools: each pool's free GPUs as its engine reports them
now (here the local executor: the broker's own running attempts), not every GPU."""

from __future__ import annotations

import json
from pathlib import Path

from broker.clock import SystemClock
from broker.manifest.load import load_manifests
from broker.offers import load_offers
from broker.runtime import open_runtime
from broker.state import JobState
from broker.submit import submit_manifests
from tests.cli.runner import run_cli
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
POOLS = REPO / "examples" / "demo" / "pools.yaml"
HOLDS_FOUR = """\
apiVersion: broker/v1
name: holds-four
team: lab
resources:
  accelerators: A100-80GB:4
placement:
  clouds: [onprem]
run:
  command: sleep 120
runtime:
  estimate_hours: 1
"""


def whole_node_capacity(stdout: str) -> dict[int, float]:
    """GPU count -> capacity of the lab-a100 rows (`offers -o json`)."""
    rows = json.loads(stdout)["offers"]
    return {
        int(r["accelerator_count"]): float(r["capacity"])
        for r in rows
        if r["instance_type"] == "lab-a100-node"
    }


def test_live_pools_show_what_the_broker_runs_there(capsys, tmp_path, monkeypatch):
    state = tmp_path / "state.db"
    monkeypatch.setenv("BROKER_STATE", str(state))
    args = ("offers", "--pools", str(POOLS), "--cloud", "onprem", "--gpu", "A100-80GB")
    args += ("--limit", "0", "-o", "json")
    idle = run_cli(capsys, *args, "--live")
    assert idle.code == 0, idle.stderr
    assert whole_node_capacity(idle.stdout)[8] == 2.0  # two idle 8-GPU nodes
    (tmp_path / "job.yaml").write_text(HOLDS_FOUR)
    rt = open_runtime(state, load_offers(pools_path=POOLS), clock=SystemClock())
    try:
        (result,) = submit_manifests(rt.store, load_manifests([tmp_path / "job.yaml"]).manifests)
        rt.controller.run_pass()
        assert wait_until(lambda: rt.store.job(result.job_id).state is JobState.RUNNING)
        busy = run_cli(capsys, *args, "--live")
        assert busy.code == 0, busy.stderr
        assert whole_node_capacity(busy.stdout)[8] == 1.5  # 12 of 16 GPUs free
        assert whole_node_capacity(busy.stdout)[4] == 3.0
        static = run_cli(capsys, *args)  # without --live: every GPU counts as free
        assert whole_node_capacity(static.stdout)[8] == 2.0
    finally:
        rt.controller.cancel(result.job_id)
        rt.close()


def test_live_without_clouds_or_pools_is_bad_input(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BROKER_STATE", str(tmp_path / "state.db"))
    monkeypatch.delenv("BROKER_CLOUDS", raising=False)
    result = run_cli(capsys, "offers", "--live")
    assert result.code == 2 and "clouds or pools" in result.stderr
