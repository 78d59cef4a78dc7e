"""An N-node gang on EC2: one cluster placement group per attempt, one instance per rank.

The shared rules (all or nothing, peers, the gang's state) are `providers.cloudgang`;
this module is what only EC2 has:

- the domain: `create_placement_group(GroupName=<domain_name(attempt)>,
  Strategy="cluster")`, tagged like the instances; every member's RunInstances names it
  (`Placement.GroupName`);
- a member: the attempt's RunInstances parameters plus `broker-rank`, `broker-nodes`,
  its own ClientToken per (attempt, rank), its rank's start-up script, and
  `MetadataOptions.InstanceMetadataTags=enabled`, so the script reads the `broker-peers`
  tag from IMDS;
- EFA: the instance types below get their EFA interfaces (EFA_INTERFACES), the layout
  of dstack's AWS backend: the first interface EFA (with its ENA) on network card 0,
  device 0; the others EFA-only on network cards 1..N-1, device 1, except on p5, where
  every fourth card (4, 8, ...) carries an EFA with its ENA. The subnet and security
  groups of `launch_options` move into each interface (EC2 takes them there only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from providers.aws import listing
from providers.aws.instances import NAME, tags_of
from providers.aws.launch import client_token, run_parameters, user_data
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_REQUEST, LaunchRequest
from providers.cloud import refuse_other_request
from providers.cloudgang import TAG_NODES, TAG_PEERS, Node, domain_name
from providers.errors import InvalidRequest, NotFound, ProviderError, RateLimited
from providers.gang import TAG_RANK

if TYPE_CHECKING:
    from providers.aws.provider import AwsProvider

# Instance type -> EFA interfaces (one per network card) for a gang on it.
EFA_INTERFACES: Mapping[str, int] = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
}
# Where every fourth network card carries an EFA with its ENA (dstack's p5 case).
EFA_WITH_ENA_EVERY_FOURTH = frozenset({"p5.48xlarge"})
DUPLICATE_GROUP = "InvalidPlacementGroup.Duplicate"
UNKNOWN_GROUP = "InvalidPlacementGroup.Unknown"


def fabric_of(instance_type: str) -> str:
    """The cross-node fabric EC2 gives a gang of this type ("efa", or "" for none)."""
    return "efa" if instance_type in EFA_INTERFACES else ""


def efa_interfaces(instance_type: str, network: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The NetworkInterfaces of one member of `instance_type` (module docstring);
    `network` holds SubnetId and Groups for every interface, when the operator set them."""
    count = EFA_INTERFACES[instance_type]
    first = {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "efa"}
    interfaces = [first]
    for card in range(1, count):
        with_ena = instance_type in EFA_WITH_ENA_EVERY_FOURTH and card % 4 == 0
        interfaces.append(
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 1,
                "InterfaceType": "efa" if with_ena else "efa-only",
            }
        )
    return [{**interface, **network, "DeleteOnTermination": True} for interface in interfaces]


def member_parameters(
    request: LaunchRequest,
    image: str,
    digest: str,
    launch_options: Mapping[str, Any],
    rank: int,
    fabric: str,
) -> dict[str, Any]:
    """RunInstances' parameters for the member of `rank` (module docstring)."""
    params = run_parameters(request, image, digest, launch_options)
    extra = [
        {"Key": TAG_RANK, "Value": str(rank)},
        {"Key": TAG_NODES, "Value": str(request.nodes)},
    ]
    for spec in params["TagSpecifications"]:
        spec["Tags"] = [*spec["Tags"], *extra]
    params["ClientToken"] = client_token(request.broker_id, f"{request.attempt_id}#{rank}")
    params["UserData"] = user_data(request, rank)
    placement = {"GroupName": domain_name(request.attempt_id)}
    if request.zone:
        placement["AvailabilityZone"] = request.zone
    params["Placement"] = placement
    metadata = dict(params.get("MetadataOptions") or {})
    params["MetadataOptions"] = {**metadata, "InstanceMetadataTags": "enabled"}
    if fabric == "efa":
        network: dict[str, Any] = {}
        if "SubnetId" in params:
            network["SubnetId"] = params.pop("SubnetId")
        if "SecurityGroupIds" in params:
            network["Groups"] = list(params.pop("SecurityGroupIds"))
        params["NetworkInterfaces"] = efa_interfaces(request.instance_type, network)
    return params


class AwsGang:
    """One attempt's gang on EC2 (providers.cloudgang.GangNodes). `request` (with the
    AMI, the request hash and the fabric) is needed only to launch; reading and ending
    need the region and attempt alone."""

    def __init__(
        self,
        provider: AwsProvider,
        region: str,
        attempt_id: str,
        launch: tuple[LaunchRequest, str, str, str] | None = None,
    ) -> None:
        self.provider, self.region, self.attempt_id = provider, region, attempt_id
        self.launching = launch  # (request, image, digest, fabric)
        self.group = domain_name(attempt_id)

    def members(self) -> list[Node]:
        raws = listing.describe(
            self.provider,
            self.region,
            Filters=[
                {"Name": f"tag:{TAG_BROKER}", "Values": [self._broker_id()]},
                {"Name": f"tag:{TAG_ATTEMPT}", "Values": [self.attempt_id]},
                {"Name": "tag-key", "Values": [TAG_RANK]},
            ],
        )
        if self.launching is not None:
            for raw in raws:
                launched_for = tags_of(raw).get(TAG_REQUEST)
                refuse_other_request(NAME, self.attempt_id, launched_for, self.launching[2])
        return nodes_of(self.provider, self.region, raws)

    def open_domain(self) -> None:
        request = self._request()
        tags = [{"Key": TAG_BROKER, "Value": request.broker_id}]
        tags.append({"Key": TAG_ATTEMPT, "Value": request.attempt_id})
        try:
            self.provider.call(
                "ec2",
                self.region,
                "create_placement_group",
                GroupName=self.group,
                Strategy="cluster",
                TagSpecifications=[{"ResourceType": "placement-group", "Tags": tags}],
            )
        except InvalidRequest as exc:
            if exc.code != DUPLICATE_GROUP:  # this attempt's, from a launch before
                raise

    def launch(self, rank: int) -> Node:
        request, image, digest, fabric = self._launching()
        params = member_parameters(
            request, image, digest, self.provider.launch_options, rank, fabric
        )
        try:
            answer = self.provider.call("ec2", self.region, "run_instances", **params)
        except ProviderError as exc:
            if not exc.retryable or isinstance(exc, RateLimited):
                raise
            # No answer, or a 5xx: AWS may have started it all the same.
            found = [node for node in self.members() if node.rank == rank]
            if not found:
                raise
            return found[0]
        return nodes_of(self.provider, self.region, answer["Instances"])[0]

    def end(self, node: Node) -> bool:
        return self.provider.terminate(node.instance.id)

    def close_domain(self) -> None:
        try:
            self.provider.call("ec2", self.region, "delete_placement_group", GroupName=self.group)
        except (InvalidRequest, NotFound) as exc:
            if exc.code != UNKNOWN_GROUP:
                raise

    def publish(self, nodes: Sequence[Node], value: str) -> None:
        ids = [node.instance.id.partition("/")[2] for node in nodes]
        self.provider.call(
            "ec2",
            self.region,
            "create_tags",
            Resources=ids,
            Tags=[{"Key": TAG_PEERS, "Value": value}],
        )

    def _broker_id(self) -> str:
        return self.launching[0].broker_id if self.launching else self.provider.broker_id

    def _launching(self) -> tuple[LaunchRequest, str, str, str]:
        if self.launching is None:
            raise AssertionError("this gang object only reads and ends members")
        return self.launching

    def _request(self) -> LaunchRequest:
        return self._launching()[0]


def nodes_of(provider: AwsProvider, region: str, raws: Sequence[dict]) -> list[Node]:
    """The member Nodes of DescribeInstances (or RunInstances) items of `region`."""
    return [
        Node(instance, raw.get("PrivateIpAddress") or "", tags_of(raw).get(TAG_PEERS, ""))
        for raw, instance in zip(raws, listing.instances(provider, region, raws), strict=True)
    ]
