"""`broker pricing import` and the on-prem / overlay layers as a user reaches them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "tests" / "fakes" / "skypilot_small"


def test_import_into_user_catalog_takes_precedence(capsys, isolated_user_dirs):
    result = run_cli(
        capsys, "pricing", "import", "--format", "skypilot", str(SMALL), "--as-of", "2026-11-01"
    )
    assert result.code == 0, result.stderr
    user = isolated_user_dirs / "data" / "broker" / "offers.csv"
    assert user.is_file() and "takes precedence" in result.stderr
    listed = run_cli(capsys, "offers", "-o", "json")
    document = json.loads(listed.stdout)
    assert document["origin"] == "user"
    assert {o["as_of"] for o in document["offers"]} == {"2026-11-01"}
    assert {o["source"].split(":")[0] for o in document["offers"]} == {"skypilot"}


def test_import_into_a_file_and_use_it(capsys, tmp_path, isolated_user_dirs):
    target = tmp_path / "team.csv"
    result = run_cli(
        capsys, "pricing", "import", str(SMALL), "--into", str(target), "--cloud", "gcp"
    )
    assert result.code == 0, result.stderr
    assert not (isolated_user_dirs / "data" / "broker" / "offers.csv").exists()
    rows = json.loads(run_cli(capsys, "offers", "--catalog", str(target), "-o", "json").stdout)
    assert {o["cloud"] for o in rows["offers"]} == {"gcp"}


def test_import_bad_input_exits_2(capsys, tmp_path):
    assert run_cli(capsys, "pricing", "import", str(tmp_path / "nope")).code == 2
    empty = run_cli(capsys, "pricing", "import", str(tmp_path))
    assert empty.code == 2 and "vms.csv" in empty.stderr
    wrong = run_cli(capsys, "pricing", "import", "--format", "skypilt", str(SMALL))
    assert wrong.code == 2 and "did you mean skypilot" in wrong.stderr
    date = run_cli(capsys, "pricing", "import", str(SMALL), "--as-of", "yesterday")
    assert date.code == 2 and "--as-of" in date.stderr


def test_pools_join_the_offers(capsys, tmp_path):
    catalog = str(write_catalog(tmp_path / "offers.csv"))
    pools = str(REPO / "examples" / "pools.yaml")
    result = run_cli(
        capsys,
        "offers",
        "--catalog",
        catalog,
        "--pools",
        pools,
        "--gpu",
        "A100-80GB:8",
        "-o",
        "json",
    )
    offers = json.loads(result.stdout)["offers"]
    assert [(o["cloud"], o["zone"], o["price"]) for o in offers] == [
        ("onprem", "lab-a100", 8 * 1.10)
    ]
    assert offers[0]["capacity"] == 2  # two free 8-GPU nodes
    norway = run_cli(
        capsys, "offers", "--catalog", catalog, "--pools", pools, "--country", "NO", "-o", "json"
    )
    assert [o["zone"] for o in json.loads(norway.stdout)["offers"]] == ["desk-t4"]


def test_pools_default_path_and_errors(capsys, tmp_path, isolated_user_dirs):
    catalog = str(write_catalog(tmp_path / "offers.csv"))
    config = isolated_user_dirs / "config" / "broker"
    config.mkdir(parents=True)
    (config / "pools.yaml").write_text(
        "pools:\n  - name: p\n    location: {region: lab, country: US}\n    gpu: A10O\n"
        "    gpus_per_node: 8\n    vcpus_per_node: 8\n    memory_gib_per_node: 8\n"
        "    cost_per_gpu_hour: 1\n    count: 1\n"
    )
    result = run_cli(capsys, "offers", "--catalog", catalog)
    assert result.code == 2
    assert "pools.yaml:4:" in result.stderr and "did you mean A100" in result.stderr


def test_overlays_discount_and_tag(capsys, tmp_path):
    catalog = str(write_catalog(tmp_path / "offers.csv"))
    overlays = tmp_path / "deal.yaml"
    overlays.write_text("overlays:\n  - cloud: aws\n    discount: 20%\n")
    result = run_cli(
        capsys,
        "offers",
        "--catalog",
        catalog,
        "--overlays",
        str(overlays),
        "--gpu",
        "T4",
        "--cloud",
        "aws",
        "--on-demand",
        "-o",
        "json",
    )
    (offer,) = json.loads(result.stdout)["offers"]
    assert offer["price_on_demand"] == 0.526 * 0.8
    assert offer["price_spot"] == 0.2  # the discount was for on-demand only
    assert offer["source"].endswith("+overlay:deal.yaml")
