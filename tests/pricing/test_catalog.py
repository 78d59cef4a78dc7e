"""Reading, writing and choosing the catalog in force."""

from __future__ import annotations

import math
import os
import time

import pandas as pd
import pytest

from pricing.catalog import (
    BUNDLED_CATALOG,
    _read_csv_rows,
    _read_small_csv,
    load_catalog,
    read_offer_table,
    read_offers_csv,
    write_offers_csv,
)
from pricing.offer import Offer
from pricing.schema import COLUMN_NAMES, SchemaError, conform
from pricing.synthetic import synthetic_offers
from pricing.table import OfferTable, concat
from tests.fakes.offers import ROWS, write_catalog


def test_round_trip_keeps_exact_prices_and_missing_values(tmp_path):
    offers = synthetic_offers(500, seed=3)
    path = tmp_path / "offers.csv"
    write_offers_csv(offers, path)
    again = read_offers_csv(path)
    pd.testing.assert_frame_equal(offers, again)
    assert again["price_spot"].isna().any()  # missing stays missing


def test_write_is_atomic_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "offers.csv"
    write_offers_csv(synthetic_offers(10), path)
    write_offers_csv(synthetic_offers(20, seed=1), path)
    assert [p.name for p in tmp_path.iterdir()] == ["offers.csv"]
    assert len(read_offers_csv(path)) == 20


def test_precedence_explicit_then_user_then_bundled(tmp_path, isolated_user_dirs):
    assert load_catalog().origin == "bundled"
    assert load_catalog().path == BUNDLED_CATALOG
    user = isolated_user_dirs / "data" / "broker" / "offers.csv"
    write_offers_csv(synthetic_offers(5), user)
    assert load_catalog().origin == "user"
    explicit = write_catalog(tmp_path / "x.csv")
    chosen = load_catalog(explicit)
    assert chosen.origin == "file" and len(chosen.offers) == 8


def test_zero_price_is_rejected():
    frame = synthetic_offers(3)
    frame.loc[0, "price_on_demand"] = 0.0
    with pytest.raises(SchemaError, match="never 0"):
        conform(frame)


def test_unknown_cloud_and_missing_column_are_rejected():
    frame = synthetic_offers(3)
    with pytest.raises(SchemaError, match="lacks columns: source"):
        conform(frame.drop(columns=["source"]))
    frame.loc[0, "cloud"] = "oracle"
    with pytest.raises(SchemaError, match="oracle"):
        conform(frame)


def test_offer_row_type_turns_nan_into_none():
    row = synthetic_offers(50, seed=2)
    row = row[row["price_spot"].isna()].iloc[0].to_dict()
    offer = Offer.from_row(row)
    assert offer.price_spot is None
    assert set(COLUMN_NAMES) == set(offer.__dataclass_fields__)
    assert offer.price_on_demand is None or not math.isnan(offer.price_on_demand)


def test_compiled_cache_is_used_and_invalidated(tmp_path, isolated_user_dirs):
    path = write_catalog(tmp_path / "offers.csv")
    first = read_offer_table(path)
    caches = list((isolated_user_dirs / "cache" / "broker" / "catalogs").glob("*.table"))
    assert len(caches) == 1
    again = read_offer_table(path)  # from the cache
    assert _same(again, first)
    rows = list(ROWS)
    rows[0] = rows[0].replace("21.9576", "19.5")
    write_catalog(path, tuple(rows))
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    changed = read_offer_table(path)
    assert 19.5 in changed.numbers["price_on_demand"].tolist()


def _same(a, b) -> bool:
    return pd.DataFrame(a.records()).equals(pd.DataFrame(b.records()))


def test_small_and_large_parsers_agree(tmp_path):
    offers = synthetic_offers(300, seed=5)
    path = tmp_path / "offers.csv"
    write_offers_csv(offers, path)
    small = _read_small_csv(path)
    large = OfferTable.from_frame(read_offers_csv(path))
    pd.testing.assert_frame_equal(small.to_frame(), large.to_frame())


def test_column_and_row_readers_agree(tmp_path):
    # A plain catalog is read a column at a time; the row reader, which the others go
    # through for their located errors, must give the same table.
    offers = synthetic_offers(200, seed=7)
    path = tmp_path / "offers.csv"
    write_offers_csv(offers.sample(frac=1.0, random_state=3), path)
    by_column = _read_small_csv(path)
    by_row = _read_csv_rows(path, path.read_text())
    pd.testing.assert_frame_equal(by_column.to_frame(), by_row.to_frame())
    assert repr(by_column.records()) == repr(by_row.records())


def test_small_parser_names_file_line_and_field(tmp_path):
    rows = list(ROWS)
    rows[2] = rows[2].replace("29.39", "twenty")
    path = write_catalog(tmp_path / "bad.csv", tuple(rows))
    with pytest.raises(SchemaError, match=r"bad.csv:4: price_on_demand: not a number: 'twenty'"):
        read_offer_table(path)


def test_table_round_trips_through_concat_and_its_file(tmp_path):
    a = OfferTable.from_frame(synthetic_offers(50, seed=1))
    b = OfferTable.from_frame(synthetic_offers(30, seed=2))
    both = concat([a, b])
    assert len(both) == 80
    assert both.text("region").tolist() == a.text("region").tolist() + b.text("region").tolist()
    both.save(tmp_path / "t.table")
    loaded = OfferTable.load(tmp_path / "t.table")
    pd.testing.assert_frame_equal(loaded.to_frame(), both.to_frame())


BLAS_PROBE = """
import os
from pricing.catalog import load_catalog
load_catalog()
import numpy  # loaded by the catalog already
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS", "-"))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS runs one thread on one core")
@pytest.mark.parametrize("chosen, threads", [(None, "1"), ("2", "2")])
def test_the_catalog_loads_numpy_with_one_blas_thread_unless_told(tmp_path, chosen, threads):
    """Loading a catalog imports numpy with OpenBLAS on one thread (its pool costs CPU
    and the tables multiply no matrices), and leaves the environment as it found it (the
    jobs the broker starts inherit it); a count the user set is theirs."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env |= {"XDG_CACHE_HOME": str(tmp_path)} | ({"OPENBLAS_NUM_THREADS": chosen} if chosen else {})
    out = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [threads, chosen or "-"]
