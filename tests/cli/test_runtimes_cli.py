"""Learned runtimes through the real entry point, on the sandbox: a job without an
estimate is planned for its runs so far, and `broker plan --explain`, `broker status`
and `broker jobs` say what the estimate is and where it came from; a bad value is a
located error (exit 2)."""

from __future__ import annotations

import json

import pytest

from tests.cli.runner import state_cli

JOB = """\
apiVersion: broker/v1
name: train
team: ml
resources:
  accelerators: T4:1
run:
  command: sleep {seconds}
{runtime}"""


@pytest.fixture
def broker(capsys, tmp_path):
    """`broker ARGS` on one state file and a small catalog."""
    return state_cli(capsys, tmp_path, ("run", "plan", "queue", "estimate"))


def manifest(tmp_path, seconds: float = 0.4, runtime: str = "") -> str:
    path = tmp_path / "train.yaml"
    path.write_text(JOB.format(seconds=seconds, runtime=runtime))
    return str(path)


def ran(broker) -> None:
    # a wall second bills an hour: a sleep of 0.4 s is a run of about 0.4 h
    result = broker("run", "--poll", "0.05", "--sandbox-time-scale", "3600")
    assert result.code == 0, result.stderr


def test_plan_status_and_jobs_show_the_estimate_learned_from_earlier_runs(broker, tmp_path):
    path = manifest(tmp_path)
    before = broker("plan", "--explain", path)
    assert before.code == 0, before.stderr
    assert "runtime estimate 1 h on T4 (default 1 h: no finished run" in before.stdout
    assert before.stderr == ""  # no state yet is no history, and nothing to say about it
    assert broker("submit", path).code == 0
    ran(broker)
    assert broker("submit", "--rerun", path).code == 0
    ran(broker)

    jobs = json.loads(broker("jobs", "-o", "json").stdout)["jobs"]
    took = [j["runtime_hours"] for j in jobs]  # newest first
    assert all(t is not None and 0.3 < t < 3 for t in took), took
    second, first = jobs
    assert first["estimate_hours"] == 1.0 and "no finished run" in first["estimate_source"]
    assert second["estimate_hours"] == pytest.approx(took[1], abs=1e-6)  # run 1's time
    assert second["estimate_source"].startswith("history: the last run of ml/train (")

    plan = broker("plan", "--explain", path)
    assert plan.code == 0, plan.stderr
    mean = (took[0] + took[1]) / 2
    said = f"(history: mean of the last 2 runs of ml/train ({took[0]:.2f} h, {took[1]:.2f} h))"
    assert said in plan.stdout
    placements = json.loads(broker("plan", "-o", "json", path).stdout)["placements"]
    assert placements[0]["cost_breakdown"]["run_hours"] == pytest.approx(mean)

    status = broker("status", "ml/train")
    assert status.code == 0, status.stderr
    assert f"runtime estimate: {second['estimate_hours']:.2f} h (history: " in status.stdout
    assert f"it took {took[0]:.2f} h" in status.stdout
    view = json.loads(broker("status", "ml/train", "-o", "json").stdout)
    assert view["runtime"]["auto"] is True
    assert view["runtime"]["actual_hours"] == pytest.approx(took[0])

    table = broker("jobs")
    assert "est. h" in table.stdout and "runtime h" in table.stdout


def test_estimate_plans_an_auto_job_for_its_history_as_plan_does(broker, tmp_path):
    path = manifest(tmp_path)
    fresh = json.loads(broker("estimate", "-o", "json", path).stdout)["jobs"]
    assert fresh[0]["runtime_hours"] == 1.0  # no history yet: the default
    assert broker("submit", path).code == 0
    ran(broker)
    (job,) = json.loads(broker("jobs", "-o", "json").stdout)["jobs"]
    learned = json.loads(broker("estimate", "-o", "json", path).stdout)["jobs"][0]
    planned = json.loads(broker("plan", "-o", "json", path).stdout)["placements"][0]
    assert learned["runtime_hours"] == pytest.approx(job["runtime_hours"])
    assert learned["runtime_hours"] != 1.0
    assert learned["expected_cost"] == planned["expected_cost"]  # the two never disagree


def test_ci_costs_a_new_auto_job_for_its_history_as_plan_does(
    broker, capsys, tmp_path, monkeypatch
):
    from tests.cli.runner import run_cli
    from tests.fakes.gitrepo import GitRepo, isolate_git

    path = manifest(tmp_path)
    assert broker("submit", path).code == 0
    ran(broker)
    planned = json.loads(broker("plan", "-o", "json", path).stdout)["placements"][0]
    isolate_git(monkeypatch)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    repo = GitRepo(tmp_path / "repo")
    repo.write("README", "jobs\n")
    repo.commit("base")
    repo.git("switch", "-q", "-c", "change")
    repo.write("jobs/train.yaml", JOB.format(seconds=0.4, runtime=""))
    repo.commit("add train")
    monkeypatch.chdir(repo.root)
    catalog = str(tmp_path / "offers.csv")
    state = ("--state", str(tmp_path / "state.db"))
    runs = [
        run_cli(capsys, "ci", "--base", "main", "--catalog", catalog, "-o", "json", *where)
        for where in (state, ())
    ]
    assert all(r.code == 0 for r in runs), [r.stderr for r in runs]
    learned, fresh = (json.loads(r.stdout)["jobs"][0]["after"] for r in runs)
    assert learned == pytest.approx(planned["expected_cost"])  # the history's estimate
    assert fresh != pytest.approx(learned)  # no state: the default of 1 h


def test_a_manifest_estimate_is_shown_as_the_manifests(broker, tmp_path):
    path = manifest(tmp_path, runtime="runtime:\n  estimate_hours: 2.5\n")
    assert broker("submit", path).code == 0
    ran(broker)
    (job,) = json.loads(broker("jobs", "-o", "json").stdout)["jobs"]
    assert (job["estimate_hours"], job["estimate_source"]) == (2.5, "manifest")
    assert "runtime estimate: 2.50 h (manifest)" in broker("status", "ml/train").stdout
    plan = broker("plan", "--explain", path)
    assert "runtime estimate 2.5 h on T4, scaled" in plan.stdout


def test_jobs_fits_a_narrow_terminal_with_the_new_columns(broker, tmp_path, monkeypatch):
    assert broker("submit", manifest(tmp_path)).code == 0
    ran(broker)
    monkeypatch.setenv("COLUMNS", "80")
    table = broker("jobs")
    assert table.code == 0
    boxed = [line for line in table.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert boxed and max(len(line) for line in boxed) <= 80
    assert "left out to fit 80 columns" in table.stdout
    monkeypatch.setenv("COLUMNS", "200")
    assert "est. h" in broker("jobs").stdout  # room enough: shown


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "'soon' is not a number of hours: write a number (12, 1.5) or auto"),
        ("0", "must be more than 0 hours (or auto)"),
        ("1000000", "1000000 is more than 87,660 hours"),
    ],
)
def test_a_bad_estimate_is_a_located_error(broker, tmp_path, value, message):
    path = manifest(tmp_path, runtime=f"runtime:\n  estimate_hours: {value}\n")
    for command in ("validate", "plan", "submit"):
        result = broker(command, path)
        assert result.code == 2, (command, result.stdout, result.stderr)
        assert "train.yaml:9:19: runtime.estimate_hours: " in result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
    assert json.loads(broker("jobs", "-o", "json").stdout)["jobs"] == []
