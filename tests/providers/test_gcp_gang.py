"""GCE gangs through google-cloud-compute over real HTTP, on the loopback GCE of
tests/fakes/gce.py: the compact resource policy and the members' inserts (policy named,
GPUDirect NICs), the peers in metadata, all or nothing when a zone runs out on node 3 of
4 (and the next zone taking the whole gang), relaunches, a reclaimed member, terminate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pricing.catalog import read_offer_table
from providers.base import LaunchRequest, request_hash
from providers.cloudgang import TAG_PEERS, domain_name
from providers.errors import InsufficientCapacity
from providers.gang import TAG_RANK
from providers.gcp.gang import GcpGang, member_name
from tests.fakes.gce import FakeGce
from tests.fakes.offers import write_catalog
from tests.providers.test_gcp import ROWS, make_provider, offline_google_auth, sdk

__all__ = ["offline_google_auth", "sdk"]  # fixtures, found by name

GANG_ROWS = (
    *ROWS,
    "gcp,us-central1,us-central1-a,a3-highgpu-8g,H100,8,80,208,1872,nvlink,88.25,30.0,,,test,2026-11-20",
    "gcp,us-central1,us-central1-a,a3-megagpu-8g,H100,8,80,208,1872,nvlink,95.0,32.0,,,test,2026-11-20",
)


@pytest.fixture
def fake() -> Iterator[FakeGce]:
    server = FakeGce()
    yield server
    server.close()


@pytest.fixture
def provider(fake, tmp_path):
    catalog = read_offer_table(write_catalog(tmp_path / "offers.csv", GANG_ROWS))
    return make_provider(fake, catalog)


def gang_request(attempt: str, nodes: int = 2, **changes) -> LaunchRequest:
    fields = dict(
        attempt_id=attempt,
        job_id="j-gang",
        cloud="gcp",
        region="us-central1",
        zone="us-central1-a",
        instance_type="a3-highgpu-8g",
        market="on-demand",
        command="torchrun train.py",
        nodes=nodes,
        accelerator_count=8,
    )
    return LaunchRequest(**(fields | changes))


def items(body: dict) -> dict[str, str]:
    return {item["key"]: item["value"] for item in body["metadata"]["items"]}


def test_an_a3_gang_shares_a_compact_policy_and_gets_tcpx_nics(provider, fake):
    gang = provider.launch(gang_request("g-a3"))
    policy = domain_name("g-a3")
    assert fake.policies[("us-central1", policy)]["groupPlacementPolicy"] == {
        "collocation": "COLLOCATED",
        "vmCount": 2,
    }
    assert [body["name"] for body in fake.inserts] == [member_name("g-a3", r) for r in (0, 1)]
    for rank, body in enumerate(fake.inserts):
        assert body["resourcePolicies"] == [
            f"projects/{fake.project}/regions/us-central1/resourcePolicies/{policy}"
        ]
        nics = body["networkInterfaces"]
        assert len(nics) == 5 and {nic["nicType"] for nic in nics} == {"GVNIC"}
        assert [nic.get("subnetwork") for nic in nics[1:]] == [
            f"regions/us-central1/subnetworks/broker-gpu-{i}" for i in (1, 2, 3, 4)
        ]
        assert body["labels"][TAG_RANK] == str(rank)
        assert f"export BROKER_NODE_RANK={rank}" in items(body)["startup-script"]
    assert gang.id == "us-central1-a/gang/g-a3" and [m.rank for m in gang.members] == [0, 1]
    ips = [m.address for m in gang.members]
    assert all(ips) and len(set(ips)) == 2
    peers = {name: values[TAG_PEERS] for name, values in fake.metadata_sets}
    assert peers == {member_name("g-a3", r): " ".join(ips) for r in (0, 1)}
    # The peers were added to the metadata, not put in place of it.
    vm = fake.instances[("us-central1-a", member_name("g-a3", 1))]
    assert "startup-script" in items(vm) and items(vm)[TAG_PEERS] == " ".join(ips)
    again = provider.launch(gang_request("g-a3"))
    assert len(fake.inserts) == 2 and len(fake.metadata_sets) == 2 and again.id == gang.id


def test_a3_mega_gets_eight_tcpxo_nics(provider, fake):
    provider.launch(gang_request("g-mega", instance_type="a3-megagpu-8g"))
    assert {len(body["networkInterfaces"]) for body in fake.inserts} == {9}


def test_a_stockout_on_node_3_of_4_ends_the_zone_and_the_next_zone_takes_the_gang(provider, fake):
    request = gang_request("g-aon", nodes=4, instance_type="a2-highgpu-1g", zone="")
    fake.fail_inserts("ZONE_RESOURCE_POOL_EXHAUSTED", times=1, after=2)
    gang = provider.launch(request)
    policy = domain_name("g-aon")
    assert fake.policy_log == [("insert", policy), ("delete", policy), ("insert", policy)]
    zones = [body["machineType"].split("/")[1] for body in fake.inserts]
    assert zones == ["us-central1-a"] * 2 + ["us-central1-b"] * 4
    deletes = [p for m, p, _ in fake.calls if m == "DELETE" and "/instances/" in p]
    assert sorted(p.rsplit("/", 1)[1] for p in deletes) == [member_name("g-aon", r) for r in (0, 1)]
    assert {zone for zone, _ in fake.instances} == {"us-central1-b"}
    assert gang.zone == "us-central1-b" and [m.rank for m in gang.members] == [0, 1, 2, 3]
    assert provider.cooldown.cooling("a2-highgpu-1g", "us-central1-a", "on-demand")


def test_a_stockout_in_the_only_zone_raises_and_leaves_nothing(provider, fake):
    fake.fail_inserts("ZONE_RESOURCE_POOL_EXHAUSTED", times=1, after=2)
    with pytest.raises(InsufficientCapacity):
        provider.launch(gang_request("g-one", nodes=4, instance_type="a2-highgpu-1g"))
    assert fake.instances == {} and fake.policies == {}
    listed = [i for i in provider.list_instances() if i.attempt_id == "g-one"]
    assert listed == []


def test_a_relaunch_completes_a_partial_gang_once(provider, fake):
    request = gang_request("g-part", nodes=3, instance_type="a2-highgpu-1g")
    partial = GcpGang(
        provider, "us-central1", "g-part", "us-central1-a", (request, request_hash(request))
    )
    partial.open_domain()
    partial.launch(0)  # the controller died here
    listed = [i for i in make_provider(fake).list_instances() if i.attempt_id == "g-part"]
    assert [(i.state, i.nodes, len(i.members)) for i in listed] == [("pending", 3, 1)]
    gang = make_provider(fake).launch(request)
    assert [m.rank for m in gang.members] == [0, 1, 2]
    assert [body["name"] for body in fake.inserts] == [member_name("g-part", r) for r in (0, 1, 2)]


def test_a_reclaimed_member_interrupts_the_gang_and_ends_the_others(provider, fake):
    gang = provider.launch(gang_request("g-spot", market="spot", instance_type="a2-highgpu-1g"))
    fake.preempt("us-central1-a", member_name("g-spot", 1))  # DELETE: the VM is gone
    seen = provider.describe(gang.id)
    assert seen.state == "interrupted"
    assert fake.instances == {}  # rank 0 was ended with it
    assert [n.instance_id for n in provider.interruptions()] == [gang.id]


def test_terminate_ends_every_member_and_deletes_the_policy(provider, fake):
    gang = provider.launch(gang_request("g-end", instance_type="a2-highgpu-1g"))
    assert provider.terminate(gang.id) is True
    assert fake.instances == {} and fake.policies == {}
    assert provider.terminate(gang.id) is False
    assert provider.describe(gang.id).state == "terminated"
