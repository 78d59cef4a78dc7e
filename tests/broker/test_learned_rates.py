"""Learned interruption rates (broker.learned_rates): a posterior that evidence moves as
far as it weighs, and that forgets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.learned_rates import (
    DECAY_HOURS,
    PRIOR_HOURS,
    WINDOW_HOURS,
    Evidence,
    SpotRun,
    evidence,
    posterior_rate,
    with_learned_rates,
)

KEY = ("aws", "us-east-1", "p3.2xlarge")


def test_one_early_reclaim_moves_the_rate_a_little_not_to_one_an_hour():
    # reclaimed after half an hour, just now: (0.05 x 24 + 1) / (24 + 0.5)
    seen = evidence([SpotRun(KEY, 0.0, 0.5, True)])[KEY]
    assert seen.reclaims == pytest.approx(1.0)
    assert seen.hours == pytest.approx(DECAY_HOURS * (1 - math.exp(-0.5 / DECAY_HOURS)))
    rate = posterior_rate(0.05, seen)
    assert rate == pytest.approx((0.05 * PRIOR_HOURS + 1) / (PRIOR_HOURS + seen.hours))
    assert 0.08 < rate < 0.1


def test_spot_time_without_a_reclaim_lowers_the_rate_and_reclaims_raise_it():
    calm = posterior_rate(0.05, evidence([SpotRun(KEY, 0.0, 48.0, False)])[KEY])
    stormy = posterior_rate(0.05, evidence([SpotRun(KEY, 0.0, 1.0, True)] * 10)[KEY])
    assert calm < 0.05 < stormy


def test_old_evidence_weighs_less_and_is_forgotten_past_the_window():
    fresh = evidence([SpotRun(KEY, 0.0, 1.0, True)])[KEY]
    old = evidence([SpotRun(KEY, DECAY_HOURS, 1.0, True)])[KEY]
    assert old.reclaims == pytest.approx(fresh.reclaims / math.e)
    assert evidence([SpotRun(KEY, WINDOW_HOURS + 1, 1.0, True)]) == {}


@given(
    prior=st.floats(0, 2),
    runs=st.lists(
        st.tuples(st.floats(0, WINDOW_HOURS), st.floats(0, 50), st.booleans()), max_size=20
    ),
)
def test_the_rate_lies_between_the_prior_and_what_the_evidence_alone_says(prior, runs):
    found = evidence([SpotRun(KEY, ended, hours, reclaimed) for ended, hours, reclaimed in runs])
    seen = found.get(KEY, Evidence())
    rate = posterior_rate(prior, seen)
    if seen.hours > 0:
        alone = seen.reclaims / seen.hours
        assert min(prior, alone) - 1e-9 <= rate <= max(prior, alone) + 1e-9
    else:  # nothing ran (no time): the reclaims count against a day of prior
        assert rate == pytest.approx(prior + seen.reclaims / PRIOR_HOURS)


def test_rows_with_evidence_take_their_posterior_and_an_unknown_rate_its_clouds_default():
    from broker.sim.synthetic import synthetic_offers

    zones = (
        ("aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 3.06, 0.92, float("nan")),
        ("aws", "us-east-2", "us-east-2a", "p3.2xlarge", "V100", 3.06, 0.95, 0.05),
    )
    table = synthetic_offers(zones)
    seen = {KEY: Evidence(1.0, 0.5)}
    rates = with_learned_rates(table, seen).numbers["spot_interruption_rate"]
    assert rates[0] == pytest.approx((0.05 * PRIOR_HOURS + 1) / (PRIOR_HOURS + 0.5))  # aws default
    assert rates[1] == 0.05  # no evidence there


# --- the cool-down: a short-term signal --------------------------------------------------


def test_a_burst_of_reclaims_at_one_place_closes_it_as_one_reclaim():
    from datetime import UTC, datetime, timedelta

    from broker.recovery import Reclaim, closed_places, cooling

    # Five instances taken back within a minute: one reclaim, 10 minutes closed (each
    # counted would have closed it 160 minutes).
    assert cooling([0.0, 0.005, 0.01, 0.012, 0.015]) == (pytest.approx(1 / 6), 1)
    # A reclaim after it reopened counts: 20 minutes from the second one.
    assert cooling([0.0, 0.5]) == (pytest.approx(0.5 + 1 / 3), 2)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    burst = [Reclaim("aws", "us-east-1", "us-east-1a", "p3.2xlarge", at + timedelta(seconds=s),
                     1.0) for s in (0, 20, 40)]  # fmt: skip
    assert closed_places(burst, at + timedelta(minutes=9))
    assert not closed_places(burst, at + timedelta(minutes=11))


@given(st.lists(st.floats(0, 24), min_size=1, max_size=30), st.floats(0.1, 4))
def test_a_place_stays_closed_past_its_last_reclaim_and_counts_no_more_than_happened(hours, scale):
    from broker.recovery import COOLDOWN_BASE, COOLDOWN_MAX, cooldown, cooling

    hours = sorted(hours)
    until, counted = cooling(hours, scale)
    assert 1 <= counted <= len(hours)
    assert until > hours[-1]
    assert until - hours[-1] <= COOLDOWN_MAX.total_seconds() / 3600 * scale + 1e-9
    assert until - hours[0] >= COOLDOWN_BASE.total_seconds() / 3600 * scale - 1e-9
    # never longer than counting every reclaim, as before
    assert until <= hours[-1] + cooldown(len(hours), scale).total_seconds() / 3600 + 1e-9


@given(
    shuts=st.lists(
        st.lists(st.integers(0, 2), max_size=3, unique=True).map(sorted), min_size=1, max_size=6
    )
)
def test_the_closed_places_of_a_table_are_what_restrict_offers_closes(shuts):
    """`adjust_index`'s restriction (kept for the last table and places) gives, asked in
    any order and again, the table `restrict_offers` makes of the cool-downs."""
    import numpy as np

    from broker.recovery import REASON, _spot_closed
    from broker.sim.synthetic import ZONES, synthetic_offers
    from providers.cloud import Unavailable, restrict_offers

    table = synthetic_offers(ZONES)
    rows = [(r[0], r[1], r[2], r[3]) for r in ZONES]
    for shut in shuts:
        places = tuple(rows[i] for i in shut)
        expected = table
        for cloud in sorted({p[0] for p in places}):
            closing = [Unavailable(*p, "spot", REASON) for p in places if p[0] == cloud]
            expected, _ = restrict_offers(expected, cloud, closing)
        got = _spot_closed(table, places)
        for name, column in expected.numbers.items():
            assert np.array_equal(got.numbers[name], column, equal_nan=True), name
