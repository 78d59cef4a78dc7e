"""The vectorised offer query against a brute-force filter of the same table."""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.offer_query import OfferQuery
from pricing.query import OfferIndex, QueryError
from pricing.regions import country_of
from pricing.synthetic import synthetic_offers
from pricing.table import OfferTable

CATALOG = synthetic_offers(3000, seed=7)
INDEX = OfferIndex(OfferTable.from_frame(CATALOG))


def brute_force(frame: pd.DataFrame, q: OfferQuery) -> set[int]:
    """Row positions that satisfy q, checked one row at a time."""
    hits = set()
    for pos, row in enumerate(frame.itertuples(index=False)):
        if q.gpu is not None and row.accelerator != q.gpu:
            continue
        if q.gpu_count is not None:
            if q.exact and row.accelerator_count != q.gpu_count:
                continue
            if not q.exact and row.accelerator_count < q.gpu_count:
                continue
        if q.clouds and row.cloud not in q.clouds:
            continue
        if q.regions and not any(fnmatchcase(row.region, p) for p in q.regions):
            continue
        if q.countries and country_of(row.cloud, row.region) not in q.countries:
            continue
        if q.min_gpu_memory is not None and not row.accelerator_memory_gib >= q.min_gpu_memory:
            continue
        prices = {
            "spot": [row.price_spot],
            "on-demand": [row.price_on_demand],
            "any": [row.price_spot, row.price_on_demand],
        }[q.market]
        known = [p for p in prices if not math.isnan(p)]
        if not known:
            continue
        if q.max_price is not None and min(known) > q.max_price:
            continue
        hits.add(pos)
    return hits


queries = st.builds(
    OfferQuery,
    gpu=st.sampled_from([None, "A100", "H100", "T4", "L4"]),
    gpu_count=st.sampled_from([None, 1.0, 2.0, 4.0, 8.0]),
    exact=st.booleans(),
    clouds=st.sampled_from([(), ("aws",), ("gcp", "azure")]),
    regions=st.sampled_from([(), ("us-*",), ("europe-*", "eu-*"), ("eastus",)]),
    countries=st.sampled_from([(), ("US",), ("DE", "FR")]),
    market=st.sampled_from(["any", "spot", "on-demand"]),
    max_price=st.sampled_from([None, 5.0, 20.0]),
    min_gpu_memory=st.sampled_from([None, 24.0, 80.0]),
    sort=st.sampled_from(["price", "price-per-gpu"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries)
def test_query_matches_brute_force(q: OfferQuery) -> None:
    q = INDEX.validate(q)
    assert set(INDEX.rows(q).tolist()) == brute_force(CATALOG, q)


@settings(max_examples=60, deadline=None)
@given(queries)
def test_query_is_sorted_and_deterministic(q: OfferQuery) -> None:
    first = pd.DataFrame(INDEX.query(q).records())
    again = pd.DataFrame(INDEX.query(q).records())
    pd.testing.assert_frame_equal(first, again)
    if first.empty:
        return
    key = first["price_per_gpu"] if q.sort == "price-per-gpu" else first["price"]
    assert key.fillna(math.inf).is_monotonic_increasing
    if q.market != "any":
        column = "price_spot" if q.market == "spot" else "price_on_demand"
        assert (first["price"] == first[column]).all()
    else:
        cheaper = first[["price_spot", "price_on_demand"]].min(axis=1)
        assert (first["price"] == cheaper).all()


def test_limit_takes_the_cheapest() -> None:
    full = INDEX.query(OfferQuery(gpu="A100"))
    top = INDEX.query(OfferQuery(gpu="A100", limit=5))
    assert len(top) == 5
    assert top.price.tolist() == full.price[:5].tolist()
    assert top.records()[0]["instance_type"] == full.records()[0]["instance_type"]


def test_missing_price_is_never_zero() -> None:
    spot = INDEX.query(OfferQuery(market="spot"))
    assert all(not math.isnan(r["price_spot"]) and r["price"] > 0 for r in spot.records())


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (OfferQuery(gpu="A10O"), "did you mean A100"),
        (OfferQuery(regions=("us-centrl1",)), "did you mean us-central1"),
        (OfferQuery(clouds=("awz",)), "did you mean aws"),
        (OfferQuery(countries=("XX",)), "country 'XX'"),
    ],
)
def test_unknown_names_get_a_hint(query: OfferQuery, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        INDEX.query(query)


def test_aliases_resolve_to_canonical_names() -> None:
    q = INDEX.validate(OfferQuery(gpu="a100-40gb"))
    assert q.gpu == "A100"


def test_extra_countries_cover_onprem_regions() -> None:
    frame = pd.concat(
        [CATALOG.head(3), CATALOG.head(1).assign(cloud="onprem", region="lab")], ignore_index=True
    )
    index = OfferIndex(OfferTable.from_frame(frame), extra_countries={("onprem", "lab"): "DE"})
    rows = index.rows(index.validate(OfferQuery(countries=("DE",))))
    assert 3 in rows.tolist()
