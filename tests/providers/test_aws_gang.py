"""AWS gangs through boto3 on moto (with the placement group calls of tests/fakes/aws.py):
the RunInstances requests as sent (placement group, EFA interfaces, IMDS tags), the peers
tag, all or nothing when EC2 refuses a node, relaunches that add no node, a reclaimed
member that stops the whole gang."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from pricing.catalog import read_offer_table
from providers.aws import AwsProvider
from providers.aws.gang import AwsGang, efa_interfaces
from providers.base import LaunchRequest, request_hash
from providers.cloudgang import TAG_PEERS, domain_name
from providers.errors import InsufficientCapacity, InvalidRequest
from providers.gang import TAG_RANK
from tests.fakes import aws as fakes
from tests.fakes.aws import AwsEnv, aws_error, interrupt_spot
from tests.fakes.offers import write_catalog
from tests.providers.contract import no_sleep

moto_server, aws_env, aws_clients = fakes.moto_server, fakes.aws_env, fakes.aws_clients
aws_placement_groups = fakes.aws_placement_groups

ROWS = (
    "aws,us-east-1,,p4d.24xlarge,A100,8,40,96,1152,nvlink,32.77,12.0,,,test,2026-11-20",
    "aws,us-east-1,,p5.48xlarge,H100,8,80,192,2048,nvlink,98.32,40.0,,,test,2026-11-20",
    "aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
)


@pytest.fixture
def provider(aws_env: AwsEnv, aws_placement_groups, tmp_path: Path) -> AwsProvider:
    catalog = read_offer_table(write_catalog(tmp_path / "offers.csv", ROWS))
    return make_provider(aws_env, catalog)


def make_provider(env: AwsEnv, catalog=None, **options) -> AwsProvider:
    settings = dict(
        catalog=catalog,
        regions=["us-east-1"],
        sleep=no_sleep(),
        image_id=env.image_id,
        max_attempts=1,
        session=env.session(),
    )
    return AwsProvider(**(settings | options))


def gang_request(attempt: str, nodes: int = 2, **changes) -> LaunchRequest:
    fields = dict(
        attempt_id=attempt,
        job_id="j-gang",
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p4d.24xlarge",
        market="on-demand",
        command="torchrun train.py",
        nodes=nodes,
        accelerator_count=8,
    )
    return LaunchRequest(**(fields | changes))


@contextmanager
def sent(provider: AwsProvider, operation: str) -> Iterator[list[dict]]:
    """The `operation` requests as they go on the wire (query parameters)."""
    bodies: list[dict] = []

    def record(request, **_kwargs):
        body = request.body if isinstance(request.body, str) else request.body.decode()
        bodies.append(dict(urllib.parse.parse_qsl(body)))

    events = provider._client("ec2", "us-east-1").meta.events
    events.register(f"before-send.ec2.{operation}", record)
    try:
        yield bodies
    finally:
        events.unregister(f"before-send.ec2.{operation}", record)


def interfaces_sent(body: dict) -> list[dict]:
    """The NetworkInterface.N.* parameters of one RunInstances request, as dicts."""
    found: dict[int, dict] = {}
    for key, value in body.items():
        if key.startswith("NetworkInterface."):
            _, index, field = key.split(".", 2)
            found.setdefault(int(index), {})[field] = value
    return [found[i] for i in sorted(found)]


def raw_instances(env: AwsEnv, instance_ids: list[str]) -> dict[str, dict]:
    ids = [i.partition("/")[2] for i in instance_ids]
    answer = env.client().describe_instances(InstanceIds=ids)
    return {
        f"us-east-1/{raw['InstanceId']}": raw
        for reservation in answer["Reservations"]
        for raw in reservation["Instances"]
    }


def test_a_p4d_gang_is_placed_in_its_cluster_group_with_four_efa_nics(
    provider, aws_env, aws_placement_groups
):
    with sent(provider, "RunInstances") as runs, sent(provider, "CreatePlacementGroup") as groups:
        gang = provider.launch(gang_request("g-p4d"))
    name = domain_name("g-p4d")
    assert [(g["GroupName"], g["Strategy"]) for g in groups] == [(name, "cluster")]
    assert aws_placement_groups.names() == {name}
    assert len(runs) == 2 and len({run["ClientToken"] for run in runs}) == 2
    for run in runs:
        assert run["Placement.GroupName"] == name
        assert run["Placement.AvailabilityZone"] == "us-east-1a"
        assert run["MetadataOptions.InstanceMetadataTags"] == "enabled"
        assert interfaces_sent(run) == [
            {"NetworkCardIndex": "0", "DeviceIndex": "0", "InterfaceType": "efa",
             "DeleteOnTermination": "true"},
            *({"NetworkCardIndex": str(card), "DeviceIndex": "1", "InterfaceType": "efa-only",
               "DeleteOnTermination": "true"} for card in (1, 2, 3)),
        ]  # fmt: skip
    assert gang.id == "us-east-1/gang/g-p4d" and gang.nodes == 2 and gang.state == "pending"
    raws = raw_instances(aws_env, [m.node_id for m in gang.members])
    ips = [raws[m.node_id]["PrivateIpAddress"] for m in gang.members]
    assert [m.address for m in gang.members] == ips and all(ips)
    for member in gang.members:
        tags = {t["Key"]: t["Value"] for t in raws[member.node_id]["Tags"]}
        assert tags[TAG_RANK] == str(member.rank)
        assert tags[TAG_PEERS] == " ".join(ips)  # written once every member had its IP
        assert tags["broker-attempt"] == "g-p4d" and tags["broker-job"] == "j-gang"
        script = aws_env.user_data(member.node_id.partition("/")[2])
        assert f"export BROKER_NODE_RANK={member.rank}" in script
        assert f"tags/instance/{TAG_PEERS}" in script


def test_p5_gets_32_efa_interfaces_with_dstacks_layout(provider):
    with sent(provider, "RunInstances") as runs:
        provider.launch(gang_request("g-p5", instance_type="p5.48xlarge"))
    sent_interfaces = interfaces_sent(runs[0])
    assert len(sent_interfaces) == 32
    assert sent_interfaces[0]["NetworkCardIndex"] == "0"
    assert sent_interfaces[0]["DeviceIndex"] == "0"
    assert sent_interfaces[0]["InterfaceType"] == "efa"
    assert [i["NetworkCardIndex"] for i in sent_interfaces] == [str(c) for c in range(32)]
    assert all(i["DeviceIndex"] == "1" for i in sent_interfaces[1:])
    kinds = [i["InterfaceType"] for i in sent_interfaces[1:]]
    assert kinds == ["efa" if card % 4 == 0 else "efa-only" for card in range(1, 32)]


def test_the_operators_subnet_and_groups_move_into_every_interface():
    interfaces = efa_interfaces("p4d.24xlarge", {"SubnetId": "subnet-1", "Groups": ["sg-1"]})
    assert all(i["SubnetId"] == "subnet-1" and i["Groups"] == ["sg-1"] for i in interfaces)


def test_a_gang_without_a_fabric_still_shares_a_placement_group(provider, aws_placement_groups):
    with sent(provider, "RunInstances") as runs:
        gang = provider.launch(gang_request("g-t4", instance_type="g4dn.xlarge"))
    assert all(run["Placement.GroupName"] == domain_name("g-t4") for run in runs)
    assert all(not interfaces_sent(run) for run in runs) and gang.nodes == 2
    with pytest.raises(InvalidRequest, match="no infiniband"):
        provider.launch(gang_request("g-ib", interconnect="infiniband"))
    with pytest.raises(InvalidRequest, match="no efa"):
        provider.launch(gang_request("g-efa", instance_type="g4dn.xlarge", interconnect="efa"))
    assert provider.max_gang_nodes("aws", "us-east-1", "p4d.24xlarge") == 16
    assert provider.max_gang_nodes("aws", "us-east-1", "m5.large") == 0  # not sold here
    assert provider.max_gang_nodes("gcp", "us-east-1", "p4d.24xlarge") == 0


@contextmanager
def refusing_run(number: int, code: str = "InsufficientInstanceCapacity") -> Iterator[list[int]]:
    """RunInstances call `number` (from 1) answers `code`; the others start instances."""
    from moto.ec2.models import EC2Backend

    original, calls = EC2Backend.run_instances, []

    def run(self, *args, **kwargs):
        calls.append(len(calls) + 1)
        if len(calls) == number:
            raise aws_error(code, "We currently do not have sufficient capacity", status=400)
        return original(self, *args, **kwargs)

    with mock.patch.object(EC2Backend, "run_instances", autospec=True, side_effect=run):
        yield calls


def test_a_refused_third_node_ends_the_started_ones_and_deletes_the_group(
    provider, aws_env, aws_placement_groups
):
    with refusing_run(3) as calls, pytest.raises(InsufficientCapacity):
        provider.launch(gang_request("g-aon", nodes=4))
    assert calls == [1, 2, 3]  # the fourth node was never asked for
    name = domain_name("g-aon")
    assert aws_placement_groups.created == [name] and aws_placement_groups.deleted == [name]
    assert aws_placement_groups.names() == set()
    listed = [i for i in provider.list_instances() if i.attempt_id == "g-aon"]
    assert len(listed) == 1 and len(listed[0].members) == 2
    raws = raw_instances(aws_env, [m.node_id for m in listed[0].members])
    assert {raw["State"]["Name"] for raw in raws.values()} <= {"shutting-down", "terminated"}
    assert not listed[0].active
    # The place cools down as a unit; the next placement launches a whole gang.
    with pytest.raises(InsufficientCapacity, match="cooling down"):
        provider.launch(gang_request("g-aon-2", nodes=4))
    elsewhere = provider.launch(gang_request("g-aon-3", nodes=4, zone="us-east-1b"))
    assert [m.rank for m in elsewhere.members] == [0, 1, 2, 3] and elsewhere.active


def test_a_relaunch_completes_a_partial_gang_without_doubles(provider, aws_env):
    request = gang_request("g-part", nodes=3)
    digest = request_hash(request)
    partial = AwsGang(provider, "us-east-1", "g-part", (request, aws_env.image_id, digest, "efa"))
    partial.open_domain()
    first = partial.launch(0)  # the controller died here
    listed = [i for i in provider.list_instances() if i.attempt_id == "g-part"]
    assert [(i.state, i.nodes, len(i.members)) for i in listed] == [("pending", 3, 1)]
    restarted = make_provider(aws_env)
    with sent(restarted, "RunInstances") as runs:
        gang = restarted.launch(request)
        again = restarted.launch(request)
    assert len(runs) == 2  # ranks 1 and 2 only, once
    assert gang.members[0].node_id == first.instance.id
    assert [m.rank for m in gang.members] == [0, 1, 2] == [m.rank for m in again.members]
    assert [m.node_id for m in again.members] == [m.node_id for m in gang.members]
    with pytest.raises(InvalidRequest, match="another request"):
        restarted.launch(gang_request("g-part", nodes=3, command="other"))


def test_a_reclaimed_member_interrupts_and_stops_the_whole_gang(provider, aws_env):
    gang = provider.launch(gang_request("g-spot", market="spot"))
    interrupt_spot(aws_env, gang.members[1].node_id.partition("/")[2])
    seen = provider.describe(gang.id)
    assert seen.state == "interrupted"
    raws = raw_instances(aws_env, [gang.members[0].node_id])
    assert raws[gang.members[0].node_id]["State"]["Name"] in ("shutting-down", "terminated")
    notices = provider.interruptions()
    assert [n.instance_id for n in notices] == [gang.id]
    assert provider.terminate(gang.id) is False  # already stopped as a unit


def test_terminate_ends_every_member_and_deletes_the_group(provider, aws_placement_groups):
    gang = provider.launch(gang_request("g-end", nodes=3))
    assert provider.terminate(gang.id) is True
    assert aws_placement_groups.names() == set()
    assert provider.terminate(gang.id) is False
    ended = provider.describe(gang.id)
    assert ended.state == "terminated" and {m.state for m in ended.members} == {"terminated"}


def test_peers_that_cannot_be_written_at_launch_are_written_at_the_next_describe(provider, aws_env):
    from botocore.awsrequest import AWSResponse

    refused = []

    class Raw:  # what botocore reads an HTTP body from
        def stream(self, **_):
            yield b"<Response><Errors><Error><Code>InternalError</Code><Message>x</Message>"
            yield b"</Error></Errors></Response>"

    def refuse(request, **_):  # EC2 answers CreateTags with a 500 (option 3 of the doc)
        refused.append(request.url)
        return AWSResponse(request.url, 500, {}, Raw())

    events = provider._client("ec2", "us-east-1").meta.events
    events.register("before-send.ec2.CreateTags", refuse)
    try:
        gang = provider.launch(gang_request("g-late"))  # the gang runs all the same
    finally:
        events.unregister("before-send.ec2.CreateTags", refuse)
    assert len(refused) == 1 and gang.nodes == 2 and gang.active
    ids = [m.node_id for m in gang.members]
    assert all(TAG_PEERS not in {t["Key"] for t in raw.get("Tags", [])}
               for raw in raw_instances(aws_env, ids).values())  # fmt: skip
    provider.describe(gang.id)
    ips = " ".join(m.address for m in gang.members)
    for raw in raw_instances(aws_env, ids).values():
        assert {t["Key"]: t["Value"] for t in raw["Tags"]}[TAG_PEERS] == ips
