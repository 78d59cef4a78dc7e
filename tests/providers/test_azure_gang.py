"""Azure gangs through azure-mgmt-compute over HTTPS, on the fake ARM of
tests/fakes/azure.py: the proximity placement group (and, for InfiniBand sizes, the
availability set) every member references, accelerated networking, the peers tag, all
or nothing when Azure cannot allocate node 3 of 4, relaunches, an eviction, terminate."""

from __future__ import annotations

import base64

import pytest

from providers.azure.gang import AzureGang, domain_ids, member_name
from providers.base import request_hash
from providers.cloudgang import TAG_PEERS, domain_name
from providers.errors import InsufficientCapacity
from providers.gang import TAG_RANK
from tests.fakes.azure import SUBSCRIPTION
from tests.providers.test_azure import FAILURES, GROUP, AzureHarness, arm, seed

__all__ = ["arm"]  # the fixture, found by name

IB_SIZE = "Standard_ND96asr_v4"


@pytest.fixture
def harness(arm) -> AzureHarness:
    fake, cert = arm
    seed(fake)
    return AzureHarness(fake, cert)


def gang_request(harness: AzureHarness, attempt: str, nodes: int = 2, **changes):
    fields = dict(instance_type=IB_SIZE, market="on-demand", nodes=nodes, zone="1")
    fields |= {"accelerator_count": 8, "command": "torchrun train.py"}
    return harness.request(attempt, **(fields | changes))


def vm_puts(harness: AzureHarness) -> list[dict]:
    return harness.fake.creates()


def test_an_infiniband_gang_shares_a_placement_group_and_availability_set(harness):
    gang = harness.provider.launch(gang_request(harness, "g-ib"))
    ids = domain_ids(SUBSCRIPTION, GROUP, "g-ib")
    ppg, avset = ids["proximityPlacementGroup"], ids["availabilitySet"]
    assert [kind for kind, _ in harness.fake.group_log] == ["create", "create"]
    stored = {g["id"].lower(): g for g in harness.fake.groups.values()}
    assert stored[ppg.lower()]["properties"]["proximityPlacementGroupType"] == "Standard"
    assert stored[avset.lower()]["properties"]["proximityPlacementGroup"] == {"id": ppg}
    bodies = vm_puts(harness)
    assert [b["tags"][TAG_RANK] for b in bodies] == ["0", "1"]
    for rank, body in enumerate(bodies):
        properties = body["properties"]
        assert properties["proximityPlacementGroup"] == {"id": ppg}
        assert properties["availabilitySet"] == {"id": avset}
        assert "zones" not in body  # an availability set takes no zone
        nic = properties["networkProfile"]["networkInterfaceConfigurations"][0]
        assert nic["properties"]["enableAcceleratedNetworking"] is True
        script = base64.b64decode(properties["osProfile"]["customData"]).decode()
        assert f"export BROKER_NODE_RANK={rank}" in script and "compute/tags" in script
    assert gang.id == f"{GROUP}/gang/g-ib" and [m.rank for m in gang.members] == [0, 1]
    ips = [m.address for m in gang.members]
    assert all(ips) and len(set(ips)) == 2
    patched = [b for m, p, b in harness.fake.requests if m == "PATCH"]
    assert [b["tags"][TAG_PEERS] for b in patched] == [" ".join(ips)] * 2
    for rank in (0, 1):
        vm = harness.fake.vms[f"{GROUP}/{member_name('g-ib', rank)}".lower()]
        assert vm.body["tags"][TAG_PEERS] == " ".join(ips)
        assert vm.body["tags"]["broker-attempt"] == "g-ib"  # the others kept
    again = harness.new_provider().launch(gang_request(harness, "g-ib"))
    assert again.id == gang.id and len(vm_puts(harness)) == 2
    assert [m.address for m in again.members] == ips  # read back from the peers tag


def test_a_size_without_infiniband_gets_the_placement_group_only(harness):
    harness.provider.launch(gang_request(harness, "g-nc", instance_type="Standard_NC24ads_A100_v4"))
    assert [p for _, p in harness.fake.group_log] == [
        domain_ids(SUBSCRIPTION, GROUP, "g-nc")["proximityPlacementGroup"]
    ]
    for body in vm_puts(harness):
        assert "availabilitySet" not in body["properties"] and body["zones"] == ["1"]
        nic = body["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]
        assert "enableAcceleratedNetworking" not in nic["properties"]


def test_an_allocation_failure_on_node_3_of_4_ends_the_gang(harness):
    harness.fake.fail_creates(FAILURES["capacity"], after=2)
    with pytest.raises(InsufficientCapacity):
        harness.provider.launch(gang_request(harness, "g-aon", nodes=4))
    harness.fake.fail_creates(None)
    assert len(vm_puts(harness)) == 3  # the fourth node was never asked for
    assert harness.fake.vms == {}  # the two started and the failed one are deleted
    assert harness.fake.groups == {}
    assert [kind for kind, _ in harness.fake.group_log] == ["create", "create"] + ["delete"] * 2
    assert harness.provider.cooldown.cooling(IB_SIZE, "1", "on-demand")
    listed = [i for i in harness.provider.list_instances() if i.attempt_id == "g-aon"]
    assert all(not i.active for i in listed)


def test_a_relaunch_completes_a_partial_gang_once(harness):
    request = gang_request(harness, "g-part", nodes=3)
    partial = AzureGang(harness.provider, "g-part", (request, request_hash(request), "infiniband"))
    partial.open_domain()
    partial.launch(0)  # the controller died here
    listed = [i for i in harness.new_provider().list_instances() if i.attempt_id == "g-part"]
    assert [(i.state, i.nodes, len(i.members)) for i in listed] == [("pending", 3, 1)]
    gang = harness.new_provider().launch(request)
    assert [m.rank for m in gang.members] == [0, 1, 2]
    names = [
        path.rsplit("/", 1)[1]
        for method, path, _ in harness.fake.requests
        if method == "PUT" and "/virtualMachines/" in path
    ]
    assert names == [member_name("g-part", r) for r in (0, 1, 2)]


def test_an_evicted_member_interrupts_the_gang_and_ends_the_others(harness):
    provider = harness.provider
    gang = provider.launch(gang_request(harness, "g-spot", market="spot"))
    harness.fake.evict(GROUP, member_name("g-spot", 1))  # deallocated
    assert provider.describe(gang.id).state == "interrupted"
    remaining = set(harness.fake.vms)
    assert remaining == {f"{GROUP}/{member_name('g-spot', 1)}".lower()}  # rank 0 deleted
    assert [n.instance_id for n in provider.interruptions()] == [gang.id]


def test_terminate_ends_every_member_and_deletes_the_groups(harness):
    provider = harness.provider
    gang = provider.launch(gang_request(harness, "g-end"))
    assert provider.terminate(gang.id) is True
    assert harness.fake.vms == {} and harness.fake.groups == {}
    assert provider.terminate(gang.id) is False
    assert provider.describe(gang.id).state == "terminated"
    assert domain_name("g-end") in harness.fake.group_log[-1][1]
