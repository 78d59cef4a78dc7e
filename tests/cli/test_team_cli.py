"""Users on a shared queue: who submitted each job, `broker jobs --mine / --user`, and a
cancel of someone else's job (refused without --force, recorded with who did it)."""

from __future__ import annotations

import json

import pytest

from tests.cli.runner import run_cli

MANIFEST = """\
apiVersion: broker/v1
name: {name}
team: {team}
resources:
  accelerators: T4:1
run:
  command: sleep 30
runtime:
  estimate_hours: 1
"""


def submit_as(capsys, monkeypatch, tmp_path, user: str, name: str, team: str = "ml") -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(MANIFEST.format(name=name, team=team))
    monkeypatch.setenv("BROKER_USER", user)
    result = run_cli(capsys, "submit", str(path), "--state", str(tmp_path / "state.db"))
    assert result.code == 0, result.stderr


@pytest.fixture
def shared(capsys, monkeypatch, tmp_path):
    """alice submits two jobs (one of team cv), bob one."""
    submit_as(capsys, monkeypatch, tmp_path, "alice", "a-one")
    submit_as(capsys, monkeypatch, tmp_path, "alice", "a-two", team="cv")
    submit_as(capsys, monkeypatch, tmp_path, "bob", "b-one")
    return tmp_path / "state.db"


def listed(capsys, state, *flags: str) -> list[dict]:
    result = run_cli(capsys, "jobs", "--state-file", str(state), "-o", "json", *flags)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["jobs"]


def test_every_job_records_its_submitter_and_jobs_filter_by_user(capsys, monkeypatch, shared):
    by_name = {j["name"]: j["user"] for j in listed(capsys, shared)}
    assert by_name == {"a-one": "alice", "a-two": "alice", "b-one": "bob"}
    monkeypatch.setenv("BROKER_USER", "alice")
    assert {j["name"] for j in listed(capsys, shared, "--mine")} == {"a-one", "a-two"}
    assert {j["name"] for j in listed(capsys, shared, "--user", "bob")} == {"b-one"}
    assert {j["name"] for j in listed(capsys, shared, "--mine", "--team", "cv")} == {"a-two"}
    assert listed(capsys, shared, "--user", "carol") == []
    table = run_cli(capsys, "jobs", "--state-file", str(shared), "--wide")
    assert "user" in table.stdout.splitlines()[1].lower() and "bob" in table.stdout
    both = run_cli(capsys, "jobs", "--state-file", str(shared), "--mine", "--user", "bob")
    assert both.code == 2 and "--mine" in both.stderr
    status = run_cli(capsys, "status", "b-one", "--state", str(shared))
    assert "submitted by bob" in status.stdout
    shown = run_cli(capsys, "status", "b-one", "--state", str(shared), "-o", "json")
    assert json.loads(shown.stdout)["user"] == "bob"


def test_cancelling_someone_elses_job_needs_force_and_names_who_did_it(capsys, monkeypatch, shared):
    monkeypatch.setenv("BROKER_USER", "alice")
    refused = run_cli(capsys, "cancel", "a-one", "b-one", "--state", str(shared))
    assert refused.code == 4 and "b-one (bob)" in refused.stderr and "--force" in refused.stderr
    states = {j["name"]: j["state"] for j in listed(capsys, shared)}
    assert states == {"a-one": "queued", "a-two": "queued", "b-one": "queued"}  # none changed
    mine = run_cli(capsys, "cancel", "a-one", "--state", str(shared))
    assert mine.code == 0, mine.stderr
    forced = run_cli(capsys, "cancel", "b-one", "--force", "--state", str(shared))
    assert forced.code == 0, forced.stderr
    states = {j["name"]: j["state"] for j in listed(capsys, shared)}
    assert states == {"a-one": "cancelled", "a-two": "queued", "b-one": "cancelled"}
    shown = run_cli(capsys, "status", "b-one", "--state", str(shared), "-o", "json")
    cancels = [e for e in json.loads(shown.stdout)["events"] if "cancelled by" in e["message"]]
    assert len(cancels) == 1 and "alice" in cancels[0]["message"]
    assert "submitted by bob" in cancels[0]["message"]
    own = run_cli(capsys, "status", "a-one", "--state", str(shared), "-o", "json")
    events = json.loads(own.stdout)["events"]
    said = [e["message"] for e in events if "cancelled by" in e["message"]]
    assert said == ["queued -> cancelled: cancelled by alice"]
