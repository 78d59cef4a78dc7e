"""Azure virtual machines as a broker `Provider` (azure-mgmt-compute over ARM).

One VM per attempt, named from the attempt id ("broker-" + the id, lowercase), in
one resource group: the id is "<resource-group>/<vm-name>" and a PUT on that name is
idempotent. The VM carries `instance_tags(request)` plus `broker-request`, a hash
of the request, so the same attempt with another request is refused. The job runs
from custom data (cloud-init runs a script that starts with #!).

Choices, and why:
- Network: the NIC is declared inline in the VM (`networkInterfaceConfigurations`,
  Microsoft.Network API 2020-11-01, deleted with the VM), so no azure-mgmt-network
  is needed; the subnet is the one thing to configure (`subnet_id` or
  BROKER_AZURE_SUBNET_ID). No public IP: the job needs only outbound access.
- Image: Microsoft's Ubuntu HPC image (GPU drivers, CUDA, InfiniBand), overridable
  with `image` or BROKER_AZURE_IMAGE ("publisher:offer:sku:version" or an image id).
- Log-in: key only. Without `ssh_public_key` (BROKER_AZURE_SSH_PUBLIC_KEY) the VM
  gets a throwaway key whose private half is never kept: nobody logs in, the job
  runs unattended.
- Spot: priority Spot, billingProfile.maxPrice = the request's cap or -1 (pay up to
  the on-demand price, never evicted for price), eviction policy Deallocate by
  default: the evicted VM stays visible as PowerState/deallocated, so even a
  restarted controller sees "interrupted" (with Delete it could only see a 404).
  `terminate` deletes the VM, its disk and NIC, also after an eviction.
- Launch waits for the create to finish (up to `create_wait` seconds): Azure reports
  AllocationFailed only when its async operation ends. A create that fails leaves a
  Failed VM resource; launch deletes it before raising.
- Throttling (429) is retried here with `with_backoff`, not also by the SDK.
- Zones are Azure's ("1", "2", "3"); a request without a zone lets Azure choose.
- Azure forgets a deleted VM: after `terminate`, this object still answers for it
  ("terminated"), a new one raises NotFound. With eviction policy Delete, only the
  object that launched a spot VM can tell its eviction (404) from a deletion.
- `list_instances` and `interruptions` cost one list call plus one instance view per
  live broker VM. ARM shows an eviction only once it has happened (the 30 s warning,
  Scheduled Events, is visible only inside the VM), so notices carry no deadline.
- A launch of `nodes > 1` is a gang (gang.py, docs/distributed.md): a proximity
  placement group per attempt (and an availability set in it for InfiniBand SKUs), one
  VM per rank, all or nothing; its id is "<resource-group>/gang/<attempt-id>", and once
  every member has an IP each gets the `broker-peers` tag (head first), read from IMDS.

Beside this module: body.py (the VM body ARM takes, its name, image and key),
client.py (the SDK client and its calls), states.py (ARM's status codes as an
Instance), memory.py (what this object must remember of its VMs), capacity.py (SKU
restrictions and quotas: the offers' view).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from pricing.userio.settings import resolve_text
from providers.azure import client, gang
from providers.azure.body import (
    DEFAULT_IMAGE,
    image_reference,
    throwaway_public_key,
    vm_body,
    vm_name,
)
from providers.azure.capacity import CapacityView, capacity_view
from providers.azure.errors import NAME
from providers.azure.memory import Memory
from providers.azure.states import instance_of, status_codes
from providers.base import (
    TAG_BROKER,
    TAG_REQUEST,
    Clock,
    Instance,
    InterruptionNotice,
    LaunchRequest,
    request_hash,
)
from providers.capabilities import Gangs, Restrictions
from providers.cloud import (
    CapacityCooldown,
    Expiring,
    Unavailable,
    catalog_regions,
    catalog_rows,
    cooling_down,
    cooling_unavailable,
    endpoint_override,
    launch_order,
    refuse_other_request,
    refuse_unsupported,
    restrict_offers,
)
from providers.cloudgang import Remembered, end_gang, parse_gang_id
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound, ProviderError
from providers.workdir import stage_workdir

if TYPE_CHECKING:
    from pricing.table import OfferTable

T = TypeVar("T")
VIEW_TTL_SECONDS = 300.0  # how long a capacity view (2 calls per region) is reused
CREATE_WAIT_SECONDS = 1800.0
EVICTION_POLICIES = ("Deallocate", "Delete")


class AzureProvider(Restrictions, Gangs):
    """Azure VMs in one subscription and resource group (see the module docstring)."""

    name = NAME

    def __init__(
        self,
        *,
        catalog: OfferTable | None = None,
        regions: Sequence[str] | None = None,
        endpoint: str | None = None,
        clock: Clock | None = None,
        broker_id: str = "broker",
        cooldown: CapacityCooldown | None = None,
        sleep: Callable[[float], None] = time.sleep,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        credential: Any = None,
        connection_verify: bool | str = True,
        image: str | None = None,
        subnet_id: str | None = None,
        ssh_public_key: str | None = None,
        eviction_policy: str = "Deallocate",
        polling_interval: float | None = None,
        create_wait: float = CREATE_WAIT_SECONDS,
    ) -> None:
        if eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {', '.join(EVICTION_POLICIES)}")
        self.catalog = catalog
        self.regions = tuple(r.lower() for r in (regions or catalog_regions(catalog, NAME)))
        self.endpoint = endpoint or endpoint_override(NAME)
        self.cooldown = cooldown or CapacityCooldown(clock)
        self.clock = clock or self.cooldown.clock
        self.broker_id = broker_id
        self.sleep = sleep
        self.subscription_id = subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID")
        self.resource_group = resource_group or resolve_text("azure_resource_group") or "broker"
        self.credential = credential
        self.connection_verify = connection_verify
        self.image = image_reference(image or resolve_text("azure_image") or DEFAULT_IMAGE)
        self.subnet_id = subnet_id or resolve_text("azure_subnet_id")
        self.ssh_public_key = ssh_public_key or resolve_text("azure_ssh_public_key")
        self.eviction_policy = eviction_policy
        # Polling at once suits only a test endpoint; Azure's own pace is Retry-After/30 s.
        self.polling_interval = (
            polling_interval if polling_interval is not None else (0 if self.endpoint else None)
        )
        self.create_wait = create_wait
        self._client: Any = None
        self._lock = threading.RLock()
        self._memory = Memory(self.clock)
        self._gangs = Remembered()
        self._views: Expiring[None, CapacityView] = Expiring(self.clock, VIEW_TTL_SECONDS)
        self._reasons: list[Unavailable] | None = None  # as of the last offers()

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """This cloud's catalog rows in `regions`, restricted by SKU restrictions and
        vCPU quotas (the view is cached for VIEW_TTL_SECONDS)."""
        table = catalog_rows(self.catalog, NAME, self.regions)
        if len(table) == 0:
            self._reasons = []
            return table
        view = self._views.get(None, lambda: self._capacity_view(table))
        items = (*view.unavailable, *cooling_unavailable(table, NAME, self.cooldown))
        table, self._reasons = restrict_offers(table, NAME, items, view.headroom)
        return table

    def unavailable(self) -> list[Unavailable]:
        """Why offers were removed by the last `offers()` (computed now if not yet)."""
        if self._reasons is None:
            self.offers()
        return list(self._reasons or ())

    def launch(self, request: LaunchRequest) -> Instance:
        refuse_unsupported(NAME, request, gangs=True)
        place = request.zone or request.region
        if self.cooldown.cooling(request.instance_type, place, request.market):
            raise cooling_down(NAME, request, place)
        if not self.subnet_id:
            raise InvalidRequest(NAME, "no subnet: pass subnet_id or set BROKER_AZURE_SUBNET_ID")
        digest = request_hash(request)
        staged = stage_workdir(NAME, request, resolve_text("azure_staging_uri"))  # VM fetches it
        try:
            if request.nodes > 1:
                return gang.launch(self, staged, digest)
            name = vm_name(request.attempt_id)
            existing = self._fetch(name, expand=True)
            if existing is not None:
                launched_for = (existing.tags or {}).get(TAG_REQUEST)
                refuse_other_request(NAME, request.attempt_id, launched_for, digest)
                return self._memory.launched(
                    self._observe(f"{self.resource_group}/{name}", existing)
                )
            return self._create(staged, name, digest)
        except InsufficientCapacity:
            self.cooldown.mark(request.instance_type, place, request.market)
            raise

    def _create(self, request: LaunchRequest, name: str, digest: str, **member: Any) -> Instance:
        """Create the VM `name` and wait for it (up to create_wait); a failed create's VM
        is deleted before the error is raised. `member`: a gang member's vm_body options."""
        body = vm_body(
            request,
            name,
            digest,
            image=self.image,
            subnet_id=self.subnet_id or "",
            public_key=self._public_key(),
            eviction_policy=self.eviction_policy,
            **member,
        )
        vms = self._compute().virtual_machines

        def create() -> None:
            poller = vms.begin_create_or_update(self.resource_group, name, body)
            poller.wait(self.create_wait)  # raises the async operation's error; a create
            # still running after create_wait is returned pending (describe follows it)

        try:
            self._call(create, f"create {name}")
        except ProviderError as error:
            self._discard(name)
            if isinstance(error, NotFound):  # the resource group or subnet does not exist
                raise InvalidRequest(NAME, error.message, code=error.code) from None
            raise
        return self._memory.launched(self.describe(f"{self.resource_group}/{name}"))

    def describe(self, instance_id: str) -> Instance:
        parsed = parse_gang_id(instance_id)
        if parsed is not None:
            return gang.view(gang.AzureGang(self, parsed[1]), self._gang_nodes(parsed[1]))
        ended = self._memory.ended(instance_id)
        if ended is not None:
            return ended
        group, name = _split(instance_id)
        vm = self._fetch(name, group, expand=True)
        if vm is None:
            return self._memory.gone(instance_id)
        return self._observe(instance_id, vm)

    def terminate(self, instance_id: str) -> bool:
        parsed = parse_gang_id(instance_id)
        if parsed is not None:
            nodes = self._gang_nodes(parsed[1])
            if not nodes:  # all gone already (NotFound when never seen)
                return self._gangs.gone(instance_id, NAME).active
            return end_gang(gang.AzureGang(self, parsed[1]), nodes)
        instance = self.describe(instance_id)
        live = instance.active
        group, name = _split(instance_id)
        if self._memory.terminating(instance_id, live):
            # Also after an eviction: the deallocated VM still bills its disk.
            vms = self._compute().virtual_machines
            try:
                self._call(lambda: vms.begin_delete(group, name, polling=False), f"delete {name}")
            except ProviderError:
                self._memory.delete_failed(instance_id)
                raise
            self._memory.deleted(instance_id)
        if live:
            self._memory.terminated(instance)
        return live

    def list_instances(self) -> list[Instance]:
        """Broker VMs of the resource group (one list call, then one instance view per
        VM still live), plus the ones this object saw end and Azure has forgotten."""
        vms = self._compute().virtual_machines
        listed = self._call(lambda: list(vms.list(self.resource_group)), "list VMs")
        found: dict[str, Instance] = {}
        present = {f"{self.resource_group}/{vm.name}" for vm in listed}
        for vm in listed:
            tags = vm.tags or {}
            if tags.get(TAG_BROKER) != self.broker_id:
                continue
            if self.regions and (vm.location or "").lower() not in self.regions:
                continue
            instance_id = f"{self.resource_group}/{vm.name}"
            ended = self._memory.ended(instance_id)
            if ended is not None:
                found[instance_id] = ended
                continue
            view = self._call_or_none(
                lambda name=vm.name: vms.instance_view(self.resource_group, name)
            )
            if view is not None:
                found[instance_id] = self._observe(instance_id, vm, view)
            else:  # deleted since the list
                present.discard(instance_id)
        for instance_id in self._memory.known():
            if instance_id not in found and instance_id not in present:
                found[instance_id] = self._memory.gone(instance_id)
        return sorted(gang.grouped(self, list(found.values())), key=launch_order)

    def interruptions(self) -> list[InterruptionNotice]:
        self.list_instances()  # finds evictions and notes them
        return [  # a gang member's notice names its gang
            replace(
                n,
                instance_id=gang.member_notice_id(self._memory.ended(n.instance_id), n.instance_id),
            )
            for n in self._memory.notices()
        ]

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """0 for a size the catalog does not sell there, else MAX_CLOUD_GANG_NODES."""
        return gang.max_nodes(self, cloud, region, instance_type)

    def object_store(self) -> Any:
        raise NotImplementedError("azure checkpoints go through providers.storage (az://)")

    def _gang_nodes(self, attempt_id: str) -> list:
        return gang.AzureGang(self, attempt_id).members()

    # --- talking to Azure ---------------------------------------------------------------

    def _compute(self) -> Any:
        """The ComputeManagementClient, made on first use (no credential work before)."""
        with self._lock:
            if self._client is None:
                self._client, self.credential = client.make_client(
                    self.subscription_id,
                    self.credential,
                    self.endpoint,
                    self.connection_verify,
                    self.polling_interval,
                )
            return self._client

    def _call(self, call: Callable[[], T], action: str) -> T:
        """`call()` with Azure errors mapped, throttling retried with backoff."""
        return client.call(call, action, self.sleep)

    def _call_or_none(self, call: Callable[[], T]) -> T | None:
        """`_call`, with NotFound (deleted meanwhile) as None."""
        try:
            return self._call(call, "read")
        except NotFound:
            return None

    def _fetch(self, name: str, group: str | None = None, expand: bool = False) -> Any:
        """The VM `name` (with its instance view when `expand`), or None when Azure has none."""
        vms, group = self._compute().virtual_machines, group or self.resource_group
        options = {"expand": "instanceView"} if expand else {}
        return self._call_or_none(lambda: vms.get(group, name, **options))

    def _discard(self, name: str) -> None:
        """Delete what a failed create left (a Failed VM); best effort, never raises."""
        try:
            vms = self._compute().virtual_machines
            self._call(
                lambda: vms.begin_delete(self.resource_group, name, polling=False), "clean up"
            )
        except ProviderError:
            pass

    def _observe(self, instance_id: str, vm: Any, view: Any = None) -> Instance:
        """The Instance for a VM read from Azure; remembers ends and interruptions."""
        codes = status_codes(view or vm.instance_view)
        instance = instance_of(instance_id, vm, codes, self._memory.ended_by_us(instance_id))
        if instance.active:
            return instance
        return self._memory.end(instance, detail=", ".join(codes))

    def _public_key(self) -> str:
        """The configured SSH key, else a throwaway one (its private half is dropped)."""
        with self._lock:
            if not self.ssh_public_key:
                self.ssh_public_key = throwaway_public_key()
            return self.ssh_public_key

    def _capacity_view(self, table: OfferTable) -> CapacityView:
        """SKU restrictions and quotas for the catalog rows in `table` (2 calls a region)."""
        wanted: dict[str, dict[str, set[str]]] = {}
        columns = (table.text("region"), table.text("instance_type"), table.text("zone"))
        for region, size, zone in zip(*columns, strict=True):
            wanted.setdefault(str(region), {}).setdefault(str(size), set()).add(str(zone))
        compute = self._compute()
        return self._call(lambda: capacity_view(compute, wanted), "read capacity")


def _split(instance_id: str) -> tuple[str, str]:
    """(resource group, VM name) of an id; NotFound when it is not of that shape."""
    group, _, name = instance_id.partition("/")
    if not group or not name or "/" in name:
        raise NotFound(NAME, f"{instance_id!r} is not an azure instance id (group/vm)")
    return group, name
