"""`broker cost-report` through the real entry point, on the fixed ledger of
tests/fakes/billing: every grouping and format, periods, --actual, --chart, --html."""

from __future__ import annotations

import base64
import csv
import io
import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from broker.reports.query import GROUPINGS
from tests.cli.runner import run_cli
from tests.fakes.billing import ledger as fixed
from tests.fakes.offers import write_catalog

BILLING = Path(__file__).resolve().parents[1] / "fakes" / "billing"
D = Decimal


def six(amount: str | Decimal) -> str:
    """An exact amount as the report's JSON and CSV carry it: with the ledger's 6 places."""
    return f"{D(amount):.6f}"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[str, str]:
    """(state file, catalog file) holding the fixed ledger and the offers for savings."""
    folder = tmp_path_factory.mktemp("report")
    fixed.build(folder / "state.db").close()
    catalog = write_catalog(folder / "offers.csv", fixed.CATALOG_ROWS)
    return str(folder / "state.db"), str(catalog)


def report(capsys, files, *args: str):
    state, catalog = files
    return run_cli(capsys, "cost-report", "--state", state, "--catalog", catalog, *args)


@pytest.mark.parametrize("name", GROUPINGS)
def test_every_grouping_in_json_is_exact(capsys, files, name):
    result = report(capsys, files, "--by", name, "-o", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    expected = {key: six(value) for key, value in fixed.BY[name].items()}
    assert {row[name]: row["total_usd"] for row in document["groups"]} == expected
    assert document["totals"]["total_usd"] == six(fixed.TOTAL)
    assert document["by"] == [name]


@pytest.mark.parametrize("name", GROUPINGS)
def test_every_grouping_in_csv_adds_up(capsys, files, name):
    result = report(capsys, files, "--by", name, "-o", "csv")
    assert result.code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {row[name]: row["total_usd"] for row in rows} == {
        key: six(value) for key, value in fixed.BY[name].items()
    }
    assert sum(D(row["total_usd"]) for row in rows) == fixed.TOTAL  # no total row in data
    assert "savings: against the on-demand price" in result.stderr  # notes off stdout


@pytest.mark.parametrize("name", GROUPINGS)
def test_every_grouping_in_the_table_and_markdown_views(capsys, files, name):
    shown = {key: f"{float(value):,.2f}" for key, value in fixed.BY[name].items()}
    for fmt in ("table", "markdown"):
        result = report(capsys, files, "--by", name, "-o", fmt)
        assert result.code == 0, result.stderr
        lines = result.stdout.splitlines()
        for key, amount in shown.items():
            assert any(f" {key} " in line and f" {amount} " in line for line in lines), key
        totals = [line for line in lines if line.lstrip("│| ").startswith("total ")]
        assert len(totals) == 1 and " 234.93 " in totals[0]


def test_the_team_report_shows_savings_lost_work_spot_share_and_egress(capsys, files):
    result = report(capsys, files, "--by", "team", "-o", "json")
    document = json.loads(result.stdout)
    nlp = next(row for row in document["groups"] if row["team"] == "nlp")
    assert (nlp["lost_gpu_hours"], nlp["lost_usd"]) == (six("8"), six("32.7726"))
    assert (nlp["on_demand_usd"], nlp["savings_usd"]) == (six("360"), six("201.6822"))
    assert (nlp["egress_usd"], nlp["spot_share"]) == (six("24.8"), "1.0000")
    totals = document["totals"]
    assert (totals["savings_usd"], totals["spot_share"], totals["gpu_hours"]) == (
        six("363.9743"),
        "0.7744",
        six("87"),
    )
    egress = document["egress"]
    assert sorted(row["amount_usd"] for row in egress) == [six("0.8"), six("12"), six("12")]
    assert {row["sender"] for row in egress} == {"gcp:us-central1", "aws:us-east-1"}
    table = report(capsys, files, "--by", "team")
    assert "Egress" in table.stdout and "checkpoint restore s3://ckpt/llama" in table.stdout
    assert "77.4%" in table.stdout  # spot share of the total
    assert "363.97" in table.stdout  # savings


def test_since_and_until_are_utc_days_until_inclusive(capsys, files):
    def total(*args: str) -> str:
        result = report(capsys, files, "--by", "day", "-o", "json", *args)
        assert result.code == 0, result.stderr
        return json.loads(result.stdout)["totals"]["total_usd"]

    assert total("--until", "2026-11-01") == six("183.1178")
    assert total("--since", "2026-11-02", "--until", "2026-11-30") == six("47.4")
    assert total("--since", "2026-12-01") == six("4.4079")
    assert total("--since", "2026-11-01T05:00:00Z", "--until", "2026-11-02T15:00:00") == six("76.2")
    assert total("--since", "2027-01-01") == six("0")  # nothing: an empty report, not an error


def test_bad_input_exits_2(capsys, files, tmp_path):
    bad_by = report(capsys, files, "--by", "tema")
    assert bad_by.code == 2 and "did you mean 'team'" in bad_by.stderr
    bad_date = report(capsys, files, "--since", "yesterday")
    assert bad_date.code == 2 and "--since" in bad_date.stderr
    backwards = report(capsys, files, "--since", "2026-12-01", "--until", "2026-11-01")
    assert backwards.code == 2
    missing = run_cli(capsys, "cost-report", "--state", str(tmp_path / "none.db"), "-o", "json")
    assert missing.code == 0 and "no state file" in missing.stderr  # a fresh machine: empty
    assert json.loads(missing.stdout)["totals"]["entries"] == 0
    assert not (tmp_path / "none.db").exists()  # a report never creates a state file
    not_a_bill = tmp_path / "x.csv"
    not_a_bill.write_text("a,b\n1,2\n")
    unreadable = report(capsys, files, "--actual", str(not_a_bill))
    assert unreadable.code == 2 and "not a billing export" in unreadable.stderr


def test_actual_flags_differences_above_five_percent(capsys, files):
    bills = [str(BILLING / n) for n in ("aws_cur.csv", "gcp_billing_export.csv")]
    bills.append(str(BILLING / "azure_cost_details.csv"))
    args = [arg for bill in bills for arg in ("--actual", bill)]
    result = report(capsys, files, *args, "-o", "json")
    assert result.code == 0, result.stderr
    rows = {row["attempt"]: row for row in json.loads(result.stdout)["actual"]}
    a = fixed.ATTEMPTS
    assert rows[a["llama-1"]]["flag"] == ""  # 98.20 billed for 98.3178 planned
    assert (rows[a["llama-2"]]["flag"], rows[a["llama-2"]]["difference_pct"]) == ("over", "10.17")
    assert (rows[a["detector"]]["flag"], rows[a["detector"]]["billed_usd"]) == ("", "3.52")
    assert rows[a["ablation"]]["flag"] == "under"
    assert rows["a-0000000000ff"]["flag"] == "not in the ledger"
    as_csv = report(capsys, files, *args, "-o", "csv")
    flagged = [r for r in csv.DictReader(io.StringIO(as_csv.stdout)) if r["flag"]]
    assert len(flagged) == 3  # the reconciliation is the CSV when --actual is given
    assert "3 of 5 instance(s) differ by more than 5%" in as_csv.stderr
    table = report(capsys, files, "--actual", bills[0])
    assert "Planned (ledger) versus billed" in table.stdout and "over" in table.stdout


def test_chart_prints_daily_spend(capsys, files):
    result = report(capsys, files, "--by", "team", "--chart")
    assert result.code == 0, result.stderr
    assert "Daily spend, USD by team" in result.stdout
    assert "2026-11-01" in result.stdout and "█" in result.stdout
    quiet = report(capsys, files, "--by", "cloud,day", "--chart", "-o", "json")
    json.loads(quiet.stdout)  # stdout stays pure JSON: the chart goes to stderr
    assert "Daily spend, USD by cloud" in quiet.stderr


def test_html_writes_one_file_with_the_tables_and_an_embedded_chart(capsys, files, tmp_path):
    page = tmp_path / "report.html"
    result = report(
        capsys, files, "--by", "team", "--html", str(page), "--actual", str(BILLING / "aws_cur.csv")
    )
    assert result.code == 0, result.stderr
    text = page.read_text()
    assert "<h2>Spend</h2>" in text and "<td>nlp</td>" in text and "234.93" in text
    assert "<h2>Egress</h2>" in text and "<h2>Planned versus billed</h2>" in text
    image = text.split("data:image/png;base64,")[1].split('"')[0]
    assert base64.b64decode(image).startswith(b"\x89PNG")
    assert "http" not in text.split("<body>")[1].split("savings:")[0]  # nothing fetched


def test_html_without_matplotlib_says_how_to_install_it(capsys, files, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    page = tmp_path / "r.html"
    result = report(capsys, files, "--html", str(page))
    assert result.code == 1
    assert "pip install 'broker[plot]'" in result.stderr
    assert not page.exists()
