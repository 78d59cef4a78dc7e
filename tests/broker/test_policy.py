"""broker.queue: the queue policy (order, quotas, budgets, capacity, preemption, backfill),
decayed usage, and the policy file."""

from __future__ import annotations

import dataclasses
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.queue import (
    Policy,
    QueuedJob,
    RunningJob,
    TeamPolicy,
    Verdict,
    decayed_usage,
    fair_share_factors,
    job_scores,
    load_policy,
    schedule,
)
from pricing.userio.errors import UserInputError

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
LAB = ("onprem", "lab")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
CATEGORIES = ("quota", "budget", "capacity", "lower priority", "fair share", "backfill")


def q(
    job_id,
    team="nlp",
    *,
    queue="default",
    priority=0,
    minutes_ago=60,
    gpus=8.0,
    model="H100",
    cost=100.0,
    hours=2.0,
    place=LAB,
    preemptible=False,
) -> QueuedJob:
    return QueuedJob(
        job_id,
        team,
        queue,
        priority,
        NOW - timedelta(minutes=minutes_ago),
        gpus,
        model if gpus else "",
        cost,
        hours,
        place[0],
        place[1],
        preemptible,
    )


def r(
    job_id,
    team="nlp",
    *,
    priority=0,
    minutes_ago=120,
    gpus=8.0,
    model="H100",
    place=LAB,
    preemptible=True,
    ends_in_hours=4.0,
    protected_until=None,
) -> RunningJob:
    return RunningJob(
        job_id,
        team,
        priority,
        NOW - timedelta(minutes=minutes_ago),
        gpus,
        model,
        place[0],
        place[1],
        preemptible,
        NOW + timedelta(hours=ends_in_hours),
        protected_until,
    )


def run(queued, running=(), *, policy=None, usage=None, spent=None, free=None, now=NOW):
    return schedule(
        queued,
        running,
        policy=policy or Policy(),
        usage=usage or {},
        spent_this_month=spent or {},
        free_gpus=free or {},
        now=now,
    )


def by_id(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.job_id: v for v in verdicts}


# --- ordering -------------------------------------------------------------------------


def test_jobs_limited_by_nothing_launch_with_no_reason():
    verdicts = run([q("a"), q("b", "vision", gpus=64), q("c", gpus=0)])
    assert [(v.action, v.reason, v.preempts) for v in verdicts] == [("launch", "", ())] * 3
    assert [v.position for v in verdicts] == [1, 2, 3]


def test_fair_share_lets_a_light_team_overtake_a_heavy_team_at_equal_priority():
    heavy, light = q("h1", "heavy", minutes_ago=90), q("l1", "light", minutes_ago=10)
    verdicts = run([heavy, light], usage={"heavy": 100.0, "light": 0.0}, free={LAB: 8})
    assert [v.job_id for v in verdicts] == ["l1", "h1"]
    assert by_id(verdicts)["l1"].action == "launch"
    assert by_id(verdicts)["h1"] == Verdict(
        "h1",
        "wait",
        "fair share: the free GPUs on onprem:lab went to l1 (team light, priority 0)",
        position=2,
        category="fair share",
    )
    # Without the usage, first come first served.
    assert [v.job_id for v in run([heavy, light], free={LAB: 8})] == ["h1", "l1"]


def test_priority_comes_before_fair_share_and_names_the_reason():
    high = q("busy", "heavy", priority=5, minutes_ago=1)
    low = q("idle", "light", priority=1, minutes_ago=500)
    verdicts = run([low, high], usage={"heavy": 1000.0}, free={LAB: 8})
    assert [v.job_id for v in verdicts] == ["busy", "idle"]
    assert verdicts[1].reason == (
        "lower priority: the free GPUs on onprem:lab went to busy (team heavy, priority 5)"
    )


def test_fifo_within_a_team_then_job_id():
    jobs = [q("c", minutes_ago=30), q("b", minutes_ago=30), q("a", minutes_ago=10)]
    verdicts = run(jobs, free={LAB: 8})
    assert [v.job_id for v in verdicts] == ["b", "c", "a"]
    assert [v.action for v in verdicts] == ["launch", "wait", "wait"]
    # FIFO ties are plain capacity waits, with the expected start when known.
    assert verdicts[1].reason == (
        "capacity: 0 GPUs free on onprem:lab, job needs 8 (expected by 2025-03-10T14:00Z)"
    )


def test_queue_weight_orders_jobs_of_equal_priority():
    policy = Policy(queues={"default": 1, "research": 2, "batch": 0.5})
    jobs = [
        q("batch", queue="batch", minutes_ago=90),
        q("plain", minutes_ago=60),
        q("res", queue="research", minutes_ago=5),
    ]
    assert [v.job_id for v in run(jobs, policy=policy)] == ["res", "plain", "batch"]


def test_scores_follow_the_documented_formula():
    policy = Policy(
        queues={"default": 1, "research": 2},
        teams={"nlp": TeamPolicy(share=2), "vision": TeamPolicy(share=1)},
    )
    jobs = [q("n", "nlp"), q("v", "vision", queue="research")]
    scores = job_scores(jobs, [], policy, {"nlp": 30.0, "vision": 10.0})
    # nlp: U = 30/40, S = 2/3; vision: U = 10/40, S = 1/3.
    assert scores["n"] == pytest.approx(2 ** (-0.75 / (2 / 3)), abs=1e-12)
    assert scores["v"] == pytest.approx(2 * 2 ** (-0.25 / (1 / 3)), abs=1e-12)
    assert fair_share_factors({}, {"a": 1, "b": 3}) == {"a": 1.0, "b": 1.0}
    assert fair_share_factors({"a": 5, "b": 15}, {"a": 1, "b": 3}) == {"a": 0.5, "b": 0.5}


def test_duplicate_queued_ids_are_refused():
    with pytest.raises(ValueError, match="duplicate"):
        run([q("a"), q("a")])


# --- quotas and budgets -----------------------------------------------------------------


def test_quota_counts_jobs_launched_earlier_in_the_same_call():
    policy = Policy(teams={"nlp": TeamPolicy(max_gpus=16)})
    verdicts = run(
        [q("a", minutes_ago=3), q("b", minutes_ago=2), q("c", minutes_ago=1)], policy=policy
    )
    assert [v.action for v in verdicts] == ["launch", "launch", "wait"]
    assert verdicts[2].reason == "quota: team nlp at 16/16 GPUs, job needs 8"
    assert verdicts[2].category == "quota"


def test_per_model_quota():
    policy = Policy(teams={"nlp": TeamPolicy(max_gpus_by_model={"h100": 16})})
    running = [r("r1", gpus=12, place=("aws", "us-east-1"))]
    jobs = [
        q("h8", minutes_ago=3),
        q("a8", model="A100", minutes_ago=2),
        q("h4", gpus=4, minutes_ago=1),
        q("v8", "vision"),
    ]
    verdicts = by_id(run(jobs, running, policy=policy))
    assert verdicts["h8"].reason == "quota: team nlp at 12/16 H100 GPUs, job needs 8"
    assert [verdicts[j].action for j in ("a8", "h4", "v8")] == ["launch"] * 3


def test_budget_waits_with_the_amounts():
    policy = Policy(teams={"vision": TeamPolicy(monthly_budget=5000)})
    jobs = [
        q("a", "vision", cost=150, minutes_ago=3),
        q("b", "vision", cost=150, minutes_ago=2),
        q("free", "vision", cost=0, minutes_ago=1),
    ]
    verdicts = run(jobs, policy=policy, spent={"vision": 4800})
    assert [v.action for v in verdicts] == ["launch", "wait", "launch"]
    assert verdicts[1].reason == (
        "budget: team vision at $4,950.00 of $5,000.00 this month, job needs $150.00"
    )
    exactly = run([q("x", "vision", cost=200)], policy=policy, spent={"vision": 4800})
    assert exactly[0].action == "launch"


# --- backfill ---------------------------------------------------------------------------


def backfill_case(*later, free=4, head_gpus=12, backfill=True):
    head = q("head", gpus=head_gpus, minutes_ago=100)
    running = [r("r1", gpus=8, preemptible=False, ends_in_hours=2)]  # frees 8 at 14:00
    return by_id(run([head, *later], running, free={LAB: free}, policy=Policy(backfill=backfill)))


def test_backfill_allowed_when_the_small_job_ends_before_the_head_can_start():
    verdicts = backfill_case(q("small", gpus=4, hours=1.5, minutes_ago=5))
    assert verdicts["head"].reason == (
        "capacity: 4 GPUs free on onprem:lab, job needs 12 (expected by 2025-03-10T14:00Z)"
    )
    assert verdicts["small"] == Verdict(
        "small", "launch", "backfill: ends before head needs onprem:lab", position=2,
        category="backfill",
    )  # fmt: skip


def test_backfill_refused_when_it_would_delay_the_head():
    verdicts = backfill_case(q("long", gpus=4, hours=3, minutes_ago=5))
    assert verdicts["long"].action == "wait"
    assert verdicts["long"].reason == (
        "backfill: would delay head, which needs 12 GPUs on onprem:lab at 2025-03-10T14:00Z"
    )


def test_backfill_into_gpus_the_head_will_not_need():
    # At 14:00: 6 free + 8 freed = 14; the head needs 12, so 2 are spare.
    four, two = q("four", gpus=4, hours=9, minutes_ago=5), q("two", gpus=2, hours=9, minutes_ago=4)
    verdicts = backfill_case(four, two, free=6, head_gpus=12)
    assert verdicts["four"].reason.startswith("backfill: would delay head")
    assert verdicts["two"].action == "launch"
    assert verdicts["two"].reason == "backfill: uses GPUs head will not need on onprem:lab"


def test_backfill_off_keeps_strict_order():
    verdicts = backfill_case(q("small", gpus=4, hours=1, minutes_ago=5), backfill=False)
    assert verdicts["small"].reason == "capacity: waits behind head for onprem:lab (backfill off)"


# --- preemption -------------------------------------------------------------------------


def preempt(running, job=None, *, free=0, policy=None):
    job = job or q("urgent", priority=5)
    return run([job], running, free={LAB: free}, policy=policy)[0]


def test_preemption_picks_the_lowest_priority_victim():
    running = [r("mid", priority=2), r("low", priority=1), r("top", priority=9)]
    verdict = preempt(running)
    assert verdict == Verdict(
        "urgent", "launch", "preemption: preempts low on onprem:lab", ("low",), position=1,
        category="preemption",
    )  # fmt: skip


def test_preemption_prefers_fewest_then_lowest_then_most_recent():
    fewest = preempt([r("a", gpus=4), r("b", gpus=4), r("big", priority=1, gpus=8)])
    assert fewest.preempts == ("big",)
    recent = preempt([r("old", minutes_ago=300), r("new", minutes_ago=60)])
    assert recent.preempts == ("new",)
    # Highest victim priority 4 either way: the set that starts lowest wins.
    ceiling = preempt(
        [
            r("p0", priority=0, gpus=1),
            r("p4a", priority=4, gpus=4),
            r("p4b", priority=4, gpus=4),
            r("p4c", priority=4, gpus=7, minutes_ago=1000),
        ],
        q("urgent", priority=9),
    )
    assert ceiling.preempts == ("p0", "p4c")
    lowest_max = preempt(
        [
            r("p0", priority=0, gpus=1),
            r("p4a", priority=4, gpus=4),
            r("p4b", priority=4, gpus=4),
            r("p8", priority=8, gpus=7),
        ],
        q("urgent", priority=9),
    )
    assert sorted(lowest_max.preempts) == ["p4a", "p4b"]


def test_preemption_respects_protection_checkpoints_models_and_equal_priority():
    running = [
        r("shielded", priority=0, protected_until=NOW + timedelta(minutes=5)),
        r("fresh", priority=0, minutes_ago=10),  # inside the 30-minute protection
        r("no-ckpt", priority=0, preemptible=False),
        r("a100", priority=0, model="A100"),
        r("equal", priority=5),
    ]
    verdict = preempt(running)
    assert verdict.action == "wait" and verdict.reason.startswith("capacity: 0 GPUs free")
    expired = r("expired", priority=3, protected_until=NOW - timedelta(minutes=1))
    assert preempt([*running, expired]).preempts == ("expired",)
    assert preempt([*running, expired], policy=Policy(preemption=False)).action == "wait"


def test_preempted_gpus_serve_later_jobs_and_leave_the_victims_quota():
    policy = Policy(teams={"vision": TeamPolicy(max_gpus=8)})
    jobs = [
        q("urgent", priority=5, gpus=4),
        q("next", gpus=4, minutes_ago=5),
        q("v", "vision", gpus=8, place=("aws", "x")),
    ]
    verdicts = by_id(run(jobs, [r("victim", "vision")], free={LAB: 0}, policy=policy))
    assert verdicts["urgent"].preempts == ("victim",)
    assert verdicts["next"].action == "launch" and verdicts["v"].action == "launch"


# --- properties -------------------------------------------------------------------------

TEAMS = ("nlp", "vision", "infra")
PLACES = (LAB, ("aws", "us-east-1"), ("gcp", "europe-west4"))


@st.composite
def scenarios(draw, crowded=False):
    """Random queues, running sets and policies; `crowded`: one full lab, no team limits."""
    places = (LAB,) if crowded else PLACES

    def job_gpus():
        gpus = draw(st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0]))
        return gpus, draw(st.sampled_from(["H100", "A100"])) if gpus else ""

    queued = []
    for i in range(draw(st.integers(0, 12))):
        gpus, model = job_gpus()
        place = draw(st.sampled_from(places))
        queued.append(
            QueuedJob(
                f"q{i}",
                draw(st.sampled_from(TEAMS)),
                draw(st.sampled_from(["default", "research", "batch", "other"])),
                draw(st.integers(0, 3)),
                NOW - timedelta(minutes=draw(st.integers(0, 50))),
                gpus,
                model,
                float(draw(st.integers(0, 3000))),
                draw(st.sampled_from([0.5, 1.0, 2.0, 8.0])),
                place[0],
                place[1],
                draw(st.booleans()),
            )
        )
    running = []
    for i in range(draw(st.integers(2 if crowded else 0, 8))):
        gpus, model = job_gpus()
        place = draw(st.sampled_from((LAB, *places)))
        protected = draw(st.none() | st.integers(-60, 60))
        running.append(
            RunningJob(
                f"r{i}",
                draw(st.sampled_from(TEAMS)),
                draw(st.integers(0, 3)),
                NOW - timedelta(minutes=draw(st.integers(0, 300))),
                gpus,
                model,
                place[0],
                place[1],
                draw(st.booleans()),
                NOW + timedelta(minutes=draw(st.integers(-60, 600))),
                None if protected is None else NOW + timedelta(minutes=protected),
            )
        )
    teams = {}
    for team in () if crowded else draw(st.lists(st.sampled_from(TEAMS), unique=True)):
        teams[team] = TeamPolicy(
            share=draw(st.sampled_from([0.5, 1.0, 2.0])),
            max_gpus=draw(st.none() | st.integers(0, 24).map(float)),
            max_gpus_by_model=draw(
                st.dictionaries(st.sampled_from(["H100", "A100"]), st.integers(0, 12).map(float))
            ),
            monthly_budget=draw(st.none() | st.integers(0, 6000).map(float)),
        )
    policy = Policy(
        queues={"default": 1.0, "research": 2.0, "batch": 0.5},
        teams=teams,
        preemption=crowded or draw(st.booleans()),
        preemption_protect_minutes=draw(st.sampled_from([0, 30])),
        backfill=draw(st.booleans()),
    )
    usage = draw(st.dictionaries(st.sampled_from(TEAMS), st.floats(0, 1000)))
    spent = draw(st.dictionaries(st.sampled_from(TEAMS), st.integers(0, 5000).map(float)))
    free = draw(st.dictionaries(st.sampled_from(PLACES), st.integers(0, 16).map(float)))
    if crowded or draw(st.booleans()):  # the lab crowded: preemption and backfill have work to do
        free[LAB] = float(draw(st.integers(0, 4)))
    return dict(
        queued=queued,
        running=running,
        policy=policy,
        usage=usage,
        spent_this_month=spent,
        free_gpus=free,
        now=NOW,
    )


def call(sc):
    return schedule(
        sc["queued"],
        sc["running"],
        **{k: v for k, v in sc.items() if k not in ("queued", "running")},
    )


def earliest(free: float, ends: list[tuple[datetime, float]], need: float):
    """When `need` GPUs are first free, as running jobs end (None: never)."""
    if free + 1e-9 >= need:
        return NOW
    for end, gpus in sorted(ends):
        free += gpus
        if free + 1e-9 >= need:
            return end
    return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans().flatmap(scenarios))
def test_schedule_invariants(sc):
    verdicts = call(sc)
    policy, queued, running = sc["policy"], sc["queued"], sc["running"]
    jobs = {j.job_id: j for j in queued}
    live = {x.job_id: x for x in running}
    # Exactly one verdict per job, positions 1..n, priorities never increasing.
    assert sorted(v.job_id for v in verdicts) == sorted(jobs)
    assert [v.position for v in verdicts] == list(range(1, len(queued) + 1))
    priorities = [jobs[v.job_id].priority for v in verdicts]
    assert priorities == sorted(priorities, reverse=True)
    for v in verdicts:
        assert v.action in ("launch", "wait")
        if v.action == "wait":
            assert category(v) in CATEGORIES and not v.preempts
    # Victims: running, preempted once, preemptible, unprotected, lower priority, same place.
    launched = [jobs[v.job_id] for v in verdicts if v.action == "launch"]
    victims = [(v.job_id, x) for v in verdicts for x in v.preempts]
    assert len({x for _, x in victims}) == len(victims)
    protect = timedelta(minutes=policy.preemption_protect_minutes)
    for by, x in victims:
        victim, job = live[x], jobs[by]
        assert policy.preemption and victim.preemptible and victim.priority < job.priority
        assert (victim.cloud, victim.region) == (job.cloud, job.region)
        assert victim.protected_until is None or victim.protected_until <= NOW
        assert NOW - victim.started_at >= protect
    gone = {x for _, x in victims}
    still = [x for x in running if x.job_id not in gone]
    # Quotas and budgets hold for every team that launched something that counts.
    for team in TEAMS:
        rules = policy.team(team)
        mine = [j for j in launched if j.team == team]
        total = sum(x.gpus for x in still if x.team == team) + sum(j.gpus for j in mine)
        if rules.max_gpus is not None and any(j.gpus > 0 for j in mine):
            assert total <= rules.max_gpus + 1e-9
        for model, limit in rules.max_gpus_by_model.items():
            of_model = [j for j in mine if j.gpu_model == model and j.gpus > 0]
            used = sum(x.gpus for x in still if x.team == team and x.gpu_model == model)
            if of_model:
                assert used + sum(j.gpus for j in mine if j.gpu_model == model) <= limit + 1e-9
        cost = sum(j.expected_cost for j in mine)
        if rules.monthly_budget is not None and cost > 0:
            assert sc["spent_this_month"].get(team, 0.0) + cost <= rules.monthly_budget + 1e-9
    # Capacity holds once the victims' GPUs are freed.
    for place, free in sc["free_gpus"].items():
        freed = sum(live[x].gpus for _, x in victims if (live[x].cloud, live[x].region) == place)
        used = sum(j.gpus for j in launched if (j.cloud, j.region) == place)
        assert used <= free + freed + 1e-9
    # Backfill never delays the first job waiting for a place.
    for place in sc["free_gpus"]:
        at = [v for v in verdicts if (jobs[v.job_id].cloud, jobs[v.job_id].region) == place]
        waits = ("capacity", "lower priority", "fair share")
        heads = [i for i, v in enumerate(at) if v.action == "wait" and category(v) in waits]
        if heads:
            promised = head_start(sc, place, at, heads[0], heads[0])
            final = head_start(sc, place, at, heads[0], len(at))
            assert promised is None or (final is not None and final <= promised)


def category(verdict: Verdict) -> str:
    return verdict.reason.split(":")[0]


def head_start(sc, place, at: list[Verdict], head: int, upto: int) -> datetime | None:
    """When the job `at[head]` can start after the verdicts `at[:upto]` (None: never)."""
    jobs = {j.job_id: j for j in sc["queued"]}
    live = {x.job_id: x for x in sc["running"]}
    before = [jobs[v.job_id] for v in at[:upto] if v.action == "launch"]
    out = {x for v in at[:upto] for x in v.preempts}
    ends = [
        (max(x.expected_end, NOW), x.gpus)
        for x in sc["running"]
        if (x.cloud, x.region) == place and x.job_id not in out
    ]
    ends += [(NOW + timedelta(hours=j.expected_hours), j.gpus) for j in before]
    free = sc["free_gpus"][place] + sum(live[x].gpus for x in out) - sum(j.gpus for j in before)
    return earliest(free, ends, jobs[at[head].job_id].gpus)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans().flatmap(scenarios), st.randoms(use_true_random=False))
def test_same_input_same_output_whatever_the_order(sc, rnd):
    first = call(sc)
    assert call(sc) == first
    shuffled = dict(sc, queued=list(sc["queued"]), running=list(sc["running"]))
    rnd.shuffle(shuffled["queued"])
    rnd.shuffle(shuffled["running"])
    assert call(shuffled) == first


# --- decayed usage ----------------------------------------------------------------------


def simpson(f, a: float, b: float, n: int = 4000) -> float:
    h = (b - a) / n
    odd = sum(f(a + (2 * k - 1) * h) for k in range(1, n // 2 + 1))
    even = sum(f(a + 2 * k * h) for k in range(1, n // 2))
    return h / 3 * (f(a) + f(b) + 4 * odd + 2 * even)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(TEAMS), st.floats(0, 16), st.floats(-400, 10), st.floats(0, 200)),
        max_size=4,
    ),
    st.floats(1, 500),
)
def test_decayed_usage_matches_numeric_integration(rows, half_life):
    records = [
        (team, gpus, NOW + timedelta(hours=s), NOW + timedelta(hours=s + length))
        for team, gpus, s, length in rows
    ]
    got = decayed_usage(records, NOW, half_life)
    for team in {row[0] for row in rows}:
        expected = 0.0
        for t, gpus, s, length in rows:
            # The reference uses the times as the records hold them (timedelta keeps
            # microseconds), or a 0.2 s interval differs by a rounded microsecond.
            start = (NOW + timedelta(hours=s) - NOW).total_seconds() / 3600
            stop = (NOW + timedelta(hours=s + length) - NOW).total_seconds() / 3600
            s, end = start, min(stop, 0.0)
            if t == team and end > s:
                expected += simpson(lambda x, g=gpus: g * 2 ** (x / half_life), s, end)
        assert got[team] == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_decayed_usage_halves_per_half_life_and_clips_to_now():
    hour = timedelta(hours=1)
    recent = decayed_usage([("a", 1.0, NOW - hour, NOW)], NOW, 24)["a"]
    old = decayed_usage([("a", 1.0, NOW - 25 * hour, NOW - 24 * hour)], NOW, 24)["a"]
    assert old / recent == pytest.approx(0.5, rel=1e-12)
    assert decayed_usage([("a", 1.0, NOW - hour, None)], NOW, 24)["a"] == recent
    assert decayed_usage([("a", 1.0, NOW - hour, NOW + 5 * hour)], NOW, 24)["a"] == recent
    assert decayed_usage([("a", 2.0, NOW + hour, NOW + 2 * hour)], NOW, 24) == {"a": 0.0}
    assert decayed_usage([("a", 8.0, NOW - hour, NOW)], NOW, 1e9)["a"] == pytest.approx(8.0)
    rows = [("a", 1.0, NOW - k * hour, NOW - k * hour + hour / 3) for k in range(50)]
    shuffled = random.Random(4).sample(rows, len(rows))
    assert decayed_usage(rows, NOW, 24) == decayed_usage(shuffled, NOW, 24)
    with pytest.raises(ValueError):
        decayed_usage([], NOW, 0)


# --- the policy file ----------------------------------------------------------------------

# Line numbers in the tests below refer to this text (line 1 is "queues:").
POLICY = """\
queues: {default: 1, research: 2, batch: 0.5}
fair_share: {half_life_hours: 168}
preemption: {enabled: true, protect_minutes: 30}
backfill: true
teams:
  nlp: {share: 2, max_gpus: 32, max_gpus_by_model: {H100: 16}, monthly_budget: 20000}
  vision: {share: 1, monthly_budget: 5000}
"""
EXPECTED = Policy(
    queues={"default": 1, "research": 2, "batch": 0.5},
    teams={
        "nlp": TeamPolicy(
            share=2, max_gpus=32, max_gpus_by_model={"H100": 16}, monthly_budget=20000
        ),
        "vision": TeamPolicy(share=1, monthly_budget=5000),
    },
    fair_share_half_life_hours=168,
    preemption=True,
    preemption_protect_minutes=30,
    backfill=True,
)


def load_error(tmp_path, text) -> UserInputError:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        load_policy(path)
    return info.value


def located(err: UserInputError) -> list[tuple[int, int, str]]:
    return [(e.line, e.column, e.field) for e in err.errors]


def test_policy_file_loads(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    assert load_policy(path) == EXPECTED
    assert load_policy(EXAMPLE) == EXPECTED
    assert dataclasses.asdict(EXPECTED)["teams"]["nlp"]["max_gpus_by_model"] == {"H100": 16}


def test_no_policy_file_means_the_defaults(tmp_path):
    assert load_policy(None) == Policy()
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    assert load_policy(tmp_path / "empty.yaml") == Policy()
    assert load_policy(tmp_path / "absent.yaml", missing_ok=True) == Policy()
    with pytest.raises(UserInputError, match="file not found"):
        load_policy(tmp_path / "absent.yaml")


def test_misspelt_keys_are_located_with_a_suggestion(tmp_path):
    text = POLICY.replace("monthly_budget: 5000", "monthly_budgt: 5000")
    text = text.replace("backfill: true", "backfil: true")
    err = load_error(tmp_path, text)
    assert located(err) == [(4, 1, "backfil"), (7, 22, "teams.vision.monthly_budgt")]
    assert err.message == "unknown field (did you mean 'backfill'?)"
    assert (
        str(err)
        .splitlines()[1]
        .endswith(
            "policy.yaml:7:22: teams.vision.monthly_budgt: unknown field "
            "(did you mean 'monthly_budget'?)"
        )
    )


def test_bad_gpu_names_are_located_at_the_key(tmp_path):
    err = load_error(tmp_path, POLICY.replace("{H100: 16}", "{H10: 16}"))
    assert located(err) == [(6, 53, "teams.nlp.max_gpus_by_model.H10")]
    assert err.message == "unknown GPU 'H10' (did you mean A10, H100, L40?)"
    twice = load_error(tmp_path, POLICY.replace("{H100: 16}", "{H100: 16, h100-sxm: 8}"))
    assert located(twice) == [(6, 63, "teams.nlp.max_gpus_by_model.h100-sxm")]
    assert twice.message == "'h100-sxm' is H100, already limited as 'H100'"
    path = tmp_path / "alias.yaml"
    path.write_text(POLICY.replace("{H100: 16}", "{h100-sxm: 16}"))
    assert load_policy(path).teams["nlp"].max_gpus_by_model == {"H100": 16}


def test_bad_values_are_located_at_the_value(tmp_path):
    err = load_error(tmp_path, POLICY.replace("monthly_budget: 5000", "monthly_budget: -5"))
    assert located(err) == [(7, 38, "teams.vision.monthly_budget")]
    assert err.message == "input should be greater than or equal to 0 (got -5)"
    share = load_error(tmp_path, POLICY.replace("share: 1,", "share: 0,"))
    assert located(share) == [(7, 19, "teams.vision.share")]
    kind = load_error(tmp_path, POLICY.replace("backfill: true", "backfill: sometimes"))
    assert located(kind) == [(4, 11, "backfill")]
    second = load_error(tmp_path, POLICY + "---\nbackfill: false\n")
    assert (second.line, second.message) == (
        9,
        "a policy file holds one YAML document; remove this one",
    )


def test_policy_values_are_checked_in_code_too():
    with pytest.raises(ValueError):
        TeamPolicy(share=0)
    with pytest.raises(ValueError):
        Policy(fair_share_half_life_hours=-1)
    assert math.isclose(Policy().queue_weight("unknown"), 1.0)


def test_every_verdict_category_is_the_first_words_of_its_reason():
    """The category the controller acts on and the reason users read never disagree."""
    cases = [
        run([q("h1", "heavy", minutes_ago=90), q("l1", "light", minutes_ago=10)],
            usage={"heavy": 100.0, "light": 0.0}, free={LAB: 8}),
        list(backfill_case(q("long", gpus=4, hours=3, minutes_ago=5)).values()),
        [preempt([r("mid", priority=2), r("low", priority=1), r("top", priority=9)])],
    ]  # fmt: skip
    seen = set()
    for verdicts in cases:
        for verdict in verdicts:
            if verdict.category:
                assert verdict.reason.startswith(f"{verdict.category}: ")
                seen.add(verdict.category)
            else:
                assert verdict.action == "launch" and verdict.reason == ""
    assert {"fair share", "backfill", "preemption"} <= seen
