"""The gang rules the three cloud adapters share (providers.cloudgang), as plain values:
ids, domain names, the fabric and size checks, and the gang as one Instance."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers.base import ID_PATTERN, Instance, LaunchRequest
from providers.cloudgang import (
    MAX_CLOUD_GANG_NODES,
    TAG_NODES,
    TAG_PEERS,
    Node,
    by_rank,
    domain_name,
    gang_fabric,
    gang_id,
    gang_instance,
    parse_gang_id,
    peers_value,
)
from providers.errors import InvalidRequest
from providers.gang import TAG_RANK

attempt_ids = st.from_regex(ID_PATTERN, fullmatch=True)


@given(st.sampled_from(["us-east-1", "us-central1-a", "rg-test"]), attempt_ids)
def test_a_gang_id_gives_back_its_place_and_attempt(place, attempt):
    assert parse_gang_id(gang_id(place, attempt)) == (place, attempt)


def test_single_vm_ids_are_not_gang_ids():
    for instance_id in ("us-east-1/i-0123456789abcdef0", "us-central1-a/broker-a-1", "rg/vm"):
        assert parse_gang_id(instance_id) is None


@given(attempt_ids, attempt_ids)
def test_domain_names_are_valid_everywhere_and_never_shared(one, other):
    for attempt in (one, other):
        assert re.fullmatch(r"[a-z][-a-z0-9]{0,61}[a-z0-9]", domain_name(attempt))
    if one != other:
        assert domain_name(one) != domain_name(other)


def request(**changes) -> LaunchRequest:
    fields = dict(attempt_id="a-1", job_id="j-1", cloud="aws", region="r", instance_type="t")
    return LaunchRequest(**(fields | {"command": "true", "nodes": 2} | changes))


def test_the_fabric_is_the_types_own_unless_another_is_asked():
    assert gang_fabric("aws", request(), "efa") == "efa"
    assert gang_fabric("aws", request(nodes=1), "efa") == ""
    assert gang_fabric("aws", request(), "") == ""
    assert gang_fabric("aws", request(interconnect="nvlink"), "efa") == "efa"
    assert gang_fabric("aws", request(interconnect="efa"), "efa") == "efa"
    with pytest.raises(InvalidRequest, match="no efa"):
        gang_fabric("aws", request(interconnect="efa"), "")
    with pytest.raises(InvalidRequest, match="expected one of"):
        gang_fabric("aws", request(interconnect="myrinet"), "efa")
    with pytest.raises(InvalidRequest, match=f"at most {MAX_CLOUD_GANG_NODES}"):
        gang_fabric("aws", request(nodes=MAX_CLOUD_GANG_NODES + 1), "efa")


def test_sixteen_peers_fit_one_tag_value():
    longest = peers_value(["255.255.255.255"] * MAX_CLOUD_GANG_NODES)
    assert len(longest) <= 256


def node(rank: int, state: str = "running", nodes: int = 3, address: str = "") -> Node:
    tags = (("broker-attempt", "a-1"), (TAG_NODES, str(nodes)), (TAG_RANK, str(rank)))
    tags += ((TAG_PEERS, "x"),)
    instance = Instance(f"r/i-{rank}", "aws", "aws", "r", "z", "t", "spot", state, tags=tags)
    return Node(instance, address)


def test_a_gang_instance_has_its_members_by_rank_and_no_member_tags():
    gang = gang_instance("r/gang/a-1", [node(2), node(0), node(1)])
    assert [m.rank for m in gang.members] == [0, 1, 2] and gang.nodes == 3
    assert gang.state == "running" and gang.tag(TAG_RANK) is None and gang.tag(TAG_PEERS) is None
    assert gang.attempt_id == "a-1"


def test_a_partial_gang_is_pending_until_it_ends():
    assert gang_instance("r/gang/a-1", [node(0), node(1)]).state == "pending"
    ended = gang_instance("r/gang/a-1", [node(0, "interrupted"), node(1)])
    assert ended.state == "interrupted"


def test_one_node_per_rank_a_live_one_first():
    old, new = node(1, "terminated"), node(1, "running")
    assert by_rank([old, node(0), new]) == [node(0), new]
