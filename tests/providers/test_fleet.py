"""The fleet: one provider over several, routed by cloud; run through the contract too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.clock import SystemClock
from pricing.catalog import read_offer_table
from pricing.table import OfferTable
from providers.base import Instance, LaunchRequest
from providers.errors import InvalidRequest, NotFound, ProviderError
from providers.fleet import Fleet
from providers.gang import GangMember
from providers.sandbox import SandboxProvider
from tests.fakes.offers import write_catalog
from tests.providers.contract import (
    AWS_PLACE,
    BillingContract,
    CapacityContract,
    CheckpointStoresContract,
    GangMembersContract,
    GangsContract,
    PlayedReclaimsContract,
    PoolSharesContract,
    ProviderContract,
    spot_request,
)


class AwsSimulator(SandboxProvider):
    """A second sandbox under another name: the fleet's AWS member in these tests."""

    name = "aws-sim"


@dataclass
class FleetHarness:
    offers: OfferTable
    workdir: Path
    error_kinds: tuple[str, ...] = ("capacity",)
    made: list[SandboxProvider] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def _sandbox(self, kind: type[SandboxProvider], sub: str) -> SandboxProvider:
        member = kind(
            self.offers, self.workdir / sub, SystemClock(), terminate_grace=2.0, notice_seconds=2.0
        )
        self.made.append(member)
        return member

    def new_provider(self) -> Fleet:
        return Fleet(
            {"aws": self._sandbox(AwsSimulator, "aws")}, self._sandbox(SandboxProvider, "rest")
        )

    @property
    def aws(self) -> SandboxProvider:
        return self.provider.routes["aws"]

    def request(self, attempt: str, **changes) -> LaunchRequest:
        return spot_request(attempt, AWS_PLACE | {"job_id": "j-fleet"}, changes)

    def unknown_id(self) -> str:
        return "aws-sim:sbx-never-launched"

    def member_tags(self, instance: Instance, member: GangMember) -> dict[str, str]:
        """A rank's tags, from the AWS member's record on disk."""
        own = member.node_id.partition(":")[2]
        attempt, _, rank = own.removeprefix("sbx-").partition("/")
        record = self.aws._dir.load(f"{attempt}/{rank}")
        assert record is not None, member
        return dict(record.tags)

    def interrupt(self, instance: Instance) -> None:
        own = instance.id.partition(":")[2]
        self.aws.interrupt(own)
        self.aws.wait(own, 30.0)

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        """Every AWS member on the workdir refuses launches for want of capacity."""
        assert kind == "capacity"
        members = [m for m in self.made if isinstance(m, AwsSimulator)]
        saved = [m.capacity for m in members]
        for member in members:
            member.capacity = 0
        try:
            yield
        finally:
            for member, capacity in zip(members, saved, strict=True):
                member.capacity = capacity

    def close(self) -> None:
        for member in self.made:
            for instance in member.list_instances():
                member.terminate(instance.id)


@pytest.fixture
def harness(tmp_path) -> Iterator[FleetHarness]:
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    harness = FleetHarness(offers, tmp_path / "fleet")
    yield harness
    harness.close()


class TestFleetContract(
    ProviderContract, CapacityContract, PoolSharesContract, BillingContract,
    CheckpointStoresContract, PlayedReclaimsContract, GangsContract, GangMembersContract,
):  # fmt: skip
    pass


def test_requests_go_to_the_member_serving_their_cloud(harness):
    fleet = harness.provider
    on_aws = fleet.launch(harness.request("f-1"))
    gcp = dict(cloud="gcp", region="us-central1", instance_type="n1-standard-4")
    on_gcp = fleet.launch(harness.request("f-2", zone="us-central1-a", **gcp))
    assert on_aws.id == "aws-sim:sbx-f-1" and on_gcp.id == "sandbox:sbx-f-2"
    assert [i.attempt_id for i in harness.aws.list_instances()] == ["f-1"]
    assert fleet.describe(on_gcp.id).attempt_id == "f-2"
    assert {i.id for i in fleet.list_instances()} == {on_aws.id, on_gcp.id}


def test_offers_come_once_from_the_member_that_serves_them(harness):
    fleet = harness.provider
    fleet.launch(harness.request("f-3"))
    rows = fleet.offers().records()
    assert len(rows) == len(harness.offers)
    aws = {r["capacity"] for r in rows if (r["cloud"], r["region"]) == ("aws", "us-east-1")}
    assert aws == {harness.aws.free_nodes()[("aws", "us-east-1")]}
    free = fleet.free_nodes()
    assert free[("aws", "us-east-1")] == harness.aws.free_nodes()[("aws", "us-east-1")]
    assert free[("gcp", "us-central1")] == fleet.default.free_nodes()[("gcp", "us-central1")]


def test_ids_of_members_not_enabled_are_not_reported_gone(harness):
    with pytest.raises(ProviderError) as error:
        harness.provider.describe("gcp:us-central1-a/broker-x")
    assert not isinstance(error.value, NotFound) and "not enabled" in str(error.value)
    with pytest.raises(NotFound):
        harness.provider.describe("no-separator")


def test_without_a_default_unrouted_clouds_are_invalid(harness):
    fleet = Fleet({"aws": harness.aws})
    with pytest.raises(InvalidRequest, match="no provider serves cloud 'gcp'"):
        fleet.launch(harness.request("f-4", cloud="gcp", region="us-central1"))


def test_member_names_must_differ(harness):
    with pytest.raises(ValueError, match="named"):
        Fleet(
            {
                "aws": harness.aws,
                "gcp": AwsSimulator(harness.offers, harness.workdir / "x", SystemClock()),
            }
        )
