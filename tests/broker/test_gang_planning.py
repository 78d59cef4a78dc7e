"""Gangs in the planner (broker.dispatch.gangs): an N-node placement only where the
provider's Gangs allows N nodes, none on a provider without Gangs, and a spot gang's
interruption rate N times one node's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.dispatch.gangs import GANG_COLUMN, gang_limits, provider_limit, with_gang_limits
from broker.planner.plan import plan
from broker.spec import GpuAsk, JobSpec, Requirements, RuntimeEstimate
from pricing.catalog import read_offer_table
from pricing.query import OfferIndex
from providers.capabilities import Gangs
from tests.fakes.offers import write_catalog

NOW = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass
class GangLimits:
    """A capability value for the planner: the most nodes per (cloud, region, type)."""

    limits: dict[tuple[str, str, str], int] = field(default_factory=dict)
    default: int = 1

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        return self.limits.get((cloud, region, instance_type), self.default)


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> OfferIndex:
    path = tmp_path_factory.mktemp("gangs") / "offers.csv"
    return OfferIndex(read_offer_table(write_catalog(path)))


def a100_job(nodes: int, spot: str = "never") -> JobSpec:
    return JobSpec(
        "trainer",
        "ml",
        Requirements(accelerators=(GpuAsk("A100", 8.0),), nodes=nodes, spot=spot),
        runtime=RuntimeEstimate(estimate_hours=4),
    )


def places(decision) -> set[tuple[str, str]]:
    return {(p.cloud, p.region) for p in decision.placements}


def test_the_limits_come_from_the_provider_per_offer(index):
    assert isinstance(GangLimits(), Gangs)
    limits = gang_limits(
        index, GangLimits({("aws", "us-east-1", "p4d.24xlarge"): 16}).max_gang_nodes
    )
    table = index.offers
    rows = zip(
        table.text("cloud"), table.text("region"), table.text("instance_type"), limits, strict=True
    )
    for cloud, region, itype, limit in rows:
        assert limit == (
            16 if (cloud, region, itype) == ("aws", "us-east-1", "p4d.24xlarge") else 1
        )
    assert set(gang_limits(index, provider_limit(object())).tolist()) == {1.0}  # no Gangs: 1


def test_a_gang_goes_only_where_its_size_fits(index):
    provider = GangLimits(
        {("aws", "us-east-1", "p4d.24xlarge"): 4, ("gcp", "us-central1", "a2-highgpu-8g"): 2}
    )
    for nodes, expected in (
        (2, {("aws", "us-east-1"), ("gcp", "us-central1")}),
        (4, {("aws", "us-east-1")}),
    ):
        job = a100_job(nodes)
        limited = with_gang_limits(index, provider, [nodes])
        decision = plan(job, limited, NOW, top=50)
        assert places(decision) == expected
        assert any(r.reason == f"no gang of {nodes} nodes offered here" for r in decision.rejected)
        assert all(p.nodes == nodes for p in decision.placements)
    too_big = plan(a100_job(5), with_gang_limits(index, provider, [5]), NOW)
    assert not too_big.placements


def test_single_nodes_are_not_limited_and_the_index_is_kept(index):
    assert with_gang_limits(index, object(), [1, 1]) is index
    limited = with_gang_limits(index, object(), [1, 2])
    assert GANG_COLUMN in limited.offers.numbers
    assert (
        plan(a100_job(1), limited, NOW, top=50).placements
        == plan(a100_job(1), index, NOW, top=50).placements
    )
    assert not plan(a100_job(2), limited, NOW).placements  # no provider runs gangs


@given(st.integers(min_value=2, max_value=8))
def test_a_spot_gang_risks_n_times_one_nodes_reclaims(index, nodes):
    provider = GangLimits(default=8)
    one = plan(a100_job(1, "only"), index, NOW, top=50)
    gang = plan(a100_job(nodes, "only"), with_gang_limits(index, provider, [nodes]), NOW, top=50)
    rate_of = {
        (p.cloud, p.region, p.instance_type): p.cost.interruption_rate for p in one.placements
    }
    assert gang.placements
    for placement in gang.placements:
        single = rate_of[(placement.cloud, placement.region, placement.instance_type)]
        assert placement.cost.interruption_rate == pytest.approx(nodes * single)
        assert single > 0
