"""Egress prices: who bills, and how far the data travels."""

from __future__ import annotations

import pytest

from pricing.egress import egress_cost, egress_price, egress_scope
from pricing.regions import Place


@pytest.mark.parametrize(
    ("src", "dst", "scope"),
    [
        (Place("aws", "us-east-1", "use1-az1"), Place("aws", "us-east-1", "use1-az1"), "same_zone"),
        (
            Place("aws", "us-east-1", "use1-az1"),
            Place("aws", "us-east-1", "use1-az2"),
            "same_region",
        ),
        (Place("gcp", "us-central1"), Place("gcp", "us-east4"), "same_continent"),
        (Place("gcp", "us-central1"), Place("gcp", "europe-west4"), "other_continent"),
        (Place("azure", "westeurope"), Place("gcp", "europe-west4"), "internet"),
        (Place("aws", "eu-west-1"), Place("onprem", "lab", country="DE"), "internet"),
        (
            Place("onprem", "lab", country="DE"),
            Place("onprem", "lab2", country="FR"),
            "same_continent",
        ),
    ],
)
def test_scope(src, dst, scope):
    assert egress_scope(src, dst) == scope


def test_sender_cloud_bills_and_sources_are_named():
    out_of_gcp = egress_price(Place("gcp", "us-central1"), Place("aws", "us-east-1"))
    out_of_aws = egress_price(Place("aws", "us-east-1"), Place("gcp", "us-central1"))
    assert out_of_gcp.price_per_gb == 0.12 and "cloud.google.com" in out_of_gcp.source
    assert out_of_aws.price_per_gb == 0.09 and "aws.amazon.com" in out_of_aws.source
    assert out_of_gcp.as_of


def test_cost_scales_with_size_and_is_free_on_prem():
    src, dst = Place("gcp", "us-central1"), Place("gcp", "europe-west4")
    assert egress_cost(src, dst, 100) == pytest.approx(100 * egress_price(src, dst).price_per_gb)
    assert egress_cost(Place("onprem", "lab", country="US"), Place("aws", "us-east-1"), 500) == 0


def test_unknown_cloud_is_an_error():
    with pytest.raises(ValueError, match="no egress price"):
        egress_price(Place("lambda", "us-1"), Place("aws", "us-east-1"))
