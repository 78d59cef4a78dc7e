"""onprem.allocation: NVLink domains, best fit, leaf switches and MIG slices."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onprem.allocation import (
    NodeState,
    allocate,
    allocate_slices,
    node_states,
    slot_names,
)


def node(name, free, gpus=8, domain=0, switch=""):
    return NodeState(name, gpus, frozenset(free), domain, switch)


def test_a_job_stays_inside_one_nvlink_domain():
    # Domain 0 (GPUs 0-3) has 2 GPUs in use: a 4-GPU job takes domain 1 whole.
    state = node("n1", {2, 3, 4, 5, 6, 7}, domain=4)
    got = allocate([state], 4)
    assert got is not None and got.grants[0].gpus == (4, 5, 6, 7) and not got.straddles
    # A 2-GPU job fills the partly used domain, keeping domain 1 whole.
    assert allocate([state], 2).grants[0].gpus == (2, 3)


def test_straddling_is_a_last_resort_and_refused_with_nvlink():
    state = node("n1", {2, 3, 4, 5}, domain=4)
    soft = allocate([state], 4)
    assert soft is not None and soft.straddles and soft.grants[0].gpus == (2, 3, 4, 5)
    assert allocate([state], 4, nvlink=True) is None


def test_a_job_larger_than_a_domain_takes_whole_domains():
    state = node("n1", {0, 1, 2, 4, 5, 6, 7}, domain=2)  # domain (2, 3) is half used
    got = allocate([state], 4)
    assert set(got.grants[0].gpus) in ({0, 1, 4, 5}, {4, 5, 6, 7}, {0, 1, 6, 7})
    assert not got.straddles


def test_buddy_cells_keep_aligned_blocks_free():
    # One GPU of the 8 in use (GPU 0): a 1-GPU job takes its buddy (GPU 1), so that
    # aligned pairs 2-3, 4-5, 6-7 and the block 4-7 stay whole.
    got = allocate([node("n1", set(range(1, 8)))], 1)
    assert got.grants[0].gpus == (1,)
    # With GPUs 0-1 busy, a 2-GPU job takes 2-3 (the rest of the 0-3 block), not 4-5.
    assert allocate([node("n1", set(range(2, 8)))], 2).grants[0].gpus == (2, 3)


def _first_fit(states, k):
    """The naive allocator: the first node, in list order, with k free GPUs; its lowest ones."""
    for state in states:
        if len(state.free) >= k:
            return state.name, tuple(sorted(state.free)[:k])
    return None


def _run(policy, jobs):
    """Start and stop jobs in order; return the job names that found no room when started."""
    free = {"n1": set(range(8)), "n2": set(range(8))}
    held: dict[str, tuple[str, tuple[int, ...]]] = {}
    starved = []
    for event, job, k in jobs:
        if event == "end":
            name, gpus = held.pop(job)
            free[name] |= set(gpus)
            continue
        states = [node(n, f) for n, f in free.items()]
        got = policy(states, k)
        if got is None:
            starved.append(job)
            continue
        held[job] = got
        free[got[0]] -= set(got[1])
    return starved


def _best_fit(states, k):
    got = allocate(states, k)
    return None if got is None else (got.grants[0].node, got.grants[0].gpus)


def test_first_fit_starves_the_big_job_and_best_fit_does_not():
    jobs = [
        ("start", "a", 4),
        ("start", "b", 4),  # n1 full
        ("start", "c", 4),  # n2 half
        ("end", "a", 0),
        ("end", "b", 0),  # n1 empty, n2 half used
        ("start", "d", 2),  # first fit: n1 (the first with room); best fit: n2
        ("start", "big", 8),
    ]
    assert _run(_first_fit, jobs) == ["big"]
    assert _run(_best_fit, jobs) == []


def test_multi_node_jobs_stay_under_one_leaf_switch():
    states = [
        node("a1", range(8), switch="leaf-a"),
        node("a2", range(8), switch="leaf-a"),
        node("b1", range(8), switch="leaf-b"),
        node("b2", range(8), switch="leaf-b"),
        node("b3", range(8), switch="leaf-b"),
    ]
    two = allocate(states, 8, 2, same_switch="prefer")
    assert two.nodes == ("a1", "a2") and two.switches == ("leaf-a",)  # the tighter group
    three = allocate(states, 8, 3, same_switch="require")
    assert three.nodes == ("b1", "b2", "b3")
    assert allocate(states, 8, 4, same_switch="require") is None
    four = allocate(states, 8, 4, same_switch="prefer")
    assert set(four.nodes) == {"b1", "b2", "b3", "a1"} and four.switches == ("leaf-a", "leaf-b")


def test_slices_go_best_fit_to_one_node():
    layout = (("1g.10gb", 7),)
    states = node_states(
        [("m1", 1, "", layout), ("m2", 1, "", layout)], 0, {"m2": ["0.0", "0.1", "0.2"]}
    )
    got = allocate_slices(states, "1g.10gb", 2)
    assert got.grants[0].node == "m2" and got.grants[0].slices == ("0.3", "0.4")
    assert allocate_slices(states, "1g.10gb", 8) is None
    assert allocate_slices(states, "3g.40gb", 1) is None
    assert allocate(states, 1) is None  # a sliced node has no whole GPUs


def test_slot_names_follow_the_layout_per_gpu():
    slots = slot_names(2, (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2)))
    assert slots == {
        "3g.40gb": ("0.0", "1.0"),
        "2g.20gb": ("0.1", "1.1"),
        "1g.10gb": ("0.2", "0.3", "1.2", "1.3"),
    }


def test_bad_requests():
    with pytest.raises(ValueError):
        allocate([node("n", range(8))], 0)
    with pytest.raises(ValueError):
        allocate_slices([], "1g.10gb", 0)


@st.composite
def clusters(draw):
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    domain = draw(st.sampled_from([d for d in (0, 1, 2, 4, 8) if d <= gpus]))
    count = draw(st.integers(1, 5))
    states = [
        NodeState(
            f"n{i}",
            gpus,
            frozenset(draw(st.sets(st.integers(0, gpus - 1)))),
            domain,
            draw(st.sampled_from(["", "s1", "s2"])),
        )
        for i in range(count)
    ]
    return states, draw(st.integers(1, gpus)), draw(st.integers(1, count))


@settings(max_examples=300, deadline=None)
@given(clusters(), st.booleans(), st.sampled_from(["ignore", "prefer", "require"]))
def test_never_over_allocates_and_never_straddles_when_avoidable(cluster, nvlink, policy):
    states, k, count = cluster
    got = allocate(states, k, count, nvlink=nvlink, same_switch=policy)
    by_name = {s.name: s for s in states}
    if got is None:
        fitting = [s for s in states if len(s.free) >= k]
        if policy == "ignore" and not nvlink:
            assert len(fitting) < count  # None only when it truly does not fit
        return
    assert len(got.grants) == count and len(set(got.nodes)) == count
    for grant in got.grants:
        state = by_name[grant.node]
        assert len(grant.gpus) == k == len(set(grant.gpus))
        assert set(grant.gpus) <= state.free  # only free GPUs, never one twice
        domains = state.domains()
        size = len(domains[0])
        touched = {d for d in domains for i in grant.gpus if i in d}
        fits_one = any(sum(i in state.free for i in d) >= k for d in domains) and k <= size
        if fits_one:
            assert len(touched) == 1  # a single domain was possible, and was used
        if nvlink:
            assert len(touched) == -(-k // size)
    if count > 1 and policy == "require":
        assert len(got.switches) == 1 and got.switches[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 8)), max_size=40))
def test_allocations_and_releases_never_share_a_gpu(steps):
    free = {"n1": set(range(8)), "n2": set(range(8))}
    held: list[tuple[str, tuple[int, ...]]] = []
    for release, k in steps:
        if release and held:
            name, gpus = held.pop(0)
            free[name] |= set(gpus)
            continue
        got = allocate([node(n, f, domain=4) for n, f in free.items()], k)
        if got is None:
            assert all(len(f) < k for f in free.values())
            continue
        grant = got.grants[0]
        assert set(grant.gpus) <= free[grant.node]
        free[grant.node] -= set(grant.gpus)
        held.append((grant.node, grant.gpus))
    in_use = [(n, g) for n, gpus in held for g in gpus]
    assert len(in_use) == len(set(in_use))
