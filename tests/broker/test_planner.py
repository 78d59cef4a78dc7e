"""The planner against a brute-force search written one offer at a time."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.planner import cost
from broker.planner.plan import plan, plan_many
from broker.spec import (
    Amount,
    Budget,
    Checkpoint,
    DataInput,
    GpuAsk,
    JobSpec,
    Requirements,
    RuntimeEstimate,
)
from pricing.egress import egress_price
from pricing.gpus import find_gpu, host_floor
from pricing.query import OfferIndex
from pricing.regions import Place, country_of
from pricing.synthetic import synthetic_offers
from pricing.table import OfferTable

NOW = datetime(2026, 11, 1, tzinfo=UTC)
CATALOGS = {
    seed: OfferIndex(OfferTable.from_frame(synthetic_offers(1000, seed=seed))) for seed in range(4)
}


def host_fits(req, ask: GpuAsk, offer: dict) -> bool:
    """The manifest's vCPUs and memory, or where one is not stated the GPU's host floor
    times the count (an on-prem node, or an unknown figure, passes a floor)."""
    floor = host_floor(ask.gpu) if ask.gpu else None
    for asked, per_gpu, have in (
        (req.cpus, floor and floor.vcpus_per_gpu, offer["vcpus"]),
        (req.memory_gib, floor and floor.memory_gib_per_gpu, offer["memory_gib"]),
    ):
        if asked is not None:
            if not asked.admits(have):
                return False
        elif per_gpu and offer["cloud"] != "onprem" and not math.isnan(have):
            if have < per_gpu * ask.count:
                return False
    return True


def brute_force(job: JobSpec, index: OfferIndex) -> list[tuple[float, float, int, int, bool]]:
    """(total, hours, alternative, row, spot) of every feasible candidate, scalar code only."""
    req = job.requirements
    rows = index.offers.records()
    asks = req.accelerators or (GpuAsk("", 0.0),)
    speed = [find_gpu(a.gpu).relative_throughput if a.gpu else 1.0 for a in asks]
    out = []
    for position, offer in enumerate(rows):
        for alt, ask in enumerate(asks):
            if offer["accelerator"] != ask.gpu or (
                ask.gpu and offer["accelerator_count"] != ask.count
            ):
                continue
            country = country_of(offer["cloud"], offer["region"])
            if req.clouds and offer["cloud"] not in req.clouds:
                continue
            if req.exclude_clouds and offer["cloud"] in req.exclude_clouds:
                continue
            if req.regions and not any(fnmatchcase(offer["region"], p) for p in req.regions):
                continue
            if req.countries and country not in req.countries:
                continue
            if not host_fits(req, ask, offer):
                continue
            if req.interconnect and req.interconnect not in offer["interconnect"].split("+"):
                continue
            markets = {"never": [False], "only": [True], "prefer": [False, True]}[req.spot]
            for spot in markets:
                unit = offer["price_spot"] if spot else offer["price_on_demand"]
                if math.isnan(unit):
                    continue
                price = unit * req.nodes
                if req.max_price_per_hour is not None and price > req.max_price_per_hour:
                    continue
                here = Place(offer["cloud"], offer["region"], country=country)
                run = job.runtime.estimate_hours * speed[0] / speed[alt]
                staging = egress_in = 0.0
                for item in job.data:
                    src = Place(item.location.cloud, item.location.region)
                    move = egress_price(src, here)
                    staging += cost.copy_hours(item.size_gb, move.scope)
                    egress_in += item.size_gb * move.price_per_gb
                restore_h = restore_usd = write_usd = 0.0
                ck = job.checkpoint
                if ck and ck.location and ck.size_gb:
                    # docs/planner.md, "Checkpoint egress"
                    bucket = Place(ck.location.cloud, ck.location.region)
                    back = egress_price(bucket, here)
                    if ck.saved:  # brought in once
                        staging += cost.copy_hours(ck.size_gb, back.scope)
                        egress_in += ck.size_gb * back.price_per_gb
                    if ck.moves_with_job:  # kept where the job runs: restores local
                        restore_h = cost.copy_hours(ck.size_gb, "same_region")
                    else:
                        restore_h = cost.copy_hours(ck.size_gb, back.scope)
                        restore_usd = ck.size_gb * back.price_per_gb
                        write_usd = ck.size_gb * egress_price(here, bucket).price_per_gb
                rate = 0.0
                if spot:
                    known = offer["spot_interruption_rate"]
                    rate = (
                        known
                        if not math.isnan(known)
                        else cost.DEFAULT_INTERRUPTION_RATE[offer["cloud"]]
                    ) * req.nodes  # a reclaim of any node stops a gang: N nodes' rates
                lost = run / 2 if ck is None else min(ck.interval_minutes / 120, run / 2)
                per = lost + cost.RESTART_HOURS + restore_h
                work = run + staging

                def hours(r: float, work=work, per=per) -> float:
                    return work / (1 - r * per) if r * per < 1 else math.inf

                total_h = hours(rate)
                if math.isinf(total_h):
                    continue
                # each interruption restores, and writes one more checkpoint on its notice
                usd = price * total_h + egress_in + rate * total_h * (restore_usd + write_usd)
                if ck and ck.location:
                    usd += total_h * 60 / ck.interval_minutes * write_usd
                deadline = job.runtime.deadline_at(NOW)
                # a spot policy owns a steered job's deadline (docs/planner.md)
                steered = job.requirements.spot == "prefer" and deadline is not None
                if (
                    deadline
                    and not (spot and steered)
                    and hours(rate * cost.DEADLINE_RISK_FACTOR)
                    > (deadline - NOW).total_seconds() / 3600
                ):
                    continue
                if job.budget.max_cost is not None and usd > job.budget.max_cost:
                    continue
                out.append((usd, total_h, alt, position, spot))
    return sorted(out, key=lambda c: (c[0], c[1], c[2], c[3], c[4]))


places = st.sampled_from(
    [Place("aws", "us-east-1"), Place("gcp", "europe-west4"), Place("azure", "japaneast")]
)
gpus = st.sampled_from(["A100", "H100", "T4", "L4", "A10G"])
asks = st.lists(
    st.builds(GpuAsk, gpus, st.sampled_from([1.0, 2.0, 4.0, 8.0])),
    min_size=0,
    max_size=3,
    unique=True,
)
requirements = st.builds(
    Requirements,
    accelerators=asks.map(tuple),
    cpus=st.none()
    | st.none()
    | st.builds(Amount, st.sampled_from([4.0, 16.0, 48.0]), st.booleans()),
    memory_gib=st.none()
    | st.none()
    | st.builds(Amount, st.sampled_from([32.0, 128.0]), st.just(True)),
    nodes=st.integers(1, 3),
    interconnect=st.sampled_from([None, None, "nvlink"]),
    clouds=st.sampled_from([(), (), ("aws",), ("gcp", "azure")]),
    exclude_clouds=st.sampled_from([(), (), ("azure",)]),
    regions=st.sampled_from([(), (), ("us-*",), ("europe-*", "eu-*")]),
    countries=st.sampled_from([(), (), ("US",), ("DE", "NL", "JP")]),
    spot=st.sampled_from(["never", "prefer", "only"]),
    max_price_per_hour=st.sampled_from([None, None, 5.0, 40.0]),
)
jobs = st.builds(
    JobSpec,
    name=st.just("job"),
    team=st.just("team"),
    requirements=requirements,
    runtime=st.builds(
        RuntimeEstimate,
        st.sampled_from([0.5, 3.0, 24.0]),
        st.sampled_from([None, timedelta(hours=4), timedelta(hours=60)]),
    ),
    checkpoint=st.none()
    | st.builds(
        Checkpoint,
        st.just("s3://b/"),
        st.sampled_from([10.0, 60.0]),
        st.sampled_from([0.0, 50.0]),
        st.none() | places,
        st.booleans(),  # moves with the job (a store per place) or stays in its bucket
        st.booleans(),  # saved: the next attempt restores it
    ),
    data=st.lists(
        st.builds(DataInput, st.just("s3://d/"), st.sampled_from([10.0, 500.0]), places), max_size=2
    ).map(tuple),
    budget=st.builds(Budget, st.sampled_from([None, None, 20.0, 400.0])),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs, st.sampled_from(sorted(CATALOGS)))
def test_plan_equals_brute_force(job: JobSpec, seed: int) -> None:
    index = CATALOGS[seed]
    decision = plan(job, index, NOW, top=10**6)
    expected = brute_force(job, index)
    got = [(p.expected_cost, p.expected_hours) for p in decision.placements]
    assert len(got) == len(expected)
    for (usd, hours), reference in zip(got, expected, strict=True):
        assert usd == pytest.approx(reference[0], rel=1e-9)
        assert hours == pytest.approx(reference[1], rel=1e-9)
    for top in (1, 3):  # the top k alone is the first k of the full ranking
        short = plan(job, index, NOW, top=top).placements
        assert [(p.expected_cost, p.expected_hours, p.instance_type, p.market) for p in short] == [
            (p.expected_cost, p.expected_hours, p.instance_type, p.market)
            for p in decision.placements[:top]
        ]
    if expected:  # nothing feasible is cheaper than the top placement
        assert decision.placements[0].expected_cost == pytest.approx(expected[0][0], rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(jobs, st.sampled_from(sorted(CATALOGS)))
def test_top_placement_satisfies_every_constraint(job: JobSpec, seed: int) -> None:
    index = CATALOGS[seed]
    decision = plan(job, index, NOW)
    req = job.requirements
    for p in decision.placements:
        if req.accelerators:
            assert (p.accelerator, p.accelerator_count) in {
                (a.gpu, a.count) for a in req.accelerators
            }
        else:
            assert p.accelerator == ""
        assert not req.clouds or p.cloud in req.clouds
        assert p.cloud not in req.exclude_clouds
        assert not req.regions or any(fnmatchcase(p.region, g) for g in req.regions)
        assert not req.countries or country_of(p.cloud, p.region) in req.countries
        assert req.spot != "never" or p.market == "on-demand"
        assert req.spot != "only" or p.market == "spot"
        assert req.max_price_per_hour is None or p.price_per_hour <= req.max_price_per_hour
        assert job.budget.max_cost is None or p.expected_cost <= job.budget.max_cost
        assert p.nodes == req.nodes
    costs = [p.expected_cost for p in decision.placements]
    assert costs == sorted(costs)
    assert [p.rank for p in decision.placements] == list(range(1, len(costs) + 1))


@settings(max_examples=100, deadline=None)
@given(jobs, st.sampled_from(sorted(CATALOGS)))
def test_every_figure_is_in_its_field(job: JobSpec, seed: int) -> None:
    """Placements are built from columns, by position (broker.planner.assemble): each
    figure must land in its own field, and the offer's columns must be its own."""
    index = CATALOGS[seed]
    offers = index.offers.records()
    asks = job.requirements.accelerators
    speed = {(a.gpu, a.count): find_gpu(a.gpu).relative_throughput for a in asks}
    for p in plan(job, index, NOW, top=20).placements:
        c = p.cost
        factor = 1.0
        if asks:  # the estimate is for the first choice, scaled by throughput
            factor = speed[asks[0].gpu, asks[0].count] / speed[p.accelerator, p.accelerator_count]
        assert c.run_hours == pytest.approx(job.runtime.estimate_hours * factor)
        assert p.expected_cost == c.total == pytest.approx(c.compute + c.egress, rel=1e-12)
        assert c.compute == pytest.approx(p.price_per_hour * p.expected_hours, rel=1e-12)
        assert c.interruption_overhead == pytest.approx(p.price_per_hour * c.overhead_hours)
        assert p.expected_hours == pytest.approx(c.run_hours + c.staging_hours + c.overhead_hours)
        assert c.expected_interruptions == pytest.approx(c.interruption_rate * p.expected_hours)
        assert c.assumptions[0].startswith(f"runtime estimate {job.runtime.estimate_hours:g} h")
        assert p.nodes == job.requirements.nodes
        if p.market == "on-demand":
            assert (c.interruption_rate, c.interruption_rate_source, c.overhead_hours) == (0, "", 0)
        else:
            assert p.market == "spot"
            assert c.interruption_rate_source in ("catalog", f"default:{p.cloud}")
            assert any(note.startswith(f"spot: {c.interruption_rate:g} ") for note in c.assumptions)
        unit = "price_spot" if p.market == "spot" else "price_on_demand"
        assert any(
            (o["cloud"], o["region"], o["zone"], o["instance_type"], o["accelerator"])
            == (p.cloud, p.region, p.zone, p.instance_type, p.accelerator)
            and (o["accelerator_count"], o["source"], o["as_of"])
            == (p.accelerator_count, p.price_source, p.price_as_of)
            and o[unit] * p.nodes == p.price_per_hour
            for o in offers
        )


@settings(max_examples=50, deadline=None)
@given(st.lists(jobs, min_size=1, max_size=6), st.sampled_from(sorted(CATALOGS)))
def test_batch_equals_one_by_one_and_is_deterministic(batch, seed) -> None:
    index = CATALOGS[seed]
    together = plan_many(batch, index, NOW)
    alone = [plan(job, index, NOW) for job in batch]
    assert together == alone
    assert plan_many(batch, index, NOW) == together


@settings(max_examples=30, deadline=None)
@given(
    st.lists(jobs, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"])), max_size=12),
    st.sampled_from(sorted(CATALOGS)),
)
def test_copies_of_a_job_under_other_names_get_its_plan_under_theirs(batch, copies, seed):
    """Jobs that differ only in name and team share one plan: each copy's decision is
    the one it gets planned alone, under its own name."""
    index = CATALOGS[seed]
    named = [
        replace(batch[at % len(batch)], name=f"copy-{n}", team=team)
        for n, (at, team) in enumerate(copies)
    ]
    together = plan_many([*batch, *named], index, NOW)
    assert together == [plan(job, index, NOW) for job in [*batch, *named]]
    assert [d.job for d in together] == [job.name for job in [*batch, *named]]


@settings(max_examples=30, deadline=None)
@given(st.lists(jobs, min_size=2, max_size=8), st.sampled_from(sorted(CATALOGS)))
def test_small_chunks_give_the_same_decisions(batch, seed) -> None:
    """Jobs planned a few at a time (the memory bound of big batches) as all at once."""
    index = CATALOGS[seed]
    assert plan_many(batch, index, NOW, chunk_pairs=50) == plan_many(batch, index, NOW)


def test_rejections_account_for_every_offer() -> None:
    index = CATALOGS[0]
    job = JobSpec(
        "j", "t", Requirements(accelerators=(GpuAsk("A100", 8.0),), regions=("us-*",), spot="never")
    )
    decision = plan(job, index, NOW, top=10**6)
    removed_before_markets = sum(
        r.count for r in decision.rejected if not r.reason.startswith(("no ", "over "))
    )
    assert (
        removed_before_markets
        + len(decision.placements)
        + sum(r.count for r in decision.rejected if r.reason.startswith(("no ", "over ")))
        == decision.candidates
    )
    assert decision.rejected[0].reason == "GPU model is not A100:8"


def test_faster_gpu_can_be_cheaper_overall() -> None:
    """H100 costs more per hour than A100 but finishes 2.5x sooner."""
    import pandas as pd

    rows = synthetic_offers(2, seed=1).iloc[:2].copy()
    rows["cloud"], rows["region"] = "aws", "us-east-1"
    rows["accelerator"] = ["A100", "H100"]
    rows["accelerator_count"] = 8.0
    rows["price_on_demand"] = [20.0, 40.0]
    rows["vcpus"], rows["memory_gib"] = 192.0, 2048.0  # hosts fit for eight of either GPU
    index = OfferIndex(OfferTable.from_frame(pd.DataFrame(rows)))
    job = JobSpec(
        "j",
        "t",
        Requirements(accelerators=(GpuAsk("A100", 8.0), GpuAsk("H100", 8.0))),
        runtime=RuntimeEstimate(estimate_hours=10),
    )
    best = plan(job, index, NOW).placements[0]
    assert best.accelerator == "H100"
    assert best.expected_hours == pytest.approx(10 / 2.5)
    assert best.expected_cost == pytest.approx(40.0 * 4)


def test_batch_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    job = JobSpec("j", "t", Requirements(accelerators=(GpuAsk("A100", 8.0),)))
    assert gc.isenabled()
    plan_many([job], CATALOGS[0], NOW)
    assert gc.isenabled()
    gc.disable()
    try:
        plan_many([job], CATALOGS[0], NOW)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_placements_built_by_columns_equal_those_built_one_by_one() -> None:
    """broker.planner.assemble sets the fields of its frozen dataclasses column by column."""
    from dataclasses import FrozenInstanceError, asdict

    from broker.planner.assemble import _build
    from broker.planner.decision import CostEstimate, Rejection

    rows = [
        dict(
            compute=float(i),
            interruption_overhead=0.5,
            egress=2.0 * i,
            total=3.0 * i,
            run_hours=1.0,
            staging_hours=0.25,
            overhead_hours=0.0,
            expected_interruptions=0.0,
            interruption_rate=0.0,
            interruption_rate_source="",
            assumptions=(f"note {i}",),
        )
        for i in range(3)
    ]
    built = _build(CostEstimate, **{name: [r[name] for r in rows] for name in rows[0]})
    assert built == [CostEstimate(**r) for r in rows]
    assert [asdict(b) for b in built] == rows and hash(built[1]) == hash(CostEstimate(**rows[1]))
    with pytest.raises(FrozenInstanceError):
        built[0].total = 1.0
    with pytest.raises(TypeError):  # every field must be given
        _build(Rejection, reason=["r"])


@pytest.mark.parametrize("hours", [2.0, 40.0])
def test_a_checkpoint_that_moves_with_the_job_costs_one_copy_however_long_it_runs(hours):
    """docs/planner.md, "Checkpoint egress": kept where the job runs, a saved 50 GB
    checkpoint crosses once (to us-west-2 from us-east-1), and no write goes back; kept
    in a us-east-1 bucket, every write (one per 30 minutes) goes back there."""
    import pandas as pd

    rows = synthetic_offers(1, seed=1).iloc[:1].copy()
    rows["cloud"], rows["region"], rows["zone"] = "aws", "us-west-2", ""
    rows["accelerator"], rows["accelerator_count"] = "A100", 8.0
    rows["price_on_demand"], rows["price_spot"] = 20.0, float("nan")
    rows["vcpus"], rows["memory_gib"] = 96.0, 1152.0  # p4d: above the A100 host floor
    index = OfferIndex(OfferTable.from_frame(pd.DataFrame(rows)))
    east = Place("aws", "us-east-1")
    per_gb = egress_price(east, Place("aws", "us-west-2")).price_per_gb

    def egress(moves: bool) -> tuple[float, float]:
        ckpt = Checkpoint("s3://b/", 30.0, 50.0, east, moves_with_job=moves, saved=True)
        job = JobSpec("j", "t", Requirements(accelerators=(GpuAsk("A100", 8.0),)),
                      runtime=RuntimeEstimate(hours), checkpoint=ckpt)  # fmt: skip
        best = plan(job, index, NOW).placements[0]
        return best.cost.egress, best.expected_hours  # hours: the run and the copy in

    back = egress_price(Place("aws", "us-west-2"), east).price_per_gb
    assert egress(True)[0] == pytest.approx(50 * per_gb)
    usd, run = egress(False)
    assert usd == pytest.approx(50 * per_gb + run * 2 * 50 * back)
