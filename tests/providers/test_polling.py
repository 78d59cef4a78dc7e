"""providers.polling: a wait is bounded by time on its ticker, never by a number of looks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from providers.polling import VirtualTicker, WallTicker, wait_for


def test_a_wait_keeps_looking_while_time_is_left_however_many_looks_that_takes():
    ticker = VirtualTicker()
    looks = []

    def ended() -> bool:
        looks.append(ticker.now)
        return len(looks) > 500  # a slow engine: far more looks than any fixed count

    assert wait_for(ended, 1000.0, ticker=ticker, first=0.1, most=0.1)
    assert len(looks) == 501 and ticker.now < 1000.0


def test_a_wait_gives_up_at_its_deadline_after_a_last_look():
    ticker = VirtualTicker()
    looks = []
    assert not wait_for(lambda: looks.append(ticker.now) or False, 7.5, ticker=ticker)
    assert ticker.now == 7.5 and looks[-1] == 7.5 and looks[0] == 0.0


@given(
    change=st.floats(min_value=0.0, max_value=120.0),
    seconds=st.floats(min_value=0.0, max_value=120.0),
    first=st.floats(min_value=0.01, max_value=5.0),
)
def test_a_state_that_changes_in_time_is_always_seen(change, seconds, first):
    ticker = VirtualTicker()
    seen = wait_for(lambda: ticker.now >= change, seconds, ticker=ticker, first=first, most=5.0)
    assert seen == (change <= seconds)
    assert ticker.now <= max(seconds, 0.0)


def test_wall_time_waits_on_the_real_clock():
    ticker = WallTicker()
    start = ticker.monotonic()
    assert not wait_for(lambda: False, 0.05, ticker=ticker)
    assert ticker.monotonic() - start >= 0.05
