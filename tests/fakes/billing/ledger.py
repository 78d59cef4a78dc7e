"""A small fixed ledger, written through the StateStore API, whose every figure is known.

attempt  job (team, queue)            where, GPUs                    market    $/h     h  ends
a-..05   nlp/llama (research)         aws us-east-1, 8 x H100        spot      32.7726 3  11-01 03*
a-..06   nlp/llama                    aws us-west-2, 8 x H100        spot      30      2  11-01 06
a-..07   vision/detector (default)    gcp europe-west4, 1 x L4       on-demand 0.85    4  11-02 14
a-..08   vision/embed (default)       onprem-us-east, 8 x A100-80GB  on-demand 8.8     5  11-02 17
a-..09   research/ablation (research) azure eastus, 1 x A100-80GB    spot      1.4693  3  12-01 01
(ends: month-day hour, UTC. * interrupted, with a checkpoint recorded at 02:00: a third of
it is lost work.)

Egress: each llama attempt copies a 100 GB input from gcp us-central1 (0.12 $/GB,
billed by GCP); the second restores a 40 GB checkpoint from aws us-east-1 (0.02 $/GB).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from broker.clock import FixedClock
from broker.state import JobState, StateStore
from tests.fakes.specs import job_spec, placed

HERE = Path(__file__).parent
T0 = datetime(2026, 11, 1, tzinfo=UTC)
ATTEMPTS = {
    "llama-1": "a-000000000005",
    "llama-2": "a-000000000006",
    "detector": "a-000000000007",
    "embed": "a-000000000008",
    "ablation": "a-000000000009",
}
INSTANCES = {
    "llama-1": "us-east-1/i-0a1b2c3d4e5f60001",
    "llama-2": "us-west-2/i-0a1b2c3d4e5f60002",
    "detector": "europe-west4-a/broker-a-000000000007",
    "embed": "onprem-us-east/lab-a100-node-0",
    "ablation": "broker-rg/broker-a-000000000009",
}
H100 = {"accelerator": "H100", "accelerator_count": 8.0, "nodes": 1}
PLACEMENTS = {
    "llama-1": {"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", **H100},
    "llama-2": {"cloud": "aws", "region": "us-west-2", "instance_type": "p5.48xlarge", **H100},
    "detector": {
        "cloud": "gcp", "region": "europe-west4", "instance_type": "g2-standard-4",
        "accelerator": "L4", "accelerator_count": 1.0, "nodes": 1,
    },
    "embed": {
        "cloud": "onprem", "region": "onprem-us-east", "instance_type": "lab-a100-node",
        "accelerator": "A100-80GB", "accelerator_count": 8.0, "nodes": 1,
    },
    "ablation": {
        "cloud": "azure", "region": "eastus", "instance_type": "Standard_NC24ads_A100_v4",
        "accelerator": "A100-80GB", "accelerator_count": 1.0, "nodes": 1,
    },
}  # fmt: skip

# The offers in force for savings: cheapest on demand per (cloud, GPUs) is marked *.
CATALOG_ROWS = (
    "aws,us-east-1,,p5.48xlarge,H100,8,80,192,2048,nvlink+efa,98.32,32.7726,,,test,2026-10-30",
    "aws,us-west-2,,p5.48xlarge,H100,8,80,192,2048,nvlink+efa,90,30,,,test,2026-10-30",  # *
    "aws,us-east-1,,p4de.24xlarge,A100-80GB,8,80,96,1152,nvlink+efa,40.96,,,,test,2026-10-30",
    "gcp,us-central1,,a2-ultragpu-8g,A100-80GB,8,80,96,1360,nvlink,40.22,,,,test,2026-10-30",  # *
    "gcp,europe-west4,,g2-standard-4,L4,1,24,4,16,,0.85,0.3,,,test,2026-10-30",
    "gcp,us-central1,,g2-standard-4,L4,1,24,4,16,,0.7,0.25,,,test,2026-10-30",  # *
    "azure,eastus,,Standard_NC24ads_A100_v4,A100-80GB,1,80,24,220,,3.67,1.4693,,,test,2026-10-30",
    "azure,westus2,,Standard_NC24ads_A100_v4,A100-80GB,1,80,24,220,,3.4,1.5,,,test,2026-10-30",  # *
)

# Hand-computed from the table above (the module docstring), every figure exact.
TOTAL = Decimal("234.9257")
BY = {
    "team": {"nlp": "183.1178", "vision": "47.4", "research": "4.4079"},
    "job": {
        "nlp/llama": "183.1178", "vision/detector": "3.4", "vision/embed": "44",
        "research/ablation": "4.4079",
    },
    "queue": {"research": "187.5257", "default": "47.4"},
    "cloud": {"aws": "159.1178", "gcp": "27.4", "onprem": "44", "azure": "4.4079"},
    "region": {
        "us-east-1": "99.1178", "us-west-2": "60", "us-central1": "24", "europe-west4": "3.4",
        "onprem-us-east": "44", "eastus": "4.4079",
    },
    "gpu": {"H100": "183.1178", "L4": "3.4", "A100-80GB": "48.4079"},
    "market": {"spot": "187.5257", "on-demand": "47.4"},
    "kind": {"compute": "166.1257", "egress": "24.8", "onprem": "44"},
    "day": {"2026-11-01": "183.1178", "2026-11-02": "47.4", "2026-12-01": "4.4079"},
    "month": {"2026-11": "230.5178", "2026-12": "4.4079"},
}  # fmt: skip


def counter_ids():
    numbers = itertools.count(1)
    return lambda: f"{next(numbers):012x}"


def _attempt(store: StateStore, clock: FixedClock, job: str, key: str, price: str, market: str):
    store.transition(job, JobState.PLANNED)
    where = PLACEMENTS[key]
    attempt = store.start_attempt(job, placed(where, price, market, "test", "2026-10-30"))
    assert attempt == ATTEMPTS[key]
    store.attempt_running(
        attempt, {"provider_id": INSTANCES[key], "tags": {"broker-attempt": attempt}}
    )
    return attempt


def build(path: Path) -> StateStore:
    """A fresh state file at `path` holding the fixed ledger; the store, open."""
    clock = FixedClock(T0)
    store = StateStore.open(path, clock, new_id=counter_ids())
    llama = store.submit(job_spec("llama", "nlp", queue="research"), "llama", "d1").job_id
    gcp_only = job_spec("detector", "vision", clouds=("gcp",))
    detector = store.submit(gcp_only, "detector", "d2").job_id
    embed = store.submit(job_spec("embed", "vision"), "embed", "d3").job_id
    ablation_spec = job_spec("ablation", "research", queue="research")
    ablation = store.submit(ablation_spec, "ablation", "d4").job_id
    input_move = {
        "kind": "egress", "quantity": 100, "unit_price_usd": "0.12", "cloud": "gcp",
        "region": "us-central1", "detail": "input gs://data/corpus",
    }  # fmt: skip
    first = _attempt(store, clock, llama, "llama-1", "32.7726", "spot")
    clock.advance(timedelta(hours=2))
    store.record_checkpoint(first)
    clock.advance(timedelta(hours=1))
    store.finish_attempt(
        first, "interrupted", 143, "spot reclaim", 3, [{"kind": "compute"}, input_move]
    )
    store.transition(llama, JobState.QUEUED)
    clock.advance(timedelta(hours=1))
    second = _attempt(store, clock, llama, "llama-2", "30", "spot")
    clock.advance(timedelta(hours=2))
    restore = {
        "kind": "egress", "quantity": 40, "unit_price_usd": "0.02", "cloud": "aws",
        "region": "us-east-1", "detail": "checkpoint restore s3://ckpt/llama",
    }  # fmt: skip
    entries = [{"kind": "compute"}, input_move, restore]
    store.finish_attempt(second, "succeeded", 0, "", 2, entries)
    clock.current = T0 + timedelta(days=1, hours=10)
    done = _attempt(store, clock, detector, "detector", "0.85", "on-demand")
    embedded = _attempt(store, clock, embed, "embed", "8.8", "on-demand")
    clock.advance(timedelta(hours=4))
    store.finish_attempt(done, "succeeded", 0, "", 4, [{"kind": "compute"}])
    clock.advance(timedelta(hours=3))
    store.finish_attempt(embedded, "succeeded", 0, "", 5, [{"kind": "onprem"}])
    clock.current = T0 + timedelta(days=29, hours=22)
    late = _attempt(store, clock, ablation, "ablation", "1.4693", "spot")
    clock.advance(timedelta(hours=3))
    store.finish_attempt(late, "succeeded", 0, "", 3, [{"kind": "compute"}])
    return store
