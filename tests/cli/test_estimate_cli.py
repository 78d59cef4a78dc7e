"""`broker estimate` as a user runs it: the planner's figures per job, the total, exit codes."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.cli.runner import run_cli
from tests.fakes.gitrepo import job
from tests.fakes.offers import write_catalog


@pytest.fixture
def catalog(tmp_path):
    return str(write_catalog(tmp_path / "offers.csv"))


@pytest.fixture
def jobs(tmp_path):
    directory = tmp_path / "jobs"
    directory.mkdir()
    (directory / "ft.yaml").write_text(job("ft", hours=12))
    (directory / "more.yaml").write_text(
        job("spot-ft", hours=4, spot="prefer", checkpoint=True)
        + "---\n"
        + job("small", gpu="T4:1", team="cv", hours=2)
    )
    (directory / "ci.yml").write_text("on: push\n")  # not a manifest: skipped in a directory
    return directory


def planned_costs(capsys, catalog, *paths) -> dict[str, float]:
    """Each job's best expected cost as `broker plan -o json` gives it."""
    result = run_cli(capsys, "plan", *map(str, paths), "--catalog", catalog, "-o", "json")
    assert result.code == 0, result.stderr
    body = json.loads(result.stdout)
    return {d["job"]: d["placements"][0]["expected_cost"] for d in body.get("jobs", [body])}


def test_json_total_is_the_sum_of_the_planners_costs(capsys, catalog, jobs):
    result = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog, "-o", "json")
    assert result.code == 0, result.stderr
    body = json.loads(result.stdout)
    planned = planned_costs(capsys, catalog, jobs)
    assert {row["job"]: row["expected_cost"] for row in body["jobs"]} == pytest.approx(planned)
    assert body["total_expected_cost"] == pytest.approx(sum(planned.values()))
    assert body["infeasible"] == []
    spot = next(row for row in body["jobs"] if row["job"] == "spot-ft")
    assert spot["file"] == f"{jobs / 'more.yaml'}:1"
    assert (spot["cloud"], spot["region"], spot["instance_type"], spot["market"]) == (
        "aws",
        "us-east-1",
        "p4d.24xlarge",
        "spot",
    )
    assert spot["runtime_hours"] == 4 and spot["interruption_overhead"] > 0
    assert spot["egress"] == 0 and any("interruptions/hour" in a for a in spot["assumptions"])


def test_table_and_markdown_show_the_total_and_the_assumptions(capsys, catalog, jobs):
    planned = planned_costs(capsys, catalog, jobs)
    grand = f"{sum(planned.values()):,.2f}"
    table = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog)
    assert table.code == 0
    assert f"3 job(s), expected total {grand} USD" in table.stdout
    total_line = next(line for line in table.stdout.splitlines() if "│ total" in line)
    assert total_line.rstrip(" │").endswith(grand)
    assert "nlp/ft: runtime estimate 12 h on A100" in table.stdout
    markdown = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog, "-o", "markdown")
    assert "| job | team | file | cloud | region | instance type | market |" in markdown.stdout
    assert "| total | - |" in markdown.stdout and markdown.stdout.count(f"| {grand} |") == 1


def test_csv_is_pure_data(capsys, catalog, jobs):
    result = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog, "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["job"] for r in rows] == ["ft", "spot-ft", "small"]
    assert "catalog" in result.stderr and "total" not in result.stdout
    assert float(rows[0]["expected_cost"]) == pytest.approx(
        planned_costs(capsys, catalog, jobs)["ft"]
    )


def test_infeasible_job_is_listed_and_exits_3(capsys, catalog, jobs):
    (jobs / "h100.yaml").write_text(job("big", gpu="H100:8"))
    result = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog, "-o", "json")
    assert result.code == 3
    assert "no feasible placement for: nlp/big" in result.stderr
    body = json.loads(result.stdout)
    assert body["infeasible"] == ["nlp/big"]
    big = next(row for row in body["jobs"] if row["job"] == "big")
    assert big["feasible"] is False and big["expected_cost"] is None
    feasible = [row["expected_cost"] for row in body["jobs"] if row["feasible"]]
    assert body["total_expected_cost"] == pytest.approx(sum(feasible))


def test_bad_manifest_exits_2_with_file_and_line(capsys, catalog, jobs):
    (jobs / "bad.yaml").write_text(job("bad", spot="sometimes"))
    result = run_cli(capsys, "estimate", str(jobs), "--catalog", catalog)
    assert result.code == 2 and result.stdout == ""
    assert f"{jobs / 'bad.yaml'}:7:9: placement.spot:" in result.stderr
