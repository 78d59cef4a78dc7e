"""`broker plan` as a user runs it: contract of the JSON, explain, infeasible jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "jobs"

JOB = """\
apiVersion: broker/v1
name: ft
team: nlp
resources:
  accelerators: A100:8
placement:
  spot: {spot}
  {extra}
run:
  command: python train.py
runtime:
  estimate_hours: 10
"""


@pytest.fixture
def catalog(tmp_path):
    return str(write_catalog(tmp_path / "offers.csv"))


def write_job(tmp_path, spot="never", extra=""):
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(spot=spot, extra=extra))
    return str(path)


def test_json_contract_and_cheapest_first(capsys, catalog, tmp_path):
    result = run_cli(
        capsys, "plan", write_job(tmp_path, "prefer"), "--catalog", catalog, "-o", "json"
    )
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["job"] == "ft"
    first = plan["placements"][0]
    assert set(first) >= {
        "rank",
        "cloud",
        "region",
        "zone",
        "instance_type",
        "accelerator",
        "accelerator_count",
        "nodes",
        "market",
        "price_per_hour",
        "expected_hours",
        "expected_cost",
        "cost_breakdown",
    }
    # aws us-east-1 spot at 9.5/h is the cheapest A100:8 in the small catalog.
    assert (first["cloud"], first["region"], first["market"]) == ("aws", "us-east-1", "spot")
    assert first["price_per_hour"] == 9.5
    costs = [p["expected_cost"] for p in plan["placements"]]
    assert costs == sorted(costs) and [p["rank"] for p in plan["placements"]] == [1, 2, 3, 4, 5]
    breakdown = first["cost_breakdown"]
    assert breakdown["total"] == pytest.approx(breakdown["compute"] + breakdown["egress"])
    assert breakdown["interruption_rate_source"] == "default:aws"
    assert {r["reason"] for r in plan["rejected"]} >= {"GPU model is not A100:8"}


def test_on_demand_only_never_picks_spot(capsys, catalog, tmp_path):
    result = run_cli(
        capsys, "plan", write_job(tmp_path, "never"), "--catalog", catalog, "-o", "json"
    )
    placements = json.loads(result.stdout)["placements"]
    assert {p["market"] for p in placements} == {"on-demand"}
    assert placements[0]["expected_cost"] == pytest.approx(21.9576 * 10)


def test_explain_lists_rejections_and_assumptions(capsys, catalog, tmp_path):
    result = run_cli(capsys, "plan", write_job(tmp_path), "--catalog", catalog, "--explain")
    assert result.code == 0
    assert "rejected because" in result.stdout and "GPU model is not A100:8" in result.stdout
    assert "assumption: runtime estimate 10 h on A100" in result.stdout


def test_infeasible_exits_3_with_a_priced_hint(capsys, catalog, tmp_path):
    job = write_job(tmp_path, "never", "max_price_per_hour: 10")
    result = run_cli(capsys, "plan", job, "--catalog", catalog)
    assert result.code == 3
    assert "relax placement.max_price_per_hour: raise it to 21.96" in result.stderr
    assert "expected 219.58 USD" in result.stderr
    data = json.loads(run_cli(capsys, "plan", job, "--catalog", catalog, "-o", "json").stdout)
    assert data["placements"] == []
    hints = {h["constraint"]: h["cheapest_cost"] for h in data["hints"]}
    # Spot at 9.5/h fits under the cap, so "use spot" is the cheaper way out, listed first.
    assert list(hints)[0] == "placement.spot"
    assert hints["placement.max_price_per_hour"] == pytest.approx(219.576)


def test_directory_plans_every_manifest_in_one_batch(capsys):
    result = run_cli(capsys, "plan", str(EXAMPLES), "-o", "json")
    assert result.code == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) >= 4 and all(j["placements"] for j in jobs)


def test_broken_manifest_exits_2_and_plans_nothing(capsys, catalog, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(JOB.format(spot="sometimes", extra=""))
    result = run_cli(capsys, "plan", str(path), "--catalog", catalog)
    assert result.code == 2
    assert "bad.yaml:7:" in result.stderr and "placement.spot" in result.stderr
    assert result.stdout == ""


def test_onprem_pool_capacity_is_respected(capsys, catalog, tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        "pools:\n  - name: lab\n    location: {region: lab-us, country: US}\n    gpu: A100\n"
        "    gpus_per_node: 8\n    vcpus_per_node: 96\n    memory_gib_per_node: 1024\n"
        "    cost_per_gpu_hour: 0.5\n    count: 1\n"
    )
    one = run_cli(
        capsys,
        "plan",
        write_job(tmp_path),
        "--catalog",
        catalog,
        "--pools",
        str(pools),
        "-o",
        "json",
    )
    assert json.loads(one.stdout)["placements"][0]["cloud"] == "onprem"
    path = tmp_path / "two.yaml"
    path.write_text(
        JOB.format(spot="never", extra="").replace(
            "  accelerators: A100:8", "  accelerators: A100:8\n  nodes: 2"
        )
    )
    two = run_cli(
        capsys, "plan", str(path), "--catalog", catalog, "--pools", str(pools), "-o", "json"
    )
    plan = json.loads(two.stdout)
    assert all(p["cloud"] != "onprem" for p in plan["placements"])
    assert {"reason": "not enough free capacity for 2 node(s)", "count": 1} in plan["rejected"]


def test_table_view_is_one_boxed_table_with_aligned_columns(capsys, catalog, tmp_path):
    job = write_job(tmp_path, "prefer")
    result = run_cli(capsys, "plan", job, "--catalog", catalog)
    assert result.code == 0, result.stderr
    best = json.loads(run_cli(capsys, "plan", job, "--catalog", catalog, "-o", "json").stdout)
    lines = result.stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    table = lines[top : top + 9]  # top rule, header, header rule, 5 placements, bottom rule
    assert [line[0] for line in table] == ["┏", "┃", "┡", "│", "│", "│", "│", "│", "└"]
    assert len({len(line) for line in table}) == 1  # every row as wide as the others
    assert table[1].startswith("┃ # ┃ cloud ") and "expected $" in table[1]
    first = [cell.strip() for cell in table[3].strip("│").split("│")]
    assert first[:2] == ["1", "aws"]
    cost = f"{best['placements'][0]['expected_cost']:,.2f}"
    assert first[-1] == cost and table[3].endswith(f" {cost} │")  # numbers are right-aligned


def test_explain_shows_the_gpu_host_default_applied(capsys, catalog, tmp_path):
    """T4:1 without cpus/memory: GCP's n1-standard-4 (15 GiB) is below the T4's 16 GiB."""
    path = tmp_path / "t4.yaml"
    path.write_text(
        "apiVersion: broker/v1\nname: t4\nteam: nlp\nresources:\n  accelerators: T4:1\n"
        "run:\n  command: python train.py\n"
    )
    result = run_cli(capsys, "plan", str(path), "--catalog", catalog, "--explain")
    assert result.code == 0, result.stderr
    assert "assumption: host default per node: T4:1 4+ vCPUs and 16+ GiB" in result.stdout
    data = json.loads(run_cli(capsys, "plan", str(path), "--catalog", catalog, "-o", "json").stdout)
    assert [p["instance_type"] for p in data["placements"]] == ["g4dn.xlarge"]
    reasons = {r["reason"]: r["count"] for r in data["rejected"]}
    assert (
        reasons["memory not 16+ GiB (the host default for T4:1; set resources.memory to change it)"]
        == 1
    )
    path.write_text(path.read_text().replace("T4:1\n", "T4:1\n  memory: 15+\n"))
    data = json.loads(run_cli(capsys, "plan", str(path), "--catalog", catalog, "-o", "json").stdout)
    assert {p["instance_type"] for p in data["placements"]} == {"g4dn.xlarge", "n1-standard-4"}


def test_several_jobs_are_one_table_of_their_cheapest_placements(capsys):
    result = run_cli(capsys, "plan", str(EXAMPLES))
    assert result.code == 0, result.stderr
    data = json.loads(run_cli(capsys, "plan", str(EXAMPLES), "-o", "json").stdout)["jobs"]
    assert all(len(d["placements"]) == 1 for d in data)  # one each, unless --top says more
    assert sum(1 for line in result.stdout.splitlines() if line.startswith("┏")) == 1
    body = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(body) == len(data) and body[0].split("│")[1].strip() == data[0]["job"]
    assert f"{len(data)} jobs, {len(data)} with a placement" in result.stdout
    more = json.loads(run_cli(capsys, "plan", str(EXAMPLES), "--top", "3", "-o", "json").stdout)
    assert max(len(d["placements"]) for d in more["jobs"]) == 3
    one = json.loads(
        run_cli(capsys, "plan", str(EXAMPLES / "llama-finetune.yaml"), "-o", "json").stdout
    )
    assert len(one["placements"]) == 5  # one job: its five cheapest
