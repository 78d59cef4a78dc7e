"""The state's time texts: stored and compared as text, so text order must be time order
for every moment a user can type (`broker jobs --until 0099-03-04` included)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from broker.state.model import parse_ts, ts_text

MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(MOMENTS, MOMENTS)
def test_text_order_is_time_order(a: datetime, b: datetime) -> None:
    assert (ts_text(a) < ts_text(b)) == (a < b)
    assert len(ts_text(a)) == len(ts_text(b)) == len("2026-11-01T03:00:00.000000Z")


@given(MOMENTS, st.integers(min_value=-12, max_value=12))
def test_a_text_reads_back_as_its_moment_whatever_its_zone(moment: datetime, hours: int) -> None:
    zoned = moment.astimezone(timezone(timedelta(hours=hours)))
    assert ts_text(zoned) == ts_text(moment)
    assert parse_ts(ts_text(moment)) == moment
