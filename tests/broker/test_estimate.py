"""broker.estimate: each job's figures are the planner's rank-1 placement, and the total
is their sum; a job with no feasible placement is kept, costs nothing and is not summed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from broker.estimate import estimate, total
from broker.manifest.load import parse_manifest_text
from broker.offers import load_offers
from broker.planner.plan import plan_many
from tests.fakes.gitrepo import job
from tests.fakes.offers import write_catalog

NOW = datetime(2026, 11, 21, tzinfo=UTC)
TEXT = "---\n".join(
    [
        job("ft", hours=10),
        job("spot-ft", hours=6, spot="prefer", checkpoint=True),
        job("small", hours=3, gpu="T4:1", team="cv"),
        job("nowhere", gpu="H100:8"),  # no H100 in the small catalog
    ]
)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return load_offers(write_catalog(tmp_path_factory.mktemp("catalog") / "offers.csv")).index


@pytest.fixture
def manifests():
    return parse_manifest_text(TEXT, Path("jobs/all.yaml"))


def test_each_estimate_is_the_planners_first_placement(index, manifests):
    estimates = estimate(manifests, index, NOW)
    decisions = plan_many([m.spec for m in manifests], index, NOW)
    assert [e.spec for e in estimates] == [m.spec for m in manifests]
    for est, decision in zip(estimates, decisions, strict=True):
        if decision.placements:
            assert est.placement == decision.placements[0]
            assert est.cost == decision.placements[0].expected_cost
        else:
            assert est.placement is None and not est.feasible and est.cost == 0.0


def test_total_is_the_sum_of_the_feasible_expected_costs(index, manifests):
    estimates = estimate(manifests, index, NOW)
    decisions = plan_many([m.spec for m in manifests], index, NOW)
    expected = sum(d.placements[0].expected_cost for d in decisions if d.placements)
    assert total(estimates) == pytest.approx(expected)
    assert [e.feasible for e in estimates] == [True, True, True, False]
    # The small catalog's cheapest on-demand A100:8 is aws us-east-1 at 21.9576 USD/h.
    assert estimates[0].cost == pytest.approx(21.9576 * 10)


def test_row_carries_placement_origin_and_assumptions(index, manifests):
    ft, spot, _, nowhere = estimate(manifests, index, NOW)
    row = spot.row()
    assert row["file"] == f"jobs/all.yaml:{manifests[1].line}"
    assert (row["job"], row["team"], row["feasible"]) == ("spot-ft", "nlp", True)
    assert (row["cloud"], row["region"], row["market"]) == ("aws", "us-east-1", "spot")
    assert row["runtime_hours"] == 6
    assert row["expected_cost"] == pytest.approx(row["compute"] + row["egress"])
    assert row["interruption_overhead"] > 0  # spot: expected lost work is paid for
    assert any(a.startswith("spot: ") for a in row["assumptions"])
    assert ft.row()["gpus"] == "A100:8" and ft.row()["interruption_overhead"] == 0
    empty = nowhere.row()
    assert empty["feasible"] is False and empty["expected_cost"] is None
    assert empty["assumptions"] == [] and "cloud" not in empty
    assert nowhere.where == "no feasible placement"
    assert ft.where == "aws/us-east-1/p4d.24xlarge (on-demand)"


def test_key_is_team_and_name(index, manifests):
    assert [e.key for e in estimate(manifests, index, NOW)] == [
        ("nlp", "ft"),
        ("nlp", "spot-ft"),
        ("cv", "small"),
        ("nlp", "nowhere"),
    ]


def test_no_manifests_no_estimates(index):
    assert estimate([], index, NOW) == [] and total([]) == 0
