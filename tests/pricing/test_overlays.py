"""pricing.overlays: negotiated discounts and contract prices on the offers table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.overlays import Overlay, load_overlays
from pricing.overlays import apply_overlays as apply_to_table
from pricing.overlays import match_counts as match_counts_in_table
from pricing.schema import COLUMN_NAMES, conform
from pricing.table import OfferTable
from pricing.userio.errors import UserInputError


def apply_overlays(frame: pd.DataFrame, rules) -> pd.DataFrame:
    """The overlays run on the numpy OfferTable; these tests read results as DataFrames."""
    return apply_to_table(OfferTable.from_frame(frame), rules).to_frame()


def match_counts(frame: pd.DataFrame, rules) -> list[int]:
    return match_counts_in_table(OfferTable.from_frame(frame), rules)


NAN = float("nan")


def offers() -> pd.DataFrame:
    rows = [
        # cloud, region, zone, instance_type, accelerator, count, od, spot
        ("aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "A100", 8, 32.77, 12.0),
        ("aws", "us-west-2", "us-west-2b", "g5.xlarge", "A10G", 1, 1.006, NAN),
        ("aws", "eu-west-1", "eu-west-1a", "t3.large", "", 0, NAN, 0.03),
        ("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", "A100", 8, 29.39, 8.8),
        ("gcp", "europe-west4", "europe-west4-a", "a2-highgpu-8g", "A100", 8, 30.1, 9.0),
        ("azure", "eastus", "", "Standard_ND96asr_v4", "A100", 8, 27.2, 10.0),
    ]
    frame = pd.DataFrame(
        rows,
        columns=[
            "cloud",
            "region",
            "zone",
            "instance_type",
            "accelerator",
            "accelerator_count",
            "price_on_demand",
            "price_spot",
        ],
    )
    for column in COLUMN_NAMES:
        if column not in frame:
            frame[column] = (
                "list" if column == "source" else ("2025-01-01" if column == "as_of" else NAN)
            )
    return conform(frame)


def write(tmp_path, text, name="overlays.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path, text) -> UserInputError:
    with pytest.raises(UserInputError) as info:
        load_overlays(write(tmp_path, text))
    return info.value


BRIEF = """\
overlays:
  - cloud: aws
    discount: 15%
    market: on-demand
  - cloud: gcp
    instance_type: a2-highgpu-8g
    region: "us-*"
    price_on_demand: 20.00
"""


def test_load_example(tmp_path):
    first, second = load_overlays(write(tmp_path, BRIEF))
    assert first == Overlay(cloud="aws", discount_percent=15.0, file="overlays.yaml", line=2)
    assert second == Overlay(
        cloud="gcp",
        region="us-*",
        instance_type="a2-highgpu-8g",
        price_on_demand=20.0,
        file="overlays.yaml",
        line=5,
    )
    assert first.columns() == ("price_on_demand",)
    assert second.columns() == ("price_on_demand",)


@pytest.mark.parametrize(
    ("text", "percent"), [("15%", 15.0), ("-15%", 15.0), ("12.5 %", 12.5), ("0%", 0.0)]
)
def test_discount_forms(tmp_path, text, percent):
    (rule,) = load_overlays(write(tmp_path, f"overlays:\n  - cloud: aws\n    discount: '{text}'\n"))
    assert rule.discount_percent == percent


def test_accelerator_alias_and_missing_file(tmp_path):
    path = write(
        tmp_path, "overlays:\n  - cloud: aws\n    accelerator: a100-40gb\n    discount: 5%\n"
    )
    assert load_overlays(path)[0].accelerator == "A100"
    assert load_overlays(tmp_path / "absent.yaml", missing_ok=True) == []


@pytest.mark.parametrize(
    ("rule", "where", "message"),
    [
        (
            "cloud: gpc\n    discount: 5%",
            (2, 12, "overlays[0].cloud"),
            "'gpc' is not one of aws, gcp, azure, onprem (did you mean 'gcp'?)",
        ),
        (
            "cloud: aws\n    discont: 5%",
            (3, 5, "overlays[0].discont"),
            "unknown field (did you mean 'discount'?)",
        ),
        (
            "cloud: aws\n    discount: 15",
            (3, 15, "overlays[0].discount"),
            "write the discount with a percent sign ('15%')",
        ),
        ("cloud: aws\n    discount: 0.15", (3, 15, "overlays[0].discount"), "percent sign"),
        ("cloud: aws\n    discount: +15%", (3, 15, "overlays[0].discount"), "lowers prices"),
        ("cloud: aws\n    discount: 100%", (3, 15, "overlays[0].discount"), "under 100%"),
        ("cloud: aws\n    discount: lots", (3, 15, "overlays[0].discount"), "such as '15%'"),
        (
            "cloud: aws\n    discount: 5%\n    market: spto",
            (4, 13, "overlays[0].market"),
            "(did you mean 'spot'?)",
        ),
        ("cloud: aws", (2, 5, "overlays[0]"), "give a discount or a price_on_demand"),
        (
            "cloud: aws\n    instance_type: x\n    discount: 5%\n    price_spot: 2",
            (2, 5, "overlays[0]"),
            "not both",
        ),
        (
            "cloud: aws\n    instance_type: x\n    price_spot: 2\n    market: spot",
            (2, 5, "overlays[0]"),
            "market goes with a discount",
        ),
        ("cloud: aws\n    price_on_demand: 2", (2, 5, "overlays[0]"), "name one instance_type"),
        (
            "cloud: aws\n    instance_type: p4d.*\n    price_on_demand: 2",
            (2, 5, "overlays[0]"),
            "name one instance_type",
        ),
        (
            "cloud: aws\n    instance_type: x\n    price_on_demand: 0",
            (4, 22, "overlays[0].price_on_demand"),
            "greater than 0",
        ),
        (
            "cloud: aws\n    accelerator: A10O\n    discount: 5%",
            (3, 18, "overlays[0].accelerator"),
            "did you mean A100",
        ),
    ],
)
def test_rule_errors(tmp_path, rule, where, message):
    err = load_error(tmp_path, f"overlays:\n  - {rule}\n")
    assert [(e.line, e.column, e.field) for e in err.errors] == [where]
    assert message in err.message


def test_syntax_error(tmp_path):
    err = load_error(tmp_path, "overlays:\n  - cloud: aws\n   discount: 5%\n")
    assert (err.line, err.column) == (3, 4)
    assert err.message.startswith("YAML syntax error:")


def test_discount_applies_to_on_demand_only_by_default():
    table = offers()
    out = apply_overlays(table, [Overlay(cloud="aws", discount_percent=15.0, file="o.yaml")])
    assert out.loc[0, "price_on_demand"] == 32.77 * (85 / 100)
    assert out.loc[0, "price_spot"] == 12.0
    assert math.isnan(out.loc[2, "price_on_demand"])  # never sold: stays unsold
    assert list(out["source"]) == ["list+overlay:o.yaml"] * 2 + ["list"] * 4
    assert out.loc[3:, "price_on_demand"].tolist() == table.loc[3:, "price_on_demand"].tolist()
    assert table.loc[0, "price_on_demand"] == 32.77  # input untouched
    assert list(out.columns) == list(COLUMN_NAMES)
    assert out.dtypes.equals(table.dtypes)


def test_discount_on_spot_and_both():
    out = apply_overlays(offers(), [Overlay(cloud="aws", discount_percent=50.0, market="spot")])
    assert out["price_spot"].tolist()[:3] == [6.0, pytest.approx(NAN, nan_ok=True), 0.015]
    assert out.loc[0, "price_on_demand"] == 32.77
    both = apply_overlays(offers(), [Overlay(cloud="gcp", discount_percent=10.0, market="both")])
    assert both.loc[3, "price_on_demand"] == 29.39 * (90 / 100)
    assert both.loc[3, "price_spot"] == 8.8 * (90 / 100)


def test_money_is_not_rounded():
    out = apply_overlays(offers(), [Overlay(cloud="aws", discount_percent=12.5)])
    assert out.loc[1, "price_on_demand"] == 1.006 * (87.5 / 100)  # 0.88025, not 0.88
    assert out.loc[1, "price_on_demand"] != round(out.loc[1, "price_on_demand"], 2)


def test_globs_are_whole_value_and_case_insensitive():
    rule = Overlay(cloud="gcp", region="US-*", discount_percent=10.0)
    out = apply_overlays(offers(), [rule])
    assert out.loc[3, "price_on_demand"] == 29.39 * (90 / 100)
    assert out.loc[4, "price_on_demand"] == 30.1  # europe-west4 is not us-*
    assert match_counts(offers(), [Overlay(cloud="aws", region="us-east")]) == [0]  # not a prefix
    assert match_counts(offers(), [Overlay(cloud="aws", zone="us-*-?a")]) == [1]
    assert match_counts(offers(), [Overlay(cloud="azure", instance_type="standard_nd96*")]) == [1]
    assert match_counts(offers(), [Overlay(cloud="aws", accelerator="A10G")]) == [1]
    assert match_counts(offers(), [Overlay(cloud="onprem")]) == [0]


def test_rules_apply_in_order_and_compound():
    rules = [
        Overlay(cloud="gcp", instance_type="a2-highgpu-8g", price_on_demand=20.0, file="a.yaml"),
        Overlay(cloud="gcp", discount_percent=10.0, file="a.yaml"),
        Overlay(cloud="gcp", discount_percent=10.0, file="b.yaml"),
    ]
    out = apply_overlays(offers(), rules)
    assert out.loc[3, "price_on_demand"] == 20.0 * (90 / 100) * (90 / 100)
    assert out.loc[3, "source"] == "list+overlay:a.yaml+overlay:b.yaml"
    # the other order: the absolute price wins, discounts before it are lost
    out = apply_overlays(offers(), rules[1:] + rules[:1])
    assert out.loc[3, "price_on_demand"] == 20.0


def test_absolute_price_never_creates_a_market():
    rule = Overlay(cloud="aws", instance_type="g5.xlarge", price_spot=0.5, price_on_demand=0.9)
    out = apply_overlays(offers(), [rule])
    assert out.loc[1, "price_on_demand"] == 0.9
    assert math.isnan(out.loc[1, "price_spot"])


def test_unchanged_rows_are_not_tagged():
    rules = [
        Overlay(cloud="aws", discount_percent=0.0, file="o.yaml"),
        Overlay(
            cloud="gcp",
            region="us-central1",
            instance_type="a2-highgpu-8g",
            price_on_demand=29.39,
            file="o.yaml",
        ),
    ]
    out = apply_overlays(offers(), rules)
    assert (out["source"] == "list").all()
    assert out.equals(offers())


def test_no_overlays_is_a_copy():
    table = offers()
    out = apply_overlays(table, [])
    assert out.equals(table) and out is not table


def test_loaded_rules_apply(tmp_path):
    out = apply_overlays(offers(), load_overlays(write(tmp_path, BRIEF, "deal.yaml")))
    assert out.loc[3, "price_on_demand"] == 20.0
    assert out.loc[4, "price_on_demand"] == 30.1
    assert out.loc[3, "source"] == "list+overlay:deal.yaml"


prices = st.one_of(st.just(NAN), st.floats(1e-4, 1e5, allow_nan=False))


@given(
    on_demand=st.lists(prices, min_size=1, max_size=8),
    spot=st.lists(prices, min_size=8, max_size=8),
    percent=st.floats(0, 100, exclude_max=True),
    market=st.sampled_from(["on-demand", "spot", "both"]),
)
def test_discount_never_raises_a_price_and_keeps_nan(on_demand, spot, percent, market):
    n = len(on_demand)
    frame = pd.DataFrame({name: [""] * n for name in COLUMN_NAMES})
    frame["cloud"] = "aws"
    frame["price_on_demand"] = on_demand
    frame["price_spot"] = spot[:n]
    for column in (
        "accelerator_count",
        "accelerator_memory_gib",
        "vcpus",
        "memory_gib",
        "spot_interruption_rate",
        "capacity",
    ):
        frame[column] = NAN
    table = conform(frame)
    out = apply_overlays(table, [Overlay(cloud="aws", discount_percent=percent, market=market)])
    for column in ("price_on_demand", "price_spot"):
        before, after = table[column].to_numpy(), out[column].to_numpy()
        assert np.array_equal(np.isnan(before), np.isnan(after))
        known = ~np.isnan(before)
        assert (after[known] <= before[known]).all()
        assert (after[known] > 0).all()
    conform(out)  # a discount never makes a price 0


def test_zero_discount_is_bit_identical():
    # price * 100 / 100 would give 5243.209341526092 here: one ulp more than the list price
    table = offers()
    table.loc[0, "price_on_demand"] = 5243.2093415260915
    out = apply_overlays(table, [Overlay(cloud="aws", discount_percent=0.0)])
    assert out.loc[0, "price_on_demand"] == 5243.2093415260915
