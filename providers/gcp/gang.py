"""An N-node gang on Compute Engine: one compact resource policy per attempt, one VM per rank.

The shared rules (all or nothing, peers, the gang's state) are `providers.cloudgang`;
this module is what only GCE has:

- the domain: a regional resource policy named `domain_name(attempt)` with
  `groupPlacementPolicy {collocation: COLLOCATED, vmCount: N}`; every member names it in
  `resourcePolicies`. Only the families in COMPACT_FAMILIES take one: a gang of another
  type is refused (max_gang_nodes says 1);
- a member: the VM `member_name(attempt, rank)` in one zone for the whole gang, labelled
  and tagged `broker-rank` and `broker-nodes`, its rank's start-up script; the peers go
  into its metadata as `broker-peers` (setMetadata), which the script reads from the
  metadata server;
- GPUDirect: a3-highgpu-8g (GPUDirect-TCPX) gets 4 more gVNIC interfaces, a3-megagpu-8g
  (GPUDirect-TCPXO) 8, one per GPU network: `<gpu_network_prefix>-<i>` networks with a
  subnetwork of the same name in the region (i = 1..N), which the operator creates;
- a request without a zone tries the region's zones in order, the whole gang in each
  (a stockout ends the zone's started members, cools the zone down, moves on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pricing.userio.settings import resolve_text
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_REQUEST, Instance, LaunchRequest
from providers.cloud import cooling_down, refuse_other_request
from providers.cloudgang import (
    MAX_CLOUD_GANG_NODES,
    TAG_PEERS,
    Node,
    domain_name,
    gang_fabric,
    gang_id,
    gang_instance,
    launch_gang,
    refresh,
    sold,
    with_vanished,
)
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound
from providers.gang import TAG_RANK
from providers.gcp import capacity, errors
from providers.gcp.capacity import region_of
from providers.gcp.vm import NAME, instance_name, label_value, parse_id, request_id, tag_of
from providers.workdir import stage_workdir

if TYPE_CHECKING:
    from providers.gcp.provider import GcpProvider

# Families whose VMs a compact placement policy can hold.
COMPACT_FAMILIES = frozenset({"a2", "a3", "a4", "c2", "c2d", "c3", "c3d", "g2", "h3", "n2", "n2d"})
# Machine type -> GPU NICs beside the VM's own (GPUDirect-TCPX, GPUDirect-TCPXO).
GPU_NICS: Mapping[str, int] = {"a3-highgpu-8g": 4, "a3-megagpu-8g": 8}


def compact(instance_type: str) -> bool:
    """Whether a compact placement policy can hold VMs of this machine type."""
    return capacity.family(instance_type) in COMPACT_FAMILIES


def member_name(attempt_id: str, rank: int) -> str:
    """The VM name of one rank of an attempt's gang (unique per attempt and rank)."""
    return instance_name(f"{attempt_id}.{rank}")


def policy_body(attempt_id: str, nodes: int) -> dict[str, Any]:
    """The compact resource policy of an attempt's gang (compute_v1 field names)."""
    return {
        "name": domain_name(attempt_id),
        "description": f"broker gang of attempt {attempt_id}",
        "group_placement_policy": {"collocation": "COLLOCATED", "vm_count": nodes},
    }


def gpu_nics(instance_type: str, region: str, prefix: str) -> list[dict[str, Any]]:
    """The GPUDirect NICs of one member of `instance_type` (none for other types)."""
    return [
        {
            "network": f"global/networks/{prefix}-{i}",
            "subnetwork": f"regions/{region}/subnetworks/{prefix}-{i}",
            "nic_type": "GVNIC",
        }
        for i in range(1, GPU_NICS.get(instance_type, 0) + 1)
    ]


class GcpGang:
    """One attempt's gang on GCE (providers.cloudgang.GangNodes), members in `zone`
    ("" to read or end them wherever they are in `region`). `launching` holds the
    (request, request hash) of a launch."""

    def __init__(
        self,
        provider: GcpProvider,
        region: str,
        attempt_id: str,
        zone: str = "",
        launching: tuple[LaunchRequest, str] | None = None,
    ) -> None:
        self.provider, self.region, self.attempt_id = provider, region, attempt_id
        self.zone, self.launching = zone, launching
        self.policy = domain_name(attempt_id)
        self.broker_id = launching[0].broker_id if launching else provider.broker_id

    def members(self) -> list[Node]:
        expression = (
            f'labels.{TAG_BROKER} = "{label_value(self.broker_id)}" AND '
            f'labels.{TAG_ATTEMPT} = "{label_value(self.attempt_id)}"'
        )
        vms = self.provider._gce.instances(expression, (self.region,))
        vms = [
            vm
            for vm in vms
            if tag_of(vm, TAG_RANK) is not None and tag_of(vm, TAG_ATTEMPT) == self.attempt_id
        ]
        if self.launching is not None:
            for vm in vms:
                launched_for = vm.labels.get(TAG_REQUEST)
                refuse_other_request(NAME, self.attempt_id, launched_for, self.launching[1])
        nodes = [node_of(self.provider, vm) for vm in vms]
        zone = nodes[0].instance.zone if nodes else ""
        return with_vanished(nodes, lambda rank: self._recall(zone, rank))

    def _recall(self, zone: str, rank: int) -> Instance | None:
        """A member GCE has forgotten, as Sightings tells how it ended (None: never was)."""
        name = member_name(self.attempt_id, rank)
        try:
            return self.provider._seen.vanished(f"{zone}/{name}", zone, name)
        except NotFound:
            return None

    def open_domain(self) -> None:
        request, _ = self._launching()
        gce, action = self.provider._gce, f"insert resource policy {self.policy}"
        key = request_id(gce.project, self.region, f"policy/{self.attempt_id}")
        try:
            operation = gce.insert_policy(
                self.region, policy_body(self.attempt_id, request.nodes), key
            )
        except InvalidRequest as exc:
            if exc.code == "alreadyExists":  # this attempt's, from a launch before
                return
            raise
        operation = gce.wait_region(self.region, operation, action, self.provider.operation_timeout)
        failure = errors.from_operation(operation, action)
        if failure is not None:
            raise failure

    def launch(self, rank: int) -> Node:
        request, digest = self._launching()
        name, provider = member_name(self.attempt_id, rank), self.provider
        link = f"projects/{provider.project}/regions/{self.region}/resourcePolicies/{self.policy}"
        nics = gpu_nics(request.instance_type, self.region, provider.gpu_network_prefix)
        member = {"rank": rank, "resource_policy": link, "gpu_nics": nics}
        provider._insert(request, self.zone, name, digest, None, **member)
        return node_of(provider, provider._gce.get(self.zone, name))

    def end(self, node: Node) -> bool:
        return self.provider.terminate(node.instance.id)

    def close_domain(self) -> None:
        gce, action = self.provider._gce, f"delete resource policy {self.policy}"
        try:
            operation = gce.delete_policy(self.region, self.policy)
        except NotFound:
            return
        operation = gce.wait_region(self.region, operation, action, self.provider.operation_timeout)
        failure = errors.from_operation(operation, action)
        if failure is not None:
            raise failure

    def publish(self, nodes: Sequence[Node], value: str) -> None:
        gce = self.provider._gce
        for node in nodes:
            zone, name = parse_id(node.instance.id)
            vm = gce.get(zone, name)
            items = {item.key: item.value for item in vm.metadata.items}
            items[TAG_PEERS] = value
            action = f"set the peers of {zone}/{name}"
            operation = gce.set_metadata(zone, name, vm.metadata.fingerprint, items)
            operation = gce.wait(zone, operation, action, self.provider.operation_timeout)
            failure = errors.from_operation(operation, action)
            if failure is not None:
                raise failure

    def _launching(self) -> tuple[LaunchRequest, str]:
        if self.launching is None:
            raise AssertionError("this gang object only reads and ends members")
        return self.launching


def node_of(provider: GcpProvider, vm: Any, preempted: set[str] | None = None) -> Node:
    """The member Node of a compute_v1.Instance (its Instance remembered)."""
    instance = provider._seen.remember(provider._seen.instance(vm, preempted))
    nics = list(vm.network_interfaces)
    address = nics[0].network_i_p if nics else ""
    peers = next((item.value for item in vm.metadata.items if item.key == TAG_PEERS), "")
    return Node(instance, address, peers)


def launch(provider: GcpProvider, request: LaunchRequest, digest: str) -> Instance:
    """Launch (or complete) the gang of `request` (module docstring)."""
    if not compact(request.instance_type):
        raise InvalidRequest(
            NAME, f"{request.instance_type}: no compact placement for a gang on this type"
        )
    gang_fabric(NAME, request, "")  # GCE's GPUDirect NICs are none of the named fabrics
    found = GcpGang(provider, request.region, request.attempt_id).members()
    if found:
        zones = [found[0].instance.zone]
    else:
        zones = [request.zone] if request.zone else provider._zones(request, None)
    staged = stage_workdir(NAME, request, resolve_text("gcp_staging_uri"))
    failure: InsufficientCapacity | None = None
    for zone in zones:
        if not found and provider.cooldown.cooling(request.instance_type, zone, request.market):
            continue
        gang = GcpGang(provider, request.region, request.attempt_id, zone, (staged, digest))
        try:
            return view(gang, launch_gang(gang, request.nodes), zone)
        except InsufficientCapacity as exc:
            provider.cooldown.mark(request.instance_type, zone, request.market)
            failure = exc
    if failure is not None:
        raise failure
    raise cooling_down(NAME, request, ", ".join(zones))


def view(gang: GcpGang, nodes: list[Node], zone: str) -> Instance:
    """The gang as one Instance, refreshed (peers, settle) and remembered."""
    nodes = refresh(gang, nodes)
    instance_id = gang_id(zone, gang.attempt_id)
    if not nodes:
        return gang.provider._gangs.gone(instance_id, NAME)
    return gang.provider._gangs.seen(gang_instance(instance_id, nodes))


def read(provider: GcpProvider, zone: str, attempt_id: str) -> tuple[GcpGang, list[Node]]:
    """The gang of an id's (zone, attempt) and its members now."""
    gang = GcpGang(provider, region_of(zone), attempt_id, zone)
    return gang, gang.members()


def max_nodes(provider: GcpProvider, cloud: str, region: str, instance_type: str) -> int:
    """`Gangs.max_gang_nodes` on GCE: 0 for a type not sold there, 1 for a type no
    compact placement holds, else MAX_CLOUD_GANG_NODES."""
    if cloud != NAME or not sold(provider._catalog, NAME, region, instance_type):
        return 0
    return MAX_CLOUD_GANG_NODES if compact(instance_type) else 1
