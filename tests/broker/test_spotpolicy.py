"""broker.spotpolicy: the deadline guarantee, cost and hysteresis of our policy, the
published baselines' rules on hand-made sequences, the registry, and the replayer."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.spotpolicy import (
    POLICIES,
    DeadlineAware,
    Greedy,
    OnDemand,
    ReplayJob,
    SpotFailover,
    SpotState,
    UniformProgress,
    make_policy,
    replay,
)

SPOT, OD = 1.0, 3.0  # USD per hour: spot a third of on-demand


def state(**overrides) -> SpotState:
    """A state at the job's start unless told otherwise (work_total = work_left)."""
    values = dict(
        elapsed=0.0, deadline=10.0, work_left=4.0, restart_overhead=0.5, current=None,
        spot_available=True,
    )  # fmt: skip
    values |= overrides
    values.setdefault("work_total", values["work_left"])
    return SpotState(**values)


def run(policy, job: ReplayJob, availability, step: float = 0.5):
    return replay(policy, job, availability, step_hours=step, spot_price=SPOT, on_demand_price=OD)


# ---- strategies: availability as runs of on/off, jobs with a feasible deadline ----

runs = st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=40)
availability = runs.map(lambda rs: [up for up, n in rs for _ in range(n)])
steps = st.sampled_from([0.05, 0.1, 0.25, 0.5, 1.0])
overheads = st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.0, 1.5])
checkpoints = st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, math.inf])


@st.composite
def feasible_jobs(draw) -> ReplayJob:
    """deadline - work >= restart overhead: the least any policy needs (one start)."""
    work = draw(st.floats(0.5, 8.0))
    overhead = draw(overheads)
    # Spare beyond the bound, mostly a few overheads: where the thresholds bite.
    extra = draw(st.floats(0.0, 5.0)) * max(overhead, 0.25) + draw(st.sampled_from([0, 0, 4]))
    return ReplayJob(
        work=work,
        deadline=work + overhead + extra,
        restart_overhead=overhead,
        checkpoint_interval=draw(checkpoints),
    )


# ---- the state ----


def test_state_rejects_impossible_values():
    for bad in (dict(elapsed=-1.0), dict(work_left=math.nan), dict(restart_overhead=-0.1)):
        with pytest.raises(ValueError):
            state(**bad)
    with pytest.raises(ValueError):
        state(current="preemptible")
    with pytest.raises(ValueError):
        state(preemption_loss=-1.0)


def test_spot_that_is_gone_reads_as_preempted():
    assert state(current="spot", spot_available=False).running is None
    assert state(current="spot").running == "spot"
    assert state(current="on-demand", spot_available=False).running == "on-demand"


def test_short_of_time_counts_whole_steps():
    s = state(elapsed=2.0, deadline=10.0, work_left=6.0)  # 8 h left, 2 h spare
    assert s.spare == 2.0
    assert not s.short_of_time(1.9) and s.short_of_time(2.1)  # continuous
    stepped = state(elapsed=2.0, deadline=10.0, work_left=6.0, step=0.5)
    # Not short means: one more step spent anyhow still leaves the reserve.
    assert not stepped.short_of_time(1.5) and stepped.short_of_time(1.6)
    assert not state(deadline=math.inf).short_of_time(1e9)


# ---- DeadlineAware ----


@settings(max_examples=300, deadline=None)
@given(
    job=feasible_jobs(),
    avail=availability,
    step=steps,
    pace=st.sampled_from([0.0, 0.5, 0.75, 1.0]),
    rate=st.sampled_from([0.0, 0.05, 0.15, 0.5, math.inf]),
    wait=st.booleans(),
    switch=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    band=st.sampled_from([1.0, 2.0]),
)
def test_deadline_aware_meets_every_feasible_deadline(
    job, avail, step, pace, rate, wait, switch, band
):
    """The bound: deadline - work >= restart overhead (a single start) suffices, for any
    availability, step, checkpoint interval, thresholds and reserve (so the issue's bound,
    deadline - work >= switch_margin x overhead + one step, is covered with room)."""
    policy = DeadlineAware(
        switch_margin=switch, resume_margin=switch + band, pace=pace, reserve_rate=rate,
        wait_for_spot=wait,
    )  # fmt: skip
    result = run(policy, job, avail, step)
    assert result.deadline_met, result


@given(work=st.floats(0.5, 10.0), overhead=overheads, short=st.floats(0.01, 0.99))
def test_below_the_bound_no_policy_can_make_it(work, overhead, short):
    job = ReplayJob(work=work, deadline=work + overhead * short, restart_overhead=overhead)
    for name in POLICIES:
        assert not run(make_policy(name), job, [True] * 100).deadline_met or overhead == 0


@settings(max_examples=150, deadline=None)
@given(job=feasible_jobs(), step=steps, ratio=st.floats(0.05, 0.99), pace=st.sampled_from([0, 1]))
def test_never_costs_more_than_on_demand_when_spot_stays(job, step, ratio, pace):
    always = [True] * (math.ceil((job.deadline + job.restart_overhead) / step) + 5)
    prices = dict(step_hours=step, on_demand_price=OD, spot_price=OD * ratio)
    ours = replay(DeadlineAware(pace=pace), job, always, **prices)
    reference = replay(OnDemand(), job, always, **prices)
    assert ours.deadline_met and ours.preemptions == 0
    assert ours.cost <= reference.cost + 1e-9


def test_spot_when_the_spare_allows_on_demand_when_not():
    policy = DeadlineAware(pace=0.0)  # d = 0.5: switch below 1 h of spare, resume above 1.5 h
    assert policy.choose(state(work_left=4.0, deadline=10.0)) == "spot"
    assert policy.choose(state(work_left=8.6, deadline=10.0)) == "on-demand"  # 1.4 h < 1.5
    # Already on spot: stays until the spare falls below the switch threshold.
    assert policy.choose(state(work_left=8.6, deadline=10.0, current="spot")) == "spot"
    assert policy.choose(state(work_left=9.1, deadline=10.0, current="spot")) == "on-demand"


def test_waits_for_spot_while_the_spare_allows():
    unavailable = dict(spot_available=False, deadline=10.0)
    # 6 h spare; the default pace holds back 0.75 x 6 = 4.5 h of it: waiting still allowed.
    assert DeadlineAware().choose(state(work_left=4.0, **unavailable)) == "wait"
    uncapped = DeadlineAware(pace=1.0, reserve_rate=math.inf)  # holds all 6 h back
    assert uncapped.choose(state(work_left=4.0, **unavailable)) == "on-demand"
    # Capped at 0.15 h an hour left, it holds 1.5 h of the 6: waiting allowed.
    assert DeadlineAware(pace=1.0).choose(state(work_left=4.0, **unavailable)) == "wait"
    assert DeadlineAware().choose(state(work_left=9.1, **unavailable)) == "on-demand"
    no_wait = DeadlineAware(wait_for_spot=False)
    assert no_wait.choose(state(work_left=4.0, **unavailable)) == "on-demand"
    # On on-demand with no spot in sight: keep running rather than pay a start later.
    assert DeadlineAware().choose(state(current="on-demand", **unavailable)) == "on-demand"


def test_without_a_deadline_it_always_prefers_spot():
    free = dict(deadline=math.inf, work_total=None)
    policy = DeadlineAware()
    assert policy.choose(state(current="on-demand", **free)) == "spot"
    assert policy.choose(state(current=None, **free)) == "spot"
    assert policy.choose(state(spot_available=False, **free)) == "wait"
    no_wait = DeadlineAware(wait_for_spot=False)
    assert no_wait.choose(state(spot_available=False, **free)) == "on-demand"


def test_hysteresis_band_holds_either_market():
    """With spare between the switch (1 h) and resume (1.5 h) thresholds, the policy
    keeps whichever market runs, however the estimate jitters inside the band."""
    policy = DeadlineAware(pace=0.0)  # the band on the spare itself, no reserve
    band = [8.9 - 0.05 * (i % 8) for i in range(40)]  # spare jitters within 1.1..1.45 h
    on_demand = [policy.choose(state(work_left=w, current="on-demand")) for w in band]
    on_spot = [policy.choose(state(work_left=w, current="spot")) for w in band]
    assert set(on_demand) == {"on-demand"} and set(on_spot) == {"spot"}
    # Outside the band it does move: back to spot once the spare is rebuilt...
    assert policy.choose(state(work_left=8.4, current="on-demand")) == "spot"
    # ...but never while its on-demand start is still being paid.
    starting = state(work_left=4.0, current="on-demand", overhead_left=0.2)
    assert starting.starting and policy.choose(starting) == "on-demand"


def test_pace_holds_spare_back_and_rebuilds_it_on_on_demand():
    """pace=1, uncapped: waiting is allowed only ahead of the uniform line; time on
    on-demand rebuilds the spare measured against the shrinking reserve."""
    policy = DeadlineAware(pace=1.0, reserve_rate=math.inf)
    job = dict(deadline=20.0, work_total=10.0, restart_overhead=0.1)
    # At t=5 the line asks for 2.5 h done. 3 h done: ahead, wait. 2 h done: behind, run.
    ahead = state(elapsed=5.0, work_left=7.0, spot_available=False, **job)
    behind = state(elapsed=5.0, work_left=8.0, spot_available=False, **job)
    assert policy.choose(ahead) == "wait" and policy.choose(behind) == "on-demand"
    assert DeadlineAware(pace=0.0).choose(behind) == "wait"
    # Behind the line, spot available: take it (the absolute spare is ample).
    assert policy.choose(state(elapsed=5.0, work_left=8.0, **job)) == "spot"
    # On on-demand, spot available: stay until progress leads the line by the resume band.
    running = dict(current="on-demand", elapsed=5.0, **job)
    assert policy.choose(state(work_left=7.4, **running)) == "on-demand"  # leads by 0.1 h
    assert policy.choose(state(work_left=7.0, **running)) == "spot"  # leads by 0.5 h


@settings(max_examples=100, deadline=None)
@given(
    up=st.integers(1, 6),
    down=st.integers(1, 6),
    overhead=st.sampled_from([0.1, 0.25, 0.5]),
    extra=st.floats(2.0, 20.0),
    pace=st.sampled_from([0.0, 1.0]),
)
def test_flapping_availability_switches_a_bounded_number_of_times(up, down, overhead, extra, pace):
    """Every return from on-demand to spot needs resume_margin x d (+ a step) of spare,
    and an on-demand start is never left half paid, so each round trip spends at least
    one overhead of spare: with spare S = deadline - work the job returns to spot at most
    (S - resume_margin x d - step) / d + 1 times and switches at most twice that + 1,
    however fast availability flaps."""
    step = 0.05
    job = ReplayJob(work=10.0, deadline=10.0 + extra, restart_overhead=overhead)
    flapping = ([True] * up + [False] * down) * 400
    policy = DeadlineAware(wait_for_spot=False, pace=pace)
    result = run(policy, job, flapping, step)
    entries = max(0.0, (extra - policy.resume_margin * overhead - step) / overhead + 1)
    assert result.deadline_met
    assert result.switches <= 2 * math.floor(entries) + 1, result.switches


# ---- the reserve ----


def _reserve_state(work: float, deadline: float, elapsed: float) -> SpotState:
    return SpotState(elapsed=elapsed, deadline=deadline, work_left=work, restart_overhead=0.2,
                     current=None, spot_available=False, work_total=work)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    work=st.floats(0.5, 100.0),
    loose=st.floats(1.0, 4.0),
    at=st.floats(0.0, 1.2),
    pace=st.floats(0.0, 1.0),
    rate=st.one_of(st.floats(0.0, 1.0), st.just(math.inf)),
)
def test_the_reserve_is_the_lesser_of_the_pace_line_and_the_rate(work, loose, at, pace, rate):
    deadline = work * loose
    state = _reserve_state(work, deadline, at * deadline)
    left = max(deadline - state.elapsed, 0.0)
    line = pace * (deadline - work) * (left / deadline)
    cap = rate * left if left > 0 else 0.0  # (inf x 0 is not a number)
    held = DeadlineAware(pace=pace, reserve_rate=rate).reserve(state)
    assert held == pytest.approx(min(line, cap), rel=1e-9, abs=1e-12)
    assert 0.0 <= held <= line + 1e-12 and held <= cap + 1e-12
    # Uncapped it is the pace's line to the bit: today's figures stay as they were.
    assert DeadlineAware(pace=pace, reserve_rate=math.inf).reserve(state) == line


@settings(max_examples=300, deadline=None)
@given(
    work=st.floats(0.5, 100.0),
    loose=st.floats(1.0, 4.0),
    at=st.floats(0.0, 1.0),
    later=st.floats(0.0, 1.0),
    pace=st.floats(0.0, 1.0),
    rate=st.one_of(st.floats(0.0, 2.0), st.just(math.inf)),
)
def test_the_reserve_sheds_at_most_an_hour_an_hour(work, loose, at, later, pace, rate):
    """It only shrinks, and never faster than time passes: an idle job's spare above its
    line only falls, so its answer turns from "wait" to "on-demand" once, which is what
    the engines' wake-ups bisect for (broker.dispatch.cadence)."""
    deadline = work * loose
    t0, t1 = at * deadline, (at + later * (1 - at)) * deadline
    policy = DeadlineAware(pace=pace, reserve_rate=rate)
    r0 = policy.reserve(_reserve_state(work, deadline, t0))
    r1 = policy.reserve(_reserve_state(work, deadline, t1))
    assert r1 <= r0 + 1e-9
    assert r0 - r1 <= (t1 - t0) + 1e-9


def test_the_cap_binds_only_for_loose_deadlines():
    policy = DeadlineAware()  # pace 0.75, at most 0.15 h an hour left
    # 1.2x: 0.75 x 8 / 48 = 0.125 h an hour, under the cap: the pace's line.
    assert policy.reserve(_reserve_state(40.0, 48.0, 0.0)) == pytest.approx(6.0)
    # 1.5x (V100): 0.25 h an hour, capped at 0.15: 9 h held at the start, not 15.
    assert policy.reserve(_reserve_state(40.0, 60.0, 0.0)) == pytest.approx(9.0)
    assert policy.reserve(_reserve_state(40.0, 60.0, 20.0)) == pytest.approx(6.0)
    assert DeadlineAware(reserve_rate=0.0).reserve(_reserve_state(40.0, 60.0, 0.0)) == 0.0


def test_deadline_aware_rejects_thresholds_that_would_flap_or_miss():
    with pytest.raises(ValueError, match="switch_margin"):
        DeadlineAware(switch_margin=0.5)
    with pytest.raises(ValueError, match="resume_margin"):
        DeadlineAware(switch_margin=2.0, resume_margin=2.5)
    with pytest.raises(ValueError, match="pace"):
        DeadlineAware(pace=1.5)
    for rate in (-0.1, math.nan):
        with pytest.raises(ValueError, match="reserve_rate"):
            DeadlineAware(reserve_rate=rate)
    with pytest.raises(ValueError, match="work_total"):
        DeadlineAware(pace=0.5).choose(state(work_total=None, spot_available=False))


# ---- the published baselines ----


def test_greedy_waits_for_spot_exploits_it_then_stays_on_demand():
    job = ReplayJob(work=2.0, deadline=5.0, restart_overhead=0.5)
    avail = [False, False, True, True, False, False, True, True, True]
    result = run(Greedy(), job, avail)
    # wait, wait, spot (start), spot (0.5 h done), preempted: wait while the spare
    # allows, then on-demand (R 2.5 <= C 1.5 + 2d in whole steps) to the end, even
    # though spot comes back.
    assert result.choices == (
        "wait", "wait", "spot", "spot", "wait",
        "on-demand", "on-demand", "on-demand", "on-demand",
    )  # fmt: skip
    assert result.finish == pytest.approx(4.5) and result.deadline_met
    assert (result.preemptions, result.switches, result.restarts) == (1, 1, 2)
    assert result.cost == pytest.approx(1.0 * SPOT + 2.0 * OD)


def test_uniform_progress_catches_up_on_demand_then_takes_spot_with_hysteresis():
    job = ReplayJob(work=2.0, deadline=4.0, restart_overhead=0.25)  # ep(t) = t / 2
    avail = [False, False, True, True, True, True, True]
    result = run(UniformProgress(), job, avail)
    # t=0 on the line: wait. t=0.5 behind (0 < 0.25), no spot: on-demand (rule 1).
    # t=1.0, 1.5: spot is there but cp 0.25, 0.75 < ep(t + 2d) 0.75, 1.0: stay (rule 3).
    # t=2.0: cp 1.25 >= ep(2.5) = 1.25: take spot (rule 2), finish on it at t=3.
    assert result.choices == ("wait", "on-demand", "on-demand", "on-demand", "spot", "spot")
    assert result.finish == pytest.approx(3.0) and result.switches == 1
    # Greedy on the same trace waits instead, then runs on spot from t=1.
    greedy = run(Greedy(), job, avail)
    assert greedy.choices[:3] == ("wait", "wait", "spot") and greedy.switches == 0


def test_uniform_progress_rules_one_state_at_a_time():
    up = UniformProgress()
    job = dict(deadline=20.0, work_total=10.0, restart_overhead=0.5)  # ep(t) = t / 2
    behind = dict(elapsed=6.0, work_left=8.0, **job)  # cp 2 < ep 3
    ahead = dict(elapsed=6.0, work_left=6.0, **job)  # cp 4 >= ep(6 + 1) = 3.5
    assert up.choose(state(spot_available=False, **behind)) == "on-demand"  # rule 1
    assert up.choose(state(spot_available=False, **ahead)) == "wait"
    assert up.choose(state(**behind)) == "spot"  # rule 2: take risks
    assert up.choose(state(current="on-demand", **behind)) == "on-demand"  # rule 3
    assert up.choose(state(current="on-demand", **ahead)) == "spot"
    assert up.choose(state(current="on-demand", spot_available=False, **ahead)) == "on-demand"
    late = dict(elapsed=10.0, work_left=9.5, **job)  # R 10 < C 9.5 + 2d
    assert up.choose(state(**late)) == "on-demand"  # rule 4
    assert up.choose(state(current="spot", **late)) == "spot"  # exploitation
    with pytest.raises(ValueError, match="work_total"):
        up.choose(state(work_total=None))


@settings(max_examples=200, deadline=None)
@given(
    job=feasible_jobs(),
    avail=availability,
    step=steps,
    name=st.sampled_from(["greedy", "uniform-progress"]),
)
def test_published_policies_meet_every_feasible_deadline(job, avail, step, name):
    assert run(make_policy(name), job, avail, step).deadline_met


def test_on_demand_costs_price_times_work_plus_one_start():
    job = ReplayJob(work=3.0, deadline=4.0, restart_overhead=0.5)
    result = run(OnDemand(), job, [True, False] * 10)
    assert result.cost == pytest.approx(3.5 * OD) and result.finish == pytest.approx(3.5)
    assert set(result.choices) == {"on-demand"} and result.restarts == 1


def test_spot_failover_waits_unless_on_demand_is_allowed():
    job = ReplayJob(work=1.0)
    avail = [False, True, False, True, True]
    waits = run(SpotFailover(), job, avail)
    assert waits.choices == ("wait", "spot", "wait", "spot")
    assert waits.finish == pytest.approx(2.0) and waits.preemptions == 1
    assert run(SpotFailover(), job, [False] * 5).finish is None  # spot never came
    falls_back = run(SpotFailover(allow_on_demand=True), job, avail)
    assert falls_back.choices == ("on-demand", "on-demand")  # and stays there
    assert falls_back.cost == pytest.approx(1.0 * OD)


# ---- registry ----


def test_registry_builds_each_policy_by_name_with_parameters():
    assert set(POLICIES) == {
        "deadline-aware", "uniform-progress", "greedy", "on-demand", "spot-failover",
    }  # fmt: skip
    for name in POLICIES:
        policy = make_policy(name)
        assert policy.name == name and policy.describe()["name"] == name
    ours = make_policy("deadline-aware", switch_margin=1.5, resume_margin=4.0)
    assert ours.describe() == {
        "name": "deadline-aware",
        "switch_margin": 1.5,
        "resume_margin": 4.0,
        "wait_for_spot": True,
        "pace": DeadlineAware().pace,
        "reserve_rate": DeadlineAware().reserve_rate,
    }
    with pytest.raises(TypeError):
        POLICIES["mine"] = OnDemand  # type: ignore[index]


def test_registry_errors_say_what_was_meant():
    with pytest.raises(ValueError, match=r"unknown spot policy 'deadline-awar'.*deadline-aware"):
        make_policy("deadline-awar")
    with pytest.raises(
        ValueError, match=r"no parameter 'switch_margn'.*did you mean switch_margin"
    ):
        make_policy("deadline-aware", switch_margn=2.0)
    with pytest.raises(ValueError, match="accepts: none"):
        make_policy("on-demand", allow_on_demand=True)
    with pytest.raises(ValueError, match="resume_margin"):
        make_policy("deadline-aware", resume_margin=2.0)


# ---- replayer ----


def test_replay_loses_work_back_to_the_last_checkpoint():
    job = ReplayJob(work=3.0, restart_overhead=0.5, checkpoint_interval=0.75)
    avail = [True] * 5 + [False] + [True] * 10
    result = run(SpotFailover(), job, avail)
    # Start (0.5 h), 2.0 h done by t=2.5, preempted: back to the 1.5 h checkpoint.
    # Restart at t=3.0 (0.5 h), 1.5 h more: done at t=5.0.
    assert result.lost_work == pytest.approx(0.5) and result.preemptions == 1
    assert result.finish == pytest.approx(5.0) and result.restarts == 2
    assert result.spot_hours == pytest.approx(4.5) and result.cost == pytest.approx(4.5 * SPOT)


def test_replay_refuses_impossible_answers():
    class Reckless:
        name = "reckless"

        def choose(self, state):
            return "spot"

        def describe(self):
            return {"name": self.name}

    with pytest.raises(ValueError, match="reckless chose spot"):
        run(Reckless(), ReplayJob(work=1.0), [True, False])

    class Confused(Reckless):
        name = "confused"

        def choose(self, state):
            return "preemptible"

    with pytest.raises(ValueError, match="confused answered 'preemptible'"):
        run(Confused(), ReplayJob(work=1.0), [True])


def test_seeded_synthetic_trace_deadline_aware_beats_on_demand():
    """One deterministic comparison on a synthetic Markov availability trace (seeded):
    spot runs of about 3 h, outages of about 1.5 h, a 24 h job due in 30 h."""
    rng = random.Random(20240416)
    avail, up = [], True
    for _ in range(400):
        avail.append(up)
        if rng.random() < (0.033 if up else 0.067):
            up = not up
    job = ReplayJob(work=24.0, deadline=30.0, restart_overhead=0.2, checkpoint_interval=0.5)
    prices = dict(step_hours=0.1, spot_price=0.9, on_demand_price=3.06)
    ours = replay(DeadlineAware(), job, avail, **prices)
    on_demand = replay(OnDemand(), job, avail, **prices)
    assert ours.deadline_met and ours.preemptions > 0
    assert ours.cost < on_demand.cost
    for baseline in (Greedy(), UniformProgress()):
        assert replay(baseline, job, avail, **prices).deadline_met
