"""An N-node gang on Azure: one proximity placement group per attempt, one VM per rank.

The shared rules (all or nothing, peers, the gang's state) are `providers.cloudgang`;
this module is what only Azure has:

- the domain: a proximity placement group named `domain_name(attempt)` in the resource
  group, which every member references (`properties.proximityPlacementGroup`); for an
  InfiniBand SKU (IB_SKUS) also an availability set of the same name inside it, because
  Azure joins VMs' InfiniBand only within one availability set (or scale set): those
  members get no zone (the placement group keeps them close);
- a member: the VM `member_name(attempt, rank)`, tagged `broker-rank` and `broker-nodes`,
  its rank's start-up script; IB SKUs get accelerated networking on their NIC (the HPC
  image brings the InfiniBand drivers); its private IP is read from the NIC its inline
  configuration made (Microsoft.Network, through the compute client's pipeline);
- the peers: the `broker-peers` VM tag (a PATCH of the tags), which the start-up script
  reads from IMDS (`compute/tags`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from providers.azure.body import vm_name
from providers.azure.errors import NAME
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_REQUEST, Instance, LaunchRequest
from providers.cloud import refuse_other_request
from providers.cloudgang import (
    MAX_CLOUD_GANG_NODES,
    TAG_PEERS,
    Node,
    domain_name,
    gang_fabric,
    gang_id,
    gang_instance,
    group_by_attempt,
    is_member,
    launch_gang,
    refresh,
    sold,
    with_vanished,
)
from providers.errors import NotFound, ProviderError
from providers.gang import TAG_RANK

if TYPE_CHECKING:
    from providers.azure.provider import AzureProvider

# ND-series sizes with InfiniBand between VMs (the "r" in the name: RDMA).
IB_SKUS = frozenset(
    {
        "Standard_ND40rs_v2",
        "Standard_ND96asr_v4",
        "Standard_ND96amsr_A100_v4",
        "Standard_ND96isr_H100_v5",
        "Standard_ND96isr_H200_v5",
    }
)
NETWORK_API_VERSION = "2020-11-01"


def fabric_of(vm_size: str) -> str:
    """The cross-node fabric Azure gives a gang of this size ("infiniband" or "")."""
    return "infiniband" if vm_size in IB_SKUS else ""


def member_name(attempt_id: str, rank: int) -> str:
    """The VM name of one rank of an attempt's gang (unique per attempt and rank)."""
    return vm_name(f"{attempt_id}.{rank}")


def domain_ids(subscription: str, group: str, attempt_id: str) -> dict[str, str]:
    """The resource ids of an attempt's proximity placement group and availability set."""
    base = f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute"
    name = domain_name(attempt_id)
    return {
        "proximityPlacementGroup": f"{base}/proximityPlacementGroups/{name}",
        "availabilitySet": f"{base}/availabilitySets/{name}",
    }


class AzureGang:
    """One attempt's gang in the provider's resource group (providers.cloudgang.GangNodes);
    `launching` holds the (request, request hash, fabric) of a launch."""

    def __init__(
        self,
        provider: AzureProvider,
        attempt_id: str,
        launching: tuple[LaunchRequest, str, str] | None = None,
    ) -> None:
        self.provider, self.attempt_id, self.launching = provider, attempt_id, launching
        self.group = provider.resource_group
        self.name = domain_name(attempt_id)
        self.broker_id = launching[0].broker_id if launching else provider.broker_id

    def members(self) -> list[Node]:
        provider = self.provider
        vms = provider._compute().virtual_machines
        listed = provider._call(lambda: list(vms.list(self.group)), "list VMs")
        mine = [
            vm
            for vm in listed
            if (vm.tags or {}).get(TAG_BROKER) == self.broker_id
            and (vm.tags or {}).get(TAG_ATTEMPT) == self.attempt_id
            and TAG_RANK in (vm.tags or {})
        ]
        if self.launching is not None:
            for vm in mine:
                launched_for = (vm.tags or {}).get(TAG_REQUEST)
                refuse_other_request(NAME, self.attempt_id, launched_for, self.launching[1])
        nodes = []
        for vm in mine:
            instance = provider.describe(f"{self.group}/{vm.name}")
            tags = vm.tags or {}
            peers, rank = tags.get(TAG_PEERS, "").split(), int(tags[TAG_RANK])
            # Once the peers are written the member's IP is in them: no NIC read.
            address = peers[rank] if rank < len(peers) else self._address(vm)
            nodes.append(Node(instance, address, tags.get(TAG_PEERS, "")))
        return with_vanished(nodes, self._recall)

    def _recall(self, rank: int) -> Instance | None:
        """A member Azure has forgotten, as this object remembers it (None: never was)."""
        try:
            return self.provider._memory.gone(f"{self.group}/{member_name(self.attempt_id, rank)}")
        except NotFound:
            return None

    def open_domain(self) -> None:
        request, _, fabric = self._launching()
        compute, ids = self.provider._compute(), self._ids()
        tags = {TAG_BROKER: request.broker_id, TAG_ATTEMPT: request.attempt_id}
        ppg = {
            "location": request.region,
            "tags": tags,
            "properties": {"proximityPlacementGroupType": "Standard"},
        }
        self.provider._call(
            lambda: compute.proximity_placement_groups.create_or_update(self.group, self.name, ppg),
            f"create proximity placement group {self.name}",
        )
        if fabric == "infiniband":
            avset = {
                "location": request.region,
                "tags": tags,
                "sku": {"name": "Aligned"},
                "properties": {
                    "platformFaultDomainCount": 1,
                    "platformUpdateDomainCount": 1,
                    "proximityPlacementGroup": {"id": ids["proximityPlacementGroup"]},
                },
            }
            self.provider._call(
                lambda: compute.availability_sets.create_or_update(self.group, self.name, avset),
                f"create availability set {self.name}",
            )

    def launch(self, rank: int) -> Node:
        request, digest, fabric = self._launching()
        ids = self._ids()
        placement = {"proximityPlacementGroup": {"id": ids["proximityPlacementGroup"]}}
        if fabric == "infiniband":
            placement["availabilitySet"] = {"id": ids["availabilitySet"]}
        member = {
            "rank": rank,
            "placement": placement,
            "accelerated_networking": fabric == "infiniband",
        }
        name = member_name(self.attempt_id, rank)
        instance = self.provider._create(request, name, digest, **member)
        vm = self.provider._fetch(name)
        return Node(instance, self._address(vm) if vm is not None else "")

    def end(self, node: Node) -> bool:
        return self.provider.terminate(node.instance.id)

    def close_domain(self) -> None:
        compute = self.provider._compute()
        # The availability set first: it sits in the placement group.
        for operations in (compute.availability_sets, compute.proximity_placement_groups):
            try:
                self.provider._call(
                    lambda ops=operations: ops.delete(self.group, self.name), f"delete {self.name}"
                )
            except NotFound:
                continue

    def publish(self, nodes: Sequence[Node], value: str) -> None:
        vms = self.provider._compute().virtual_machines
        for node in nodes:
            name = node.instance.id.partition("/")[2]
            tags = {**dict(node.instance.tags), TAG_PEERS: value}
            self.provider._call(
                lambda name=name, tags=tags: vms.begin_update(
                    self.group, name, {"tags": tags}
                ).result(),
                f"tag {name} with its peers",
            )

    def _ids(self) -> dict[str, str]:
        return domain_ids(self.provider.subscription_id or "", self.group, self.attempt_id)

    def _launching(self) -> tuple[LaunchRequest, str, str]:
        if self.launching is None:
            raise AssertionError("this gang object only reads and ends members")
        return self.launching

    def _address(self, vm: Any) -> str:
        """The private IP of the VM's first NIC ("" while Azure has none to show)."""
        from azure.core.rest import HttpRequest

        interfaces = list((vm.network_profile and vm.network_profile.network_interfaces) or [])
        if not interfaces or not interfaces[0].id:
            return ""
        request = HttpRequest("GET", f"{interfaces[0].id}?api-version={NETWORK_API_VERSION}")
        compute = self.provider._compute()
        try:
            answer = self.provider._call(lambda: compute.send_request(request), "read a NIC")
        except ProviderError:
            return ""
        if answer.status_code != 200:
            return ""
        configs = answer.json().get("properties", {}).get("ipConfigurations", [])
        return str(configs[0].get("properties", {}).get("privateIPAddress", "")) if configs else ""


def launch(provider: AzureProvider, request: LaunchRequest, digest: str) -> Instance:
    """Launch (or complete) the gang of `request` (module docstring)."""
    fabric = gang_fabric(NAME, request, fabric_of(request.instance_type))
    gang = AzureGang(provider, request.attempt_id, (request, digest, fabric))
    return view(gang, launch_gang(gang, request.nodes))


def view(gang: AzureGang, nodes: list[Node]) -> Instance:
    """The gang as one Instance, refreshed (peers, settle) and remembered."""
    nodes = refresh(gang, nodes)
    instance_id = gang_id(gang.group, gang.attempt_id)
    if not nodes:
        return gang.provider._gangs.gone(instance_id, NAME)
    return gang.provider._gangs.seen(gang_instance(instance_id, nodes))


def max_nodes(provider: AzureProvider, cloud: str, region: str, instance_type: str) -> int:
    """`Gangs.max_gang_nodes` on Azure: 0 for a size the catalog does not sell there, else
    MAX_CLOUD_GANG_NODES (every size can share a proximity placement group)."""
    if cloud != NAME or not sold(provider.catalog, NAME, region.lower(), instance_type):
        return 0
    return MAX_CLOUD_GANG_NODES


def grouped(provider: AzureProvider, instances: list[Instance]) -> list[Instance]:
    """`instances` with the gang members grouped into one Instance per attempt (for
    list_instances: their IPs are not read)."""
    members = [Node(i) for i in instances if is_member(i)]
    gangs = [
        provider._gangs.seen(gang_instance(gang_id(provider.resource_group, attempt), nodes))
        for attempt, nodes in group_by_attempt(members).items()
    ]
    return [i for i in instances if not is_member(i)] + gangs


def member_notice_id(instance: Instance | None, instance_id: str) -> str:
    """The id a member's eviction notice names: its gang's."""
    if instance is None or not is_member(instance):
        return instance_id
    return gang_id(instance_id.partition("/")[0], instance.attempt_id or "")
