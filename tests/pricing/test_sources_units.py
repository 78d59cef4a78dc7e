"""`pricing.sources.units`: published prices stay exact until the one conversion."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.sources.units import (
    PriceError,
    decimal,
    money,
    offer_price,
    per_hour,
    usd_per_hour,
)


def test_hourly_units_of_each_cloud():
    price = Decimal("32.7726000000")
    assert per_hour(price, "Hrs") == price  # AWS
    assert per_hour(price, "1 Hour") == price  # Azure
    assert per_hour(price, "h") == price  # GCP
    assert per_hour(Decimal("100"), "100 Hours") == Decimal("1")
    assert per_hour(Decimal("730"), "mo") == Decimal("1")


def test_per_gib_hour_ram_and_per_core_are_multiplied_by_the_offer_size():
    # a2-highgpu-8g in us-central1: 96 vCPUs, 680 GiB, 8 x A100 (GCP list prices)
    total = offer_price(
        [
            (money("0", 31611000), "h", 96),
            (money("0", 4237000), "GiBy.h", 680),
            (money("2", 933908000), "h", 8),
        ]
    )
    assert total == Decimal("29.387080")  # 3.034656 + 2.88116 + 23.471264, no float error
    assert per_hour(Decimal("2.92"), "GiBy.mo") == Decimal("2.92") / 730


def test_nanos_are_exact_billionths():
    assert money("0", 1) == Decimal("0.000000001")
    assert money("3", 230000000) == Decimal("3.23")
    assert money(0, 999999999) == Decimal("0.999999999")
    with pytest.raises(PriceError):
        money("0", 1_000_000_000)
    with pytest.raises(PriceError):
        money("1", -5)  # units and nanos must share a sign
    with pytest.raises(PriceError):
        money("-1", -5)  # a negative price is not a price


@given(st.integers(0, 10**6), st.integers(0, 999_999_999))
def test_money_round_trips_units_and_nanos(units, nanos):
    value = money(str(units), nanos)
    assert int(value) == units
    assert (value - units) * 1_000_000_000 == nanos


@given(st.decimals(min_value=0, max_value=10**6, places=10, allow_nan=False))
def test_published_text_is_kept_digit_for_digit(value):
    text = f"{value:.10f}"
    assert decimal(text).as_tuple() == Decimal(text).as_tuple()  # same digits and exponent
    assert f"{decimal(text):.10f}" == text


def test_sums_are_done_before_the_one_float_conversion():
    parts = [(Decimal("0.1"), "h", 1)] * 3
    assert offer_price(parts) == Decimal("0.3")
    assert usd_per_hour(offer_price(parts)) == 0.3  # float(0.1) * 3 would be 0.30000000000000004
    assert usd_per_hour(None) != usd_per_hour(None)  # NaN: not sold
    assert usd_per_hour(Decimal(0)) != usd_per_hour(Decimal(0))  # never 0 in the table


@pytest.mark.parametrize("bad", ["", "abc", "NaN", "Infinity", "-1.5", 1.5, True])
def test_what_is_not_a_published_price_is_refused(bad):
    with pytest.raises(PriceError):
        decimal(bad)


@pytest.mark.parametrize("unit", ["GB", "Quantity", "1/Day", "0 Hours", ""])
def test_unknown_units_are_refused(unit):
    with pytest.raises(PriceError):
        per_hour(Decimal("1"), unit)
