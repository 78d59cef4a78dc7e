"""submit / queue / status / cancel / run / demo through the real entry point, on the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.runner import run_cli

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo"


def test_demo_runs_every_example_job_to_success(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BROKER_CLOUDS", "aws")  # enabled, and unusable: the demo never asks
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run_cli(capsys, "demo", "--state", str(tmp_path / "state.db"), "-o", "json")
    assert result.code == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) >= 5
    assert {j["state"] for j in jobs} == {"succeeded"}
    assert all(j["cost"] > 0 for j in jobs)  # every attempt was billed
    assert {j["team"] for j in jobs} >= {"nlp", "vision"}
    assert any(j["where"].startswith("onprem/") for j in jobs)
    assert "one wall second is billed as 1 hour(s)" in result.stderr  # the demo's fast clock
    listed = run_cli(capsys, "jobs", "--state-file", str(tmp_path / "state.db"), "-o", "json")
    recorded = json.loads(listed.stdout)["jobs"]
    assert len(recorded) == len(jobs) == 5 and {j["state"] for j in recorded} == {"succeeded"}
    attempts = run_cli(
        capsys, "jobs", "--attempts", "--state-file", str(tmp_path / "state.db"), "-o", "json"
    )
    assert {a["time_scale"] for a in json.loads(attempts.stdout)["attempts"]} == {3600}
    report = run_cli(capsys, "cost-report", "--state", str(tmp_path / "state.db"))
    said = f"sandbox time: {len(json.loads(attempts.stdout)['attempts'])} attempt(s) billed 3600"
    assert said in report.stdout and "not wall hours" in report.stdout


def test_submit_is_idempotent_and_bad_input_changes_nothing(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    first = run_cli(capsys, "submit", str(DEMO), "--state", state, "-o", "json")
    assert first.code == 0, first.stderr
    assert {j["result"] for j in json.loads(first.stdout)["jobs"]} == {"new"}
    again = run_cli(capsys, "submit", str(DEMO), "--state", state, "-o", "json")
    assert {j["result"] for j in json.loads(again.stdout)["jobs"]} == {"unchanged"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (DEMO / "eval-eu.yaml").read_text().replace("L4:1", "L44:1").replace("eval-l4", "other")
    )
    broken = run_cli(capsys, "submit", str(bad), "--state", state)
    assert broken.code == 2 and "L44" in broken.stderr
    pools = str(REPO / "examples" / "demo" / "pools.yaml")
    listed = run_cli(capsys, "queue", "--state", state, "--pools", pools, "-o", "json")
    queue = json.loads(listed.stdout)["queue"]
    assert "other" not in {row["name"] for row in queue}
    assert len(queue) == len(json.loads(first.stdout)["jobs"])
    assert all(row["why"] == "starts on the next pass" for row in queue)
    without_pools = run_cli(capsys, "queue", "--state", state, "-o", "json")
    why = {row["name"]: row["why"] for row in json.loads(without_pools.stdout)["queue"]}
    assert why["embed-lab"].startswith("no feasible placement")  # its pool is not configured
    fresh = tmp_path / "never.db"
    run_cli(capsys, "submit", str(bad), "--state", str(fresh))
    assert not fresh.exists()  # a broken manifest does not even create the state file


def test_run_once_status_and_cancel(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    run_cli(capsys, "submit", str(DEMO / "finetune-spot.yaml"), "--state", state)
    assert run_cli(capsys, "run", "--once", "--state", state).code == 0
    status = json.loads(
        run_cli(capsys, "status", "llama-ft", "--state", state, "-o", "json").stdout
    )
    assert status["state"] in ("running", "succeeded")
    assert len(status["attempts"]) == 1
    kinds = [e["kind"] for e in status["events"]]
    assert kinds[0] == "submitted" and "attempt_running" in kinds
    cancel = run_cli(capsys, "cancel", "llama-ft", "--state", state)
    assert cancel.code == 0
    after = json.loads(run_cli(capsys, "status", "llama-ft", "--state", state, "-o", "json").stdout)
    assert after["state"] in ("cancelled", "succeeded")
    if after["state"] == "cancelled":
        assert after["attempts"][0]["state"] == "cancelled"
    assert run_cli(capsys, "status", "nope", "--state", state).code == 2


def test_run_drains_the_queue_and_logs_show_the_job_output(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    run_cli(capsys, "submit", str(DEMO / "eval-eu.yaml"), "--state", state)
    drained = run_cli(capsys, "run", "--poll", "0.05", "--state", state)
    assert drained.code == 0, drained.stderr
    assert "eval-l4 succeeded" in drained.stderr
    logs = run_cli(capsys, "logs", "eval-l4", "--follow", "--state", state)
    assert logs.code == 0
    assert "done at step 30" in logs.stdout
    assert run_cli(capsys, "logs", "nope", "--state", state).code == 2


def test_submit_dry_run_plans_and_enqueues_nothing(capsys, tmp_path):
    state = tmp_path / "state.db"
    result = run_cli(
        capsys,
        "submit",
        str(DEMO / "eval-eu.yaml"),
        "--dry-run",
        "--state",
        str(state),
        "-o",
        "json",
    )
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["job"] == "eval-l4" and plan["placements"][0]["accelerator"] == "L4"
    assert not state.exists()


def test_an_unknown_cloud_in_the_clouds_setting_is_bad_input(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BROKER_CLOUDS", "aws,gpc")
    result = run_cli(capsys, "queue", "--state", str(tmp_path / "s.db"))
    assert result.code == 2 and "unknown cloud 'gpc'" in result.stderr
    assert not (tmp_path / "s.db").exists()
