"""The Prometheus metrics against a state built by real submits and runs on the sandbox:
the exposition text is fetched over HTTP from the real endpoint, parsed with
`prometheus_client.parser`, and every figure is checked against what the store records
(depth per state, spend equal to the ledger's exact sum, histogram counts, launches and
their failures by error class, reclaims, recoveries, checkpoint bytes, pool use)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from broker.metrics.server import MetricsServer, read_only_state, serve_metrics
from broker.state import AttemptState, JobState
from broker.state.model import total
from tests.broker.sandbox import sandbox, submit_text
from tests.broker.test_recovery import finish  # passes until the job ends
from tests.waiting import wait_ended, wait_until

REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def spot_job(name: str, team: str, queue: str, steps: int) -> str:
    return f"""\
apiVersion: broker/v1
name: {name}
team: {team}
queue: {queue}
resources:
  accelerators: T4:1
placement:
  clouds: [aws, gcp]
  spot: only
run:
  workdir: {REPO / "examples"}
  command: python3 train.py --steps {steps} --checkpoint-every 50 --step-seconds 0.002
runtime:
  estimate_hours: 1
checkpoint:
  uri: s3://acme-ckpt/{name}/
  interval_minutes: 30
  size_gb: 20
"""


def scrape(server: MetricsServer) -> Samples:
    """GET /metrics and parse it: {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.url, timeout=10) as response:
        text = response.read().decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def picked(samples: Samples, name: str, **labels: str) -> dict[tuple, float]:
    """The samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return {key: v for (n, key), v in samples.items() if n == name and want <= set(key)}


def one(samples: Samples, name: str, **labels: str) -> float:
    (value,) = picked(samples, name, **labels).values()
    return value


@pytest.fixture
def served(tmp_path) -> Iterator[tuple]:
    with sandbox(tmp_path) as rt:
        server = serve_metrics(0, "127.0.0.1", read_only_state(rt.store.path), {})
        try:
            yield rt, server
        finally:
            server.close()


def test_the_metrics_equal_what_the_state_records(served):
    rt, server = served
    empty = scrape(server)
    assert picked(empty, "broker_jobs") == {} and one(empty, "broker_recovery_seconds_count") == 0

    # A spot job runs (the gauges see it), is reclaimed after a checkpoint, and resumes.
    survivor = submit_text(rt, "survivor", spot_job("survivor", "nlp", "research", 3000))
    rt.controller.run_pass()
    (first,) = rt.store.attempts(survivor)
    here = first.placed_on
    running = scrape(server)
    assert one(running, "broker_running_jobs", cloud=here.cloud, market="spot") == 1
    assert one(running, "broker_running_gpus", cloud=here.cloud, market="spot") == here.gpus == 1
    assert one(running, "broker_jobs", team="nlp", queue="research", state="running") == 1
    folder = Path(rt.provider.checkpoint_store(survivor, here.cloud, here.region))
    assert wait_until((folder / "checkpoint.json").exists)
    (instance,) = rt.store.instances(attempt_id=first.id)
    assert rt.provider.interrupt(instance.provider_id) is not None
    wait_ended(rt.provider, instance.provider_id, 30)
    finish(rt, survivor)

    # A controller killed between recording an attempt and launching it: when the next
    # one launches, that cloud sells no spot any more (a played crunch), so the launch
    # fails with InsufficientCapacity, and the job is placed again elsewhere.
    late = submit_text(rt, "late", spot_job("late", "vision", "batch", 20))
    assert rt.store.transition(late, JobState.PLANNED, "planned", expect=JobState.QUEUED)
    crunched = here.cloud
    rt.store.start_attempt(late, replace(here, market="spot"))
    rt.provider.crunch_spot(crunched)
    finish(rt, late)
    failed, relaunched = rt.store.attempts(late)
    assert failed.state is AttemptState.FAILED and failed.running_at is None
    assert failed.reason.startswith("InsufficientCapacity: ")
    assert relaunched.placed_on.cloud != crunched

    # Two more wait in the queue; one of them is cancelled there.
    waiting = submit_text(rt, "waiting", spot_job("waiting", "vision", "batch", 20))
    dropped = submit_text(rt, "dropped", spot_job("dropped", "vision", "batch", 20))
    assert rt.controller.cancel(dropped)

    found = scrape(server)
    jobs = picked(found, "broker_jobs")
    expected = {("nlp", "research", "succeeded"): 1, ("vision", "batch", "succeeded"): 1,
                ("vision", "batch", "queued"): 1, ("vision", "batch", "cancelled"): 1}  # fmt: skip
    assert {(dict(k)["team"], dict(k)["queue"], dict(k)["state"]): v for k, v in jobs.items()} == (
        expected
    )
    assert rt.store.job(waiting).state is JobState.QUEUED
    assert picked(found, "broker_running_jobs") == {}

    # Spend: the ledger's exact sum per team, cloud and market, to the float's precision.
    ledger = rt.store.ledger()
    assert ledger
    sums: dict[tuple[str, str, str], list[Decimal]] = {}
    for entry in ledger:
        sums.setdefault((entry.team, entry.cloud, entry.market), []).append(entry.amount_usd)
    spend = picked(found, "broker_spend_usd_total")
    assert len(spend) == len(sums)
    for (team, cloud, market), amounts in sums.items():
        value = one(found, "broker_spend_usd_total", team=team, cloud=cloud, market=market)
        assert value == float(total(amounts)) and value > 0

    # GPU-hours billed, per team: every ended attempt's billed hours x its GPUs.
    attempts = rt.store.attempts()
    for team in ("nlp", "vision"):
        ids = {j.id for j in rt.store.jobs(team=team)}
        billed = sum(float(a.billed_hours or 0) * a.placed_on.gpus for a in attempts
                     if a.job_id in ids)  # fmt: skip
        assert sum(picked(found, "broker_gpu_hours_total", team=team).values()) == pytest.approx(
            billed
        )
        assert billed > 0

    # Queue waits: one observation per started attempt; buckets cumulative up to +Inf.
    assert one(found, "broker_queue_wait_seconds_count", team="nlp", queue="research") == 2
    assert one(found, "broker_queue_wait_seconds_count", team="vision", queue="batch") == 2
    buckets = picked(found, "broker_queue_wait_seconds_bucket", team="vision", queue="batch")
    ordered = sorted(buckets.items(), key=lambda kv: float(dict(kv[0])["le"]))
    counts = [v for _, v in ordered]
    assert counts == sorted(counts) and counts[-1] == 2 and dict(ordered[-1][0])["le"] == "+Inf"

    # Launches and failures by error class; the reclaim and its recovery; the bytes moved.
    assert sum(picked(found, "broker_launches_total").values()) == len(attempts) == 4
    assert one(found, "broker_launch_failures_total", cloud=crunched) == 1
    assert one(found, "broker_launch_failures_total", error_class="InsufficientCapacity") == 1
    assert one(found, "broker_interruptions_total", kind="reclaim", cloud=here.cloud,
               region=here.region) == 1  # fmt: skip
    assert picked(found, "broker_interruptions_total", kind="preemption") == {}
    after = rt.store.attempts(survivor)[1]
    recovered = (after.running_at - first_ended(rt, first.id)).total_seconds()
    assert one(found, "broker_recovery_seconds_count") == 1
    assert one(found, "broker_recovery_seconds_sum") == pytest.approx(recovered)
    migration = rt.store.migration(after.id)  # it resumed elsewhere: the checkpoint moved
    assert migration is not None and migration["bytes"] > 0
    assert one(found, "broker_checkpoint_moved_bytes_total") == migration["bytes"]


def first_ended(rt, attempt_id: str):
    ended = rt.store.attempt(attempt_id).ended_at
    assert ended is not None
    return ended


def test_a_pools_allocated_gpus_and_utilisation(tmp_path):
    with sandbox(tmp_path, pools=True) as rt:
        pools = {pool: gpus for (_cloud, pool), gpus in rt.controller.pool_gpus.items()}
        server = serve_metrics(0, "127.0.0.1", read_only_state(rt.store.path), pools)
        try:
            text = (REPO / "examples" / "demo" / "onprem.yaml").read_text()
            text = text.replace("steps 30", "steps 3000").replace(
                "workdir: ..", f"workdir: {REPO / 'examples'}"
            )
            job = submit_text(rt, "embed-lab", text)
            rt.controller.run_pass()
            (attempt,) = rt.store.attempts(job)
            pool = attempt.placed_on.pool
            found = scrape(server)
            assert pool and one(found, "broker_pool_gpus", pool=pool) == pools[pool] == 16
            assert one(found, "broker_pool_allocated_gpus", pool=pool) == 8
            assert one(found, "broker_pool_utilization_ratio", pool=pool) == 0.5
            idle = {p for p in pools if p != pool}
            assert all(one(found, "broker_pool_allocated_gpus", pool=p) == 0 for p in idle)
            assert one(found, "broker_running_jobs", cloud="onprem", pool=pool) == 1
            # The broker stops it to make room (the queue policy's preemption): a
            # preemption of that place, not a reclaim, and its GPUs are free again.
            rt.controller.preempt(job, "preempted by a higher-priority job")
            assert rt.store.attempt(attempt.id).state is AttemptState.INTERRUPTED
            found = scrape(server)
            place = {"cloud": "onprem", "region": attempt.placed_on.region, "pool": pool}
            assert one(found, "broker_interruptions_total", kind="preemption", **place) == 1
            assert picked(found, "broker_interruptions_total", kind="reclaim") == {}
            assert one(found, "broker_pool_allocated_gpus", pool=pool) == 0
            assert one(found, "broker_pool_utilization_ratio", pool=pool) == 0
            assert one(found, "broker_jobs", team="vision", state="queued") == 1
        finally:
            server.close()
