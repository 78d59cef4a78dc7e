"""The hindsight optimum on tiny traces whose cheapest schedule is worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.sim.optimum import Market, hindsight_optimum, units_per_step


def _best(markets, work, deadline, restart=0.5, egress=None, step=1.0):
    return hindsight_optimum(
        markets, step_hours=step, work_hours=work, deadline_hours=deadline,
        restart_hours=restart, egress=egress,
    )  # fmt: skip


def test_spot_from_its_first_open_step_with_a_partly_billed_last_step():
    # spot at 1/h opens at step 1; 2 h of work + 0.5 h start: steps 1, 2 and half of 3.
    spot = Market("a", [1.0], [False, True, True, True])
    assert _best([spot, Market("a", [3.0])], work=2, deadline=4).cost == pytest.approx(2.5)


def test_spot_then_on_demand_when_spot_closes_before_the_deadline():
    # spot steps 0-1: 1.5 h of work for 2 USD; on-demand steps 2-3: 1.5 h for 6 USD = 8,
    # cheaper than 3.5 h on-demand (10.5) and the only way with spot to finish by 4 h.
    spot = Market("a", [1.0], [True, True, False, False])
    assert _best([spot, Market("a", [3.0])], work=3, deadline=4).cost == pytest.approx(8.0)


def test_egress_is_paid_once_per_move_and_picks_the_cheaper_second_leg():
    spot_a = Market("a", [1.0], [True, True, False, False])
    on_demand_b = Market("b", [3.0])
    egress = {("a", "b"): 1.0, ("b", "a"): 1.0}
    assert _best([spot_a, on_demand_b], 3, 4, egress=egress).cost == pytest.approx(9.0)
    spot_b = Market("b", [2.0], [False, False, True, True])
    # spot in b for steps 2-3 (4 USD) plus the 1 USD move beats on-demand there (7 USD)
    assert _best([spot_a, spot_b, on_demand_b], 3, 4, egress=egress).cost == pytest.approx(7.0)


def test_waiting_out_a_gap_is_free_and_a_second_start_pays_its_overhead():
    # spot open 0-1 and 3-5: 1.5 h, wait, then a new start (0.5 h) and 1.5 h more.
    spot = Market("a", [1.0], [True, True, False, True, True, True])
    assert _best([spot, Market("a", [9.0])], work=3, deadline=6).cost == pytest.approx(4.0)


def test_per_step_prices_are_followed():
    spot = Market("a", [5.0, 1.0, 1.0, 1.0], [True] * 4)
    assert _best([spot], work=1, deadline=4, restart=0).cost == pytest.approx(1.0)


def test_an_infeasible_deadline_has_no_optimum():
    result = _best([Market("a", [3.0])], work=4, deadline=4)
    assert not result.feasible and math.isinf(result.cost)


def test_units_make_the_overhead_whole():
    assert units_per_step(195 / 3600, 0.2) == 13
    assert units_per_step(195 / 3600, 0.05) == 13
    assert units_per_step(300 / 3600, 0.05) == 5


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.booleans(), min_size=6, max_size=12),
    st.floats(0.2, 2.0),
    st.integers(1, 4),
)
def test_bounded_by_all_spot_and_all_on_demand(open_steps, spot_price, work):
    """Never dearer than on-demand alone, never cheaper than the work at the spot price."""
    spot = Market("a", [spot_price], open_steps)
    on_demand = Market("a", [3.0])
    best = _best([spot, on_demand], work, len(open_steps))
    assert best.cost <= 3.0 * (work + 0.5) + 1e-9
    assert best.cost >= min(spot_price, 3.0) * (work + 0.5) - 1e-9
