"""`broker offers` as a user runs it, over a small catalog whose every row is known."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog


@pytest.fixture
def catalog(tmp_path):
    return str(write_catalog(tmp_path / "offers.csv"))


def offers_json(capsys, catalog, *args):
    result = run_cli(capsys, "offers", "--catalog", catalog, "--output", "json", *args)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["offers"]


def test_gpu_count_means_at_least(capsys, catalog):
    rows = offers_json(capsys, catalog, "--gpu", "A100:2")
    assert {r["instance_type"] for r in rows} == {
        "p4d.24xlarge",
        "a2-highgpu-8g",
        "Standard_ND96asr_v4",
    }
    assert [r["price"] for r in rows] == sorted(r["price"] for r in rows)


def test_exact_count(capsys, catalog):
    rows = offers_json(capsys, catalog, "--gpu", "A100:1", "--exact")
    assert [r["instance_type"] for r in rows] == ["a2-highgpu-1g"]


def test_spot_only_and_on_demand_only(capsys, catalog):
    spot = offers_json(capsys, catalog, "--gpu", "A100:8", "--spot")
    assert [(r["instance_type"], r["price"], r["market"]) for r in spot] == [
        ("p4d.24xlarge", 9.5, "spot"),
        ("a2-highgpu-8g", 11.6, "spot"),
    ]
    on_demand = offers_json(capsys, catalog, "--gpu", "A100:8", "--on-demand")
    assert on_demand[0]["price"] == 21.9576 and on_demand[0]["market"] == "on-demand"
    assert all(r["market"] == "on-demand" for r in on_demand)


def test_both_markets_pick_the_cheaper_price(capsys, catalog):
    rows = offers_json(capsys, catalog, "--gpu", "A100:8")
    by_type = {(r["cloud"], r["region"]): r for r in rows}
    assert by_type[("aws", "us-east-1")]["market"] == "spot"
    assert by_type[("aws", "eu-central-1")]["market"] == "on-demand"
    assert by_type[("aws", "eu-central-1")]["price_spot"] is None  # missing, never 0


def test_cloud_region_country_filters(capsys, catalog):
    assert {r["cloud"] for r in offers_json(capsys, catalog, "--cloud", "gcp,azure")} == {
        "gcp",
        "azure",
    }
    rows = offers_json(capsys, catalog, "--region", "us-*")
    assert {r["region"] for r in rows} == {"us-east-1", "us-central1"}
    rows = offers_json(capsys, catalog, "--gpu", "A100", "--country", "DE", "--country", "nl")
    assert {(r["region"], r["country"]) for r in rows} == {
        ("eu-central-1", "DE"),
        ("europe-west4", "NL"),
        ("westeurope", "NL"),
    }


def test_max_price_and_min_memory(capsys, catalog):
    rows = offers_json(capsys, catalog, "--max-price", "0.5", "--on-demand")
    assert {r["instance_type"] for r in rows} == {"m6i.2xlarge"}
    rows = offers_json(capsys, catalog, "--min-gpu-memory", "24")
    assert {r["accelerator"] for r in rows} == {"A100"}


def test_sort_by_price_per_gpu_and_limit(capsys, catalog):
    rows = offers_json(
        capsys, catalog, "--gpu", "A100", "--sort", "price-per-gpu", "--on-demand", "--limit", "2"
    )
    assert len(rows) == 2
    assert rows[0]["instance_type"] == "p4d.24xlarge"  # 2.74/GPU beats a2-highgpu-1g's 3.67


def test_stale_rows_are_flagged(capsys, catalog):
    rows = offers_json(capsys, catalog, "--gpu", "A100:1", "--exact")
    assert rows[0]["stale"] is True
    table = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "A100:1", "--exact")
    assert "stale" in table.stdout


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--gpu", "A10O:8"], "did you mean A100"),
        (["--gpu", "H1OO"], "did you mean H100"),
        (["--region", "us-centrl1"], "did you mean us-central1"),
        (["--cloud", "gpc"], "did you mean gcp"),
        (["--sort", "cost"], "--sort must be"),
    ],
)
def test_unknown_names_exit_2_with_a_hint(capsys, catalog, args, hint):
    result = run_cli(capsys, "offers", "--catalog", catalog, *args)
    assert result.code == 2
    assert hint in result.stderr
    assert result.stdout == ""


def test_every_output_format(capsys, catalog):
    table = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4")
    assert table.code == 0 and "g4dn.xlarge" in table.stdout and "catalog" in table.stdout
    markdown = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4", "-o", "markdown")
    lines = markdown.stdout.splitlines()
    assert any(line.startswith("| cloud | region |") for line in lines)
    assert any("| aws | us-east-1 |" in line and "0.2000" in line for line in lines)
    out = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4", "-o", "csv")
    records = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["instance_type"] for r in records] == ["n1-standard-4", "g4dn.xlarge"]
    assert records[1]["price_on_demand"] == "0.526"  # exact, not rounded
    assert "catalog" in out.stderr  # banner goes to stderr, stdout stays data


def test_summary_one_row_per_gpu(capsys, catalog):
    result = run_cli(capsys, "offers", "--catalog", catalog, "--summary", "-o", "json")
    gpus = {g["accelerator"]: g for g in json.loads(result.stdout)["gpus"]}
    assert set(gpus) == {"A100", "T4"}
    assert gpus["A100"]["aws_on_demand"] == pytest.approx(21.9576 / 8)
    assert gpus["A100"]["aws_spot"] == pytest.approx(9.5 / 8)
    assert gpus["A100"]["azure_spot"] is None
    assert gpus["T4"]["gcp_spot"] == pytest.approx(0.18)


def test_catalog_from_environment(capsys, catalog, monkeypatch):
    monkeypatch.setenv("BROKER_CATALOG", catalog)
    result = run_cli(capsys, "offers", "--gpu", "T4", "-o", "json")
    assert json.loads(result.stdout)["catalog"] == catalog


def test_broken_catalog_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("cloud,region\naws,us-east-1\n")
    result = run_cli(capsys, "offers", "--catalog", str(bad))
    assert result.code == 2 and "lacks columns" in result.stderr
    missing = run_cli(capsys, "offers", "--catalog", str(tmp_path / "nope.csv"))
    assert missing.code == 2 and "not found" in missing.stderr


def test_a_broken_broker_toml_is_bad_input_naming_the_file(capsys, catalog, isolated_user_dirs):
    (isolated_user_dirs / "broker.toml").write_text("freshness_days = \n")
    result = run_cli(capsys, "offers", "--catalog", catalog)
    assert result.code == 2
    assert "broker.toml" in result.stderr and "Traceback" not in result.stderr
