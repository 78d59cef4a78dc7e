"""Spot recovery across clouds, end to end through the real adapters on their emulators.

One test per source cloud: AWS (boto3 over moto), GCE (google-cloud-compute over the
loopback fake) and Azure (azure-mgmt-compute over the HTTPS fake ARM). In each, a Fleet
routes two clouds to their adapters; the source cloud sells the cheapest spot T4 and the
other cloud the second cheapest; the manifest allows one region per cloud. The job
launches on the source, the cloud reclaims it through its emulator's lever, and the
next pass closes the attempt as interrupted (billed at its launch price, from the
instance's own launch and end times: clouds report no exit code and no bill), re-queues
the job and relaunches it on the other cloud, resuming from the checkpoint, while the
reclaimed place stays closed for spot (broker.recovery).

Time is a FixedClock moved by hand, given to the adapters, the store and the controller.
The emulators stamp launches with the wall clock, so the clock starts at the wall
clock's current second: a launch is never before it, and the two hours the test lets
pass are billed to within the few wall seconds the test takes.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from broker.clock import FixedClock, SystemClock
from broker.controller import Controller
from broker.manifest.load import load_manifests
from broker.recovery import closed_places, recent_reclaims
from broker.state import AttemptState, JobState, StateStore
from broker.submit import submit_manifests
from pricing.catalog import read_offer_table
from pricing.query import OfferIndex
from pricing.table import OfferTable
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_JOB, Provider
from providers.fleet import Fleet
from tests.fakes import aws as aws_fakes
from tests.fakes.aws import AwsEnv, interrupt_spot
from tests.fakes.azure import FakeArm
from tests.fakes.gce import FakeGce
from tests.fakes.offers import write_catalog
from tests.providers import test_azure, test_gcp
from tests.providers.test_aws import AwsHarness

# The fixtures these tests reuse, as names pytest finds here.
moto_server = aws_fakes.moto_server
aws_clients = aws_fakes.aws_clients
aws_env = aws_fakes.aws_env
sdk = test_gcp.sdk
offline_google_auth = test_gcp.offline_google_auth  # autouse: google-auth stays on loopback
fake = test_gcp.fake  # one GCE fake per test
arm = test_azure.arm  # one fake ARM for the module, reset by each test that uses it

RECLAIMED_AFTER = timedelta(hours=2)
T4_FAMILY = "standardNCASv3_T4Family"
# One spot T4 per cloud, in one region each: (region, instance type, catalog columns).
OFFERS = {
    "aws": ("us-east-1", "g4dn.xlarge", "16,4,16,"),
    "gcp": ("us-central1", "n1-standard-8", "16,8,30,"),
    "azure": ("eastus", "Standard_NC4as_T4_v3", "16,4,28,"),
}
CHEAPEST, SECOND = Decimal("0.15"), Decimal("0.25")  # spot USD/hour
ON_DEMAND = "1.9"  # far above either spot price: `spot: prefer` stays on spot
MANIFEST = """\
apiVersion: broker/v1
name: resnet-{source}
team: vision
resources:
  accelerators: T4:1
placement:
  clouds: [{source}, {target}]
  regions: [{source_region}, {target_region}]
  spot: {spot}
run:
  command: python train.py --resume-if-any
runtime:
  estimate_hours: 4
checkpoint:
  uri: {checkpoint}
  interval_minutes: 30
  size_gb: 2
"""


@dataclass(frozen=True)
class Seen:
    """An instance as its emulator holds it (not as the adapter reports it)."""

    tags: dict[str, str]
    spot: bool
    live: bool
    script: str  # the start-up script the job runs from (user data, metadata, custom data)
    launched: datetime  # the cloud's own launch time


@dataclass
class Side:
    """One cloud of a test: its adapter on its emulator, and the emulator's view and lever."""

    cloud: str
    provider: Provider
    seen: Callable[[], dict[str, Seen]]  # attempt id -> instance, every broker instance
    reclaim: Callable[[str, datetime], None]  # (the adapter's instance id, when)

    @property
    def region(self) -> str:
        return OFFERS[self.cloud][0]


def catalog_of(tmp_path: Path, source: str, target: str) -> OfferTable:
    """The source cloud sells the cheapest spot T4, the target the second cheapest."""
    rows = [
        f"{cloud},{region},,{itype},T4,1,{columns},{ON_DEMAND},{spot},,,test,2026-11-20"
        for (cloud, spot) in ((source, CHEAPEST), (target, SECOND))
        for region, itype, columns in [OFFERS[cloud]]
    ]
    return read_offer_table(write_catalog(tmp_path / "offers.csv", tuple(rows)))


# --- the three clouds: adapter, emulator view, reclaim lever ------------------------------


def aws_side(env: AwsEnv, catalog: OfferTable, clock: FixedClock) -> Side:
    provider = AwsHarness(env, catalog).new_provider(clock=clock)

    def seen() -> dict[str, Seen]:
        answer = env.client().describe_instances(
            Filters=[{"Name": f"tag:{TAG_BROKER}", "Values": ["broker"]}]
        )
        found = {}
        for raw in (i for r in answer["Reservations"] for i in r["Instances"]):
            tags = {tag["Key"]: tag["Value"] for tag in raw["Tags"]}
            found[tags[TAG_ATTEMPT]] = Seen(
                tags,
                raw.get("InstanceLifecycle") == "spot",
                raw["State"]["Name"] in ("pending", "running"),
                env.user_data(raw["InstanceId"]),
                raw["LaunchTime"],
            )
        return found

    def reclaim(instance_id: str, at: datetime) -> None:
        region, _, iid = instance_id.partition("/")
        interrupt_spot(env, iid, region)
        # The lever stamps the wall clock; AWS states the end in the transition reason,
        # which here says when on the test's clock.
        stamp = f"Service initiated ({at:%Y-%m-%d %H:%M:%S} GMT)"
        env.backend(region).get_instance(iid)._reason = stamp

    return Side("aws", provider, seen, reclaim)


def gcp_side(gce: FakeGce, catalog: OfferTable, clock: FixedClock) -> Side:
    provider = test_gcp.make_provider(gce, catalog, clock=clock)

    def seen() -> dict[str, Seen]:
        found = {}
        for vm in gce.instances.values():
            metadata = {item["key"]: item["value"] for item in vm["metadata"]["items"]}
            tags = dict(json.loads(metadata["broker-tags"]))
            assert vm["labels"][TAG_BROKER] == "broker"  # what GCE filters on
            found[tags[TAG_ATTEMPT]] = Seen(
                tags,
                vm["scheduling"].get("provisioningModel") == "SPOT",
                vm["status"] in ("PROVISIONING", "STAGING", "RUNNING"),
                metadata["startup-script"],
                datetime.fromisoformat(vm["creationTimestamp"]),
            )
        return found

    def reclaim(instance_id: str, at: datetime) -> None:
        gce.preempt(*instance_id.split("/"))  # DELETE (the adapter's default): the VM goes

    return Side("gcp", provider, seen, reclaim)


def azure_side(arm: tuple[FakeArm, Path], catalog: OfferTable, clock: FixedClock) -> Side:
    fake_arm, cert = arm
    test_azure.seed(fake_arm)  # a fresh ARM: no VMs, the usual quotas
    fake_arm.add_sku("Standard_NC4as_T4_v3", "eastus", T4_FAMILY, 4)
    fake_arm.set_usage("eastus", T4_FAMILY, 0, 100)
    provider = test_azure.AzureHarness(fake_arm, cert).new_provider(catalog=catalog, clock=clock)

    def seen() -> dict[str, Seen]:
        found = {}
        for vm in fake_arm.vms.values():
            properties = vm.body["properties"]
            custom = base64.b64decode(properties["osProfile"]["customData"]).decode()
            found[vm.body["tags"][TAG_ATTEMPT]] = Seen(
                dict(vm.body["tags"]),
                properties["priority"] == "Spot",
                vm.power == "running",
                custom,
                datetime.fromisoformat(properties["timeCreated"]),
            )
        return found

    def reclaim(instance_id: str, at: datetime) -> None:
        fake_arm.evict(*instance_id.split("/"))  # Deallocate (the adapter's default)

    return Side("azure", provider, seen, reclaim)


# --- the recovery, the same for every pair of clouds ----------------------------------------


def recover(tmp_path: Path, clock: FixedClock, source: Side, target: Side, spot: str) -> None:
    store = StateStore.open(tmp_path / "state.db", clock)
    fleet = Fleet({source.cloud: source.provider, target.cloud: target.provider})
    controller = Controller(store, fleet, clock, lambda live: OfferIndex(live.offers()))
    try:
        job_id = submit(store, tmp_path, source, target, spot)
        checkpoint = checkpoint_uri(source)

        # 1. The job runs on the cheapest spot offer: the source cloud.
        report = controller.run_pass()
        (first,) = store.attempts(job_id)
        assert report.launched == [
            ("resnet-" + source.cloud, f"{source.cloud}/{source.region}/{itype(source)} spot")
        ]
        assert (first.state, first.market, first.price_per_hour) == (
            AttemptState.RUNNING,
            "spot",
            CHEAPEST,
        )
        assert store.job(job_id).state is JobState.RUNNING
        on_source = source.seen()
        assert set(on_source) == {first.id} and on_source[first.id].live
        assert on_source[first.id].spot
        assert {TAG_BROKER: "broker", TAG_JOB: job_id, TAG_ATTEMPT: first.id}.items() <= (
            on_source[first.id].tags.items()
        )
        assert "BROKER_RESUME_FROM=''" in on_source[first.id].script  # a first attempt
        assert target.seen() == {}
        launched = on_source[first.id].launched
        assert clock.now() <= launched  # see the module docstring
        (known,) = store.instances(attempt_id=first.id)
        member, _, own_id = known.provider_id.partition(":")
        assert member == source.cloud

        # 2. Two hours later the cloud takes the GPU back.
        clock.advance(RECLAIMED_AFTER)
        source.reclaim(own_id, clock.now())
        reclaimed_at = clock.now()

        # 3. One pass: attempt 1 interrupted and billed, the job re-queued and relaunched
        #    on the other cloud (the reclaimed place is closed for spot).
        report = controller.run_pass()
        assert report.finished == [("resnet-" + source.cloud, "interrupted")]
        first, second = store.attempts(job_id)
        assert first.state == AttemptState.INTERRUPTED and first.exit_code is None
        assert first.reason.startswith("interrupted, no exit code; lost ")
        assert first.ended_at == reclaimed_at
        # Billed from the cloud's launch time to the reclaim: two hours, less the wall
        # seconds between the clock's start and the launch.
        ran = reclaimed_at - launched
        assert RECLAIMED_AFTER - timedelta(minutes=5) < ran <= RECLAIMED_AFTER
        # billed in whole seconds, a started one whole (broker.state.money)
        seconds = math.ceil(round(ran.total_seconds(), 2))
        assert first.billed_hours == round(Decimal(seconds) / 3600, 6)
        moves = [e.message for e in store.events(job_id) if e.kind == "transition"]
        assert "interrupted -> queued: re-queued after interruption" in moves
        # the cloud's own record of the reclaim, read (once) by the pass before it judged
        # the attempt, and recorded on it
        noticed = [e.data for e in store.events(job_id) if e.kind == "interruption_notice"]
        assert [(n["kind"], n["action"]) for n in noticed] == [("spot-reclaim", "expect-reclaim")]
        assert fleet.interruptions() == []

        assert second.number == 2 and second.state == AttemptState.RUNNING
        assert (second.placed_on.cloud, second.placed_on.region) == (
            target.cloud,
            target.region,
        )
        assert (second.market, second.price_per_hour) == ("spot", SECOND)
        assert store.job(job_id).state is JobState.RUNNING
        on_target = target.seen()
        assert set(on_target) == {second.id} and on_target[second.id].live
        assert on_target[second.id].spot
        assert {TAG_BROKER: "broker", TAG_JOB: job_id, TAG_ATTEMPT: second.id}.items() <= (
            on_target[second.id].tags.items()
        )
        assert f"BROKER_RESUME_FROM={checkpoint}" in on_target[second.id].script
        on_source = source.seen()
        assert second.id not in on_source and not any(s.live for s in on_source.values())
        if source.cloud == "azure":  # the evicted (deallocated) VM and its disk are deleted
            assert first.id not in on_source

        closed = closed_places(recent_reclaims(store, clock.now()), clock.now())
        assert [(u.cloud, u.region, u.instance_type, u.market) for u in closed] == [
            (source.cloud, source.region, itype(source), "spot")
        ]

        # 4. The ledger: one compute entry, for attempt 1, at its launch price.
        (entry,) = store.ledger(job_id=job_id)
        assert (entry.attempt_id, entry.kind, entry.market) == (first.id, "compute", "spot")
        assert (entry.cloud, entry.region) == (source.cloud, source.region)
        assert entry.unit_price_usd == CHEAPEST and entry.quantity == first.billed_hours
        assert entry.amount_usd == round(CHEAPEST * first.billed_hours, 6)  # rounded once

        # 5. While the place cools down, passes change nothing: one live attempt, on the
        #    target; the source never gets the job back.
        clock.advance(timedelta(minutes=5))
        report = controller.run_pass()
        assert not report.changed and not report.unreachable
        assert [a.id for a in store.attempts(job_id)] == [first.id, second.id]
        on_source = source.seen()
        assert second.id not in on_source and not any(s.live for s in on_source.values())
        assert len(store.ledger(job_id=job_id)) == 1
    finally:
        store.close()


def submit(store: StateStore, tmp_path: Path, source: Side, target: Side, spot: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(
        MANIFEST.format(
            source=source.cloud,
            target=target.cloud,
            source_region=source.region,
            target_region=target.region,
            spot=spot,
            checkpoint=checkpoint_uri(source),
        )
    )
    (manifest,) = load_manifests([path]).manifests
    (result,) = submit_manifests(store, [manifest])
    return result.job_id


def wall_second() -> FixedClock:
    """A clock standing at the wall clock's current second (made once the emulators are up,
    so that the launch follows within seconds)."""
    return FixedClock(SystemClock().now().replace(microsecond=0))


def checkpoint_uri(source: Side) -> str:
    return f"s3://acme-ckpt/resnet-{source.cloud}/"


def itype(side: Side) -> str:
    return OFFERS[side.cloud][1]


# --- one test per source cloud --------------------------------------------------------------


def test_an_aws_spot_interruption_recovers_on_gcp(tmp_path, aws_env, fake):
    clock = wall_second()
    catalog = catalog_of(tmp_path, "aws", "gcp")
    recover(
        tmp_path, clock, aws_side(aws_env, catalog, clock), gcp_side(fake, catalog, clock), "only"
    )


def test_a_gce_preemption_recovers_on_azure(tmp_path, fake, arm):
    clock = wall_second()
    catalog = catalog_of(tmp_path, "gcp", "azure")
    recover(
        tmp_path, clock, gcp_side(fake, catalog, clock), azure_side(arm, catalog, clock), "prefer"
    )


def test_an_azure_eviction_recovers_on_aws(tmp_path, arm, aws_env):
    clock = wall_second()
    catalog = catalog_of(tmp_path, "azure", "aws")
    recover(
        tmp_path, clock, azure_side(arm, catalog, clock), aws_side(aws_env, catalog, clock), "only"
    )
