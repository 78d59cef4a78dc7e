"""The everyday loop through the real entry point, on the sandbox: `broker jobs` (every
run, newest first, filters, the attempts view), re-runs (`submit --rerun`, `rerun`),
job arguments by id, team/name or name with a did-you-mean, `status` of several jobs,
and `cancel` of several jobs or a whole team."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.cli.runner import state_cli

JOB = """\
apiVersion: broker/v1
name: {name}
team: {team}
resources:
  accelerators: T4:1
run:
  command: {command}
runtime:
  estimate_hours: 1
"""


@pytest.fixture
def broker(capsys, tmp_path):
    """`broker ARGS` on one state file and a small catalog."""
    return state_cli(capsys, tmp_path, ("run", "queue", "cancel", "logs"))


def manifest(tmp_path, name: str, team: str = "nlp", command: str = "echo hello") -> str:
    path = tmp_path / f"{team}-{name}.yaml"
    path.write_text(JOB.format(name=name, team=team, command=command))
    return str(path)


def listed(broker, *args: str) -> list[dict]:
    result = broker("jobs", "-o", "json", *args)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["jobs"]


def test_jobs_lists_every_run_newest_first_with_its_figures(broker, tmp_path):
    assert broker("jobs").stdout.strip() == "no jobs recorded"
    for name, team in (("a", "nlp"), ("b", "vision"), ("c", "nlp")):
        assert broker("submit", manifest(tmp_path, name, team)).code == 0
    drained = broker("run", "--poll", "0.05")
    assert drained.code == 0, drained.stderr
    jobs = listed(broker)
    assert [j["name"] for j in jobs] == ["c", "b", "a"]  # newest first
    assert {j["state"] for j in jobs} == {"succeeded"}
    first = jobs[0]
    assert first["where"].startswith(("aws/", "gcp/")) and first["attempts"] == 1
    assert isinstance(first["attempts"], int) and first["run"] == 1
    assert float(first["cost_usd"]) > 0 and first["gpu_hours"] > 0
    assert first["submitted"] <= first["ended"]
    table = broker("jobs", "--wide")
    assert "nlp/c" in table.stdout and "succeeded" in table.stdout
    assert [j["name"] for j in listed(broker, "--team", "nlp")] == ["c", "a"]
    assert listed(broker, "--state", "running") == []
    assert len(listed(broker, "--state", "finished")) == 3
    none = broker("jobs", "--state", "queued")
    assert none.stdout.strip() == "no jobs recorded (state queued)"
    limited = broker("jobs", "--limit", "2")
    assert "the newest 2 of 3 jobs; --limit 0 shows every one" in limited.stdout
    assert len(listed(broker, "--limit", "2")) == 2 and len(listed(broker, "--limit", "0")) == 3


def test_jobs_filters_by_time_and_refuses_bad_filters(broker, tmp_path):
    broker("submit", manifest(tmp_path, "a"))
    today = datetime.now(UTC).date()
    yesterday, tomorrow = today - timedelta(days=1), today + timedelta(days=1)
    assert len(listed(broker, "--since", str(yesterday))) == 1
    assert listed(broker, "--until", str(yesterday)) == []  # submitted after that day
    assert len(listed(broker, "--since", str(tomorrow))) == 1  # still queued: still there
    wrong = broker("jobs", "--state", "runing")
    assert wrong.code == 2 and "did you mean running" in wrong.stderr
    assert broker("jobs", "--since", "soon").code == 2
    assert broker("jobs", "--since", str(tomorrow), "--until", str(yesterday)).code == 2
    assert broker("jobs", "--limit", "-1").code == 2
    early = broker("jobs", "--until", "0099-03-04")  # glibc's %Y would print "99-03-05"
    assert early.code == 0 and "(until 0099-03-05 00:00)" in early.stdout


def test_the_attempts_view_is_one_row_per_attempt(broker, tmp_path):
    broker("submit", manifest(tmp_path, "a"))
    broker("run", "--poll", "0.05")
    result = broker("jobs", "--attempts", "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 1 and rows[0]["name"] == "a" and rows[0]["number"] == "1"
    assert rows[0]["state"] == "succeeded" and rows[0]["exit_code"] == "0"
    assert rows[0]["time_scale"] == "1"  # the sandbox bills wall time as it passes
    table = broker("jobs", "--attempts", "--wide")
    assert "exit code 0" in table.stdout


def test_finished_jobs_run_again_as_new_runs(broker, tmp_path):
    path = manifest(tmp_path, "a")
    first = json.loads(broker("submit", path, "-o", "json").stdout)["jobs"][0]
    broker("run", "--poll", "0.05")
    again = broker("submit", path, "-o", "json")
    (row,) = json.loads(again.stdout)["jobs"]
    assert row["job"] == first["job"] and row["result"].startswith("unchanged (succeeded")
    assert "--rerun" in row["result"] and "broker rerun JOB" in again.stderr
    rerun = broker("submit", "--rerun", path, "-o", "json")
    assert rerun.code == 0, rerun.stderr
    (second,) = json.loads(rerun.stdout)["jobs"]
    assert second["job"] != first["job"] and second["run"] == 2 and second["version"] == 1
    assert second["result"] == "new run"
    busy = broker("rerun", "nlp/a")
    assert busy.code == 1 and "run 2" in busy.stderr and "queued" in busy.stderr
    broker("run", "--poll", "0.05")
    third = broker("rerun", first["job"], "-o", "json")  # by the id of an older run
    assert json.loads(third.stdout)["jobs"][0]["run"] == 3
    runs = listed(broker)
    assert [(j["name"], j["run"]) for j in runs] == [("a", 3), ("a", 2), ("a", 1)]
    status = json.loads(broker("status", "nlp/a", "-o", "json").stdout)
    assert status["run"] == 3 and status["job"] == runs[0]["job"]  # team/name: the newest


def test_a_changed_manifest_while_a_run_is_live_says_it_waits(broker, tmp_path):
    path = manifest(tmp_path, "slow", command="sleep 30")
    broker("submit", path)
    assert broker("run", "--once").code == 0
    changed = manifest(tmp_path, "slow", command="sleep 1")
    result = broker("submit", changed, "-o", "json")
    (row,) = json.loads(result.stdout)["jobs"]
    assert row["version"] == 2 and row["result"] == "new version (waits: the run is running)"
    assert "waits for the live attempt to end" in result.stderr
    assert broker("cancel", "slow").code == 0


def test_job_arguments_by_id_team_name_or_name_with_a_did_you_mean(broker, tmp_path):
    broker("submit", manifest(tmp_path, "llama-ft", "nlp"))
    broker("submit", manifest(tmp_path, "llama-ft", "vision"))
    broker("submit", manifest(tmp_path, "solo", "nlp"))
    bare = broker("status")
    assert bare.code == 2 and "`broker jobs` lists every job" in bare.stderr
    both = broker("status", "llama-ft")
    assert both.code == 2 and "nlp/llama-ft, vision/llama-ft" in both.stderr
    typo = broker("status", "sol")
    assert typo.code == 2 and "did you mean solo" in typo.stderr
    team_typo = broker("logs", "nlp/llama-f")
    assert team_typo.code == 2 and "did you mean nlp/llama-ft" in team_typo.stderr
    assert broker("cancel", "sollo").code == 2
    ids = {j["name"] + "@" + j["team"]: j["job"] for j in listed(broker)}
    several = json.loads(broker("status", "solo", "vision/llama-ft", "-o", "json").stdout)
    assert [v["job"] for v in several["jobs"]] == [ids["solo@nlp"], ids["llama-ft@vision"]]
    by_id = json.loads(broker("status", ids["solo@nlp"], "-o", "json").stdout)
    assert by_id["name"] == "solo"
    plain = broker("status", "solo", "nlp/llama-ft", "-o", "csv")
    assert plain.stdout.startswith("job,number,attempt,")  # one table: no title line
    assert plain.stdout.count("job,number") == 1


def test_cancel_takes_several_jobs_or_a_whole_team(broker, tmp_path):
    for name, team in (("a", "nlp"), ("b", "nlp"), ("c", "vision"), ("d", "vision")):
        broker("submit", manifest(tmp_path, name, team))
    two = broker("cancel", "a", "vision/c")
    assert two.code == 0, two.stderr
    assert "nlp/a" in two.stderr and "vision/c" in two.stderr
    states = {j["name"]: j["state"] for j in listed(broker)}
    assert states == {"a": "cancelled", "b": "queued", "c": "cancelled", "d": "queued"}
    assert broker("cancel", "--all").code == 2  # a team is named
    assert broker("cancel", "--team", "nlp").code == 2  # with --all
    assert broker("cancel", "b", "--team", "nlp", "--all").code == 2
    team = broker("cancel", "--team", "vision", "--all")
    assert team.code == 0 and "vision/d" in team.stderr and "vision/c" not in team.stderr
    states = {j["name"]: j["state"] for j in listed(broker)}
    assert states == {"a": "cancelled", "b": "queued", "c": "cancelled", "d": "cancelled"}
    again = broker("cancel", "a")
    assert again.code == 0 and "already cancelled" in again.stderr
