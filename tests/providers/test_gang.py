"""The gang rules every provider shares (providers.gang): state from members, rank env."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers.gang import GangMember, gang_state, rank_environment

STATES = ("pending", "running", "succeeded", "failed", "terminated", "interrupted")


def gang(*states: str, codes: tuple[int | None, ...] = ()) -> tuple[GangMember, ...]:
    codes = codes or (None,) * len(states)
    return tuple(
        GangMember(rank=i, node_id=f"n{i}", state=s, exit_code=c)
        for i, (s, c) in enumerate(zip(states, codes, strict=True))
    )


def test_one_reclaimed_node_interrupts_the_gang():
    assert gang_state(gang("running", "interrupted", "running")) == ("interrupted", None)


def test_a_failed_rank_fails_the_gang_with_its_exit_code():
    assert gang_state(gang("succeeded", "failed", codes=(0, 3))) == ("failed", 3)


def test_the_gang_succeeds_when_rank_0_exits_0_and_all_ended():
    assert gang_state(gang("succeeded", "succeeded", codes=(0, 0))) == ("succeeded", 0)
    assert gang_state(gang("succeeded", "running", codes=(0, None))) == ("running", None)


def test_pending_until_every_node_runs():
    assert gang_state(gang("running", "pending")) == ("pending", None)
    assert gang_state(gang("running", "running")) == ("running", None)


@given(st.lists(st.sampled_from(STATES), min_size=1, max_size=8))
def test_the_gang_state_is_a_state_and_never_hides_a_reclaim_or_failure(states):
    state, _ = gang_state(gang(*states))
    assert state in STATES
    if "interrupted" in states:
        assert state == "interrupted"
    elif "failed" in states:
        assert state == "failed"
    if state == "succeeded":
        assert states[0] == "succeeded"


def test_rank_environment_for_torchrun():
    env = rank_environment(1, ("10.0.0.5", "10.0.0.6"), gpus_per_node=8, port=1234)
    assert env["BROKER_NODE_RANK"] == env["NODE_RANK"] == "1"
    assert env["BROKER_NUM_NODES"] == env["NNODES"] == "2"
    assert env["BROKER_NODE_IPS"] == "10.0.0.5\n10.0.0.6"
    assert env["MASTER_ADDR"] == "10.0.0.5" and env["MASTER_PORT"] == "1234"
    assert env["WORLD_SIZE"] == "16" and env["BROKER_GPUS_PER_NODE"] == "8"


def test_rank_outside_the_gang_is_refused():
    with pytest.raises(ValueError, match="outside"):
        rank_environment(2, ("a", "b"), gpus_per_node=1)
