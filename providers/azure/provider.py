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
- Multi-node launches are not supported yet.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pricing.userio.settings import resolve_text
from providers.azure.capacity import CapacityView, capacity_view
from providers.azure.errors import map_error
from providers.base import (
    TAG_BROKER,
    TAG_REQUEST,
    Clock,
    Instance,
    InstanceState,
    InterruptionNotice,
    LaunchRequest,
    instance_tags,
    request_hash,
    startup_script,
)
from providers.capabilities import Restrictions
from providers.cloud import (
    CapacityCooldown,
    Unavailable,
    catalog_regions,
    catalog_rows,
    cooling_unavailable,
    endpoint_override,
    with_backoff,
)
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
)

if TYPE_CHECKING:
    from pricing.table import OfferTable

T = TypeVar("T")
NAME = "azure"
PUBLIC_ENDPOINT = "https://management.azure.com"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
ADMIN_USER = "broker"
NETWORK_API_VERSION = "2020-11-01"
VIEW_TTL_SECONDS = 300.0  # how long a capacity view (2 calls per region) is reused
CREATE_WAIT_SECONDS = 1800.0
EVICTION_POLICIES = ("Deallocate", "Delete")
_STOPPED = ("deallocated", "deallocating", "stopped", "stopping")


def vm_name(attempt_id: str) -> str:
    """The VM name of an attempt: "broker-" + the id in lowercase, with a short hash when
    the id had to change to fit (characters, length), so two ids never share a name."""
    base = re.sub(r"[^a-z0-9-]", "-", attempt_id.lower())
    if base != attempt_id or len(base) > 48 or base.endswith("-"):
        digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:8]
        base = f"{base[:48].rstrip('-')}-{digest}"
    return f"broker-{base}"


def image_reference(image: str) -> dict[str, str]:
    """The imageReference of "publisher:offer:sku:version" or of an image resource id."""
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"image {image!r}: expected publisher:offer:sku:version or an id")
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


class AzureProvider(Restrictions):
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
        self.resource_group = (
            resource_group or resolve_text("azure_resource_group") or "broker"
        )
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
        self._launched: dict[str, Instance] = {}  # launched by this object
        self._terminated: set[str] = set()  # ended by this object's terminate
        self._deleted: set[str] = set()  # VM deleted by this object
        self._ended: dict[str, Instance] = {}  # final states, as first seen
        self._notices: dict[str, InterruptionNotice] = {}  # found, not yet reported
        self._reported: set[str] = set()
        self._view: tuple[datetime, CapacityView] | None = None
        self._reasons: list[Unavailable] = []

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """This cloud's catalog rows in `regions`, restricted by SKU restrictions and
        vCPU quotas (the view is cached for VIEW_TTL_SECONDS)."""
        from providers.cloud import restrict_offers

        table = catalog_rows(self.catalog, NAME, self.regions)
        if len(table) == 0:
            self._reasons = []
            return table
        view = self._capacity_view(table)
        items = (*view.unavailable, *cooling_unavailable(table, NAME, self.cooldown))
        table, self._reasons = restrict_offers(table, NAME, items, view.headroom)
        return table

    def unavailable(self) -> list[Unavailable]:
        """Why offers were removed by the last `offers()` (computed now if not yet)."""
        if self._view is None:
            self.offers()
        return list(self._reasons)

    def launch(self, request: LaunchRequest) -> Instance:
        if request.nodes > 1:
            raise InvalidRequest(NAME, "multi-node launches on azure are not supported yet")
        if request.cloud != NAME:
            raise InvalidRequest(NAME, f"request for cloud {request.cloud!r} sent to azure")
        place = request.zone or request.region
        if self.cooldown.cooling(request.instance_type, place, request.market):
            raise InsufficientCapacity(
                NAME,
                f"{request.instance_type} in {place} ({request.market}) is cooling down "
                "after a capacity failure",
            )
        if not self.subnet_id:
            raise InvalidRequest(NAME, "no subnet: pass subnet_id or set BROKER_AZURE_SUBNET_ID")
        name, digest = vm_name(request.attempt_id), request_hash(request)
        instance_id = f"{self.resource_group}/{name}"
        existing = self._fetch(name, expand=True)
        if existing is not None:
            if (existing.tags or {}).get(TAG_REQUEST) != digest:
                raise InvalidRequest(
                    NAME, f"attempt {request.attempt_id} was launched with another request"
                )
            return self._remember(self._observe(instance_id, existing))
        body = self._body(request, name, digest)
        vms = self._compute().virtual_machines

        def create() -> None:
            poller = vms.begin_create_or_update(self.resource_group, name, body)
            poller.wait(self.create_wait)  # raises the async operation's error; a create
            # still running after create_wait is returned pending (describe follows it)

        try:
            self._call(create, f"create {name}")
        except ProviderError as error:
            self._discard(name)
            if isinstance(error, InsufficientCapacity):
                self.cooldown.mark(request.instance_type, place, request.market)
            if isinstance(error, NotFound):  # the resource group or subnet does not exist
                raise InvalidRequest(NAME, error.message, code=error.code) from None
            raise
        return self._remember(self.describe(instance_id))

    def describe(self, instance_id: str) -> Instance:
        with self._lock:
            if instance_id in self._ended:
                return self._ended[instance_id]
        group, name = self._split(instance_id)
        vm = self._fetch(name, group, expand=True)
        if vm is None:
            return self._gone(instance_id)
        return self._observe(instance_id, vm)

    def terminate(self, instance_id: str) -> bool:
        instance = self.describe(instance_id)
        live = instance.active
        group, name = self._split(instance_id)
        with self._lock:
            if live:
                self._terminated.add(instance_id)
            delete = instance_id not in self._deleted
        if delete:  # also after an eviction: the deallocated VM still bills its disk
            vms = self._compute().virtual_machines
            try:
                self._call(lambda: vms.begin_delete(group, name, polling=False), f"delete {name}")
            except ProviderError:
                with self._lock:
                    self._terminated.discard(instance_id)
                raise
            with self._lock:
                self._deleted.add(instance_id)
        if live:
            ended = replace(instance, state="terminated", ended_at=self.clock.now())
            with self._lock:
                self._ended[instance_id] = ended
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
            with self._lock:
                ended = self._ended.get(instance_id)
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
        with self._lock:
            remembered = [*self._ended, *self._launched]
        for instance_id in remembered:
            if instance_id not in found and instance_id not in present:
                found[instance_id] = self._gone(instance_id)
        return sorted(found.values(), key=_launch_order)

    def interruptions(self) -> list[InterruptionNotice]:
        self.list_instances()  # finds evictions and notes them
        with self._lock:
            notices = [n for i, n in self._notices.items() if i not in self._reported]
            self._reported.update(self._notices)
            self._notices.clear()
        return sorted(notices, key=lambda n: (n.noticed_at, n.instance_id))

    def object_store(self) -> Any:
        raise NotImplementedError("azure checkpoints go through providers.storage (az://)")

    # --- talking to Azure ---------------------------------------------------------------

    def _compute(self) -> Any:
        """The ComputeManagementClient, made on first use (no credential work before)."""
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        from azure.mgmt.compute import ComputeManagementClient

        if not self.subscription_id:
            raise CredentialsError(NAME, "no subscription: set AZURE_SUBSCRIPTION_ID")
        credential = self.credential
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = self.credential = DefaultAzureCredential()
        base_url = (self.endpoint or PUBLIC_ENDPOINT).rstrip("/")
        options: dict[str, Any] = {
            "base_url": base_url,
            "connection_verify": self.connection_verify,
            "retry_policy": sdk_retry_policy(),
            # A sovereign or private ARM takes tokens for its own audience.
            "credential_scopes": [f"{base_url}/.default"],
        }
        if self.polling_interval is not None:
            options["polling_interval"] = self.polling_interval
        return ComputeManagementClient(credential, self.subscription_id, **options)

    def _call(self, call: Callable[[], T], action: str) -> T:
        """`call()` with Azure errors mapped, throttling retried with backoff."""

        def mapped() -> T:
            try:
                return call()
            except ProviderError:
                raise
            except Exception as exc:  # the SDK's errors become ProviderErrors
                if not _is_azure_error(exc):
                    raise
                raise map_error(exc, action) from None

        return with_backoff(mapped, sleep=self.sleep)

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

    def _remember(self, instance: Instance) -> Instance:
        """Note an instance this object launched: if Azure forgets it unasked, it was evicted."""
        with self._lock:
            self._launched.setdefault(instance.id, instance)
        return instance

    def _discard(self, name: str) -> None:
        """Delete what a failed create left (a Failed VM); best effort, never raises."""
        try:
            vms = self._compute().virtual_machines
            self._call(
                lambda: vms.begin_delete(self.resource_group, name, polling=False), "clean up"
            )
        except ProviderError:
            pass

    # --- what Azure says, as Instances ----------------------------------------------------

    def _observe(self, instance_id: str, vm: Any, view: Any = None) -> Instance:
        """The Instance for a VM read from Azure; remembers ends and interruptions."""
        view = view or vm.instance_view
        codes = [str(s.code or "").lower() for s in (getattr(view, "statuses", None) or ())]
        spot = str(getattr(vm.priority, "value", vm.priority) or "") == "Spot"
        state = self._state(instance_id, spot, str(vm.provisioning_state or ""), codes)
        tags = tuple(sorted((vm.tags or {}).items()))
        instance = Instance(
            id=instance_id,
            provider=NAME,
            cloud=NAME,
            region=vm.location or "",
            zone=(vm.zones or [""])[0],
            instance_type=vm.hardware_profile.vm_size if vm.hardware_profile else "",
            market="spot" if spot else "on-demand",
            state=state,
            tags=tags,
            launched_at=getattr(vm, "time_created", None),
        )
        if instance.active:
            return instance
        return self._end(instance, detail=", ".join(codes))

    def _state(self, instance_id: str, spot: bool, provisioning: str, codes: list[str]):
        power = next((c.partition("/")[2] for c in codes if c.startswith("powerstate/")), "")
        provisioned = next(
            (c.partition("/")[2] for c in codes if c.startswith("provisioningstate/")),
            provisioning.lower(),
        )
        state: InstanceState
        if provisioning.lower() == "deleting" or provisioned.startswith("deleting"):
            state = "terminated"
        elif power == "running":
            state = "running"
        elif power in _STOPPED:
            with self._lock:
                ours = instance_id in self._terminated
            state = "interrupted" if spot and not ours else "terminated"
        elif provisioned.startswith("failed"):
            state = "terminated"
        else:  # creating, updating, starting
            state = "pending"
        return state

    def _gone(self, instance_id: str) -> Instance:
        """An instance Azure no longer has: what this object remembers, else NotFound."""
        with self._lock:
            if instance_id in self._ended:
                return self._ended[instance_id]
            known = self._launched.get(instance_id)
            ours = instance_id in self._terminated
        if known is None:
            raise NotFound(NAME, f"no VM {instance_id}")
        state: InstanceState = (
            "interrupted" if known.market == "spot" and not ours else "terminated"
        )
        return self._end(replace(known, state=state), detail="the VM no longer exists")

    def _end(self, instance: Instance, detail: str) -> Instance:
        """Record the first sight of an ended instance (and a notice when interrupted)."""
        with self._lock:
            if instance.id in self._ended:
                return self._ended[instance.id]
            now = self.clock.now()
            instance = replace(instance, ended_at=now)
            self._ended[instance.id] = instance
            if instance.state == "interrupted" and instance.id not in self._reported:
                self._notices[instance.id] = InterruptionNotice(
                    instance.id, NAME, "spot-reclaim", now, detail=f"spot eviction ({detail})"
                )
        return instance

    def _split(self, instance_id: str) -> tuple[str, str]:
        group, _, name = instance_id.partition("/")
        if not group or not name or "/" in name:
            raise NotFound(NAME, f"{instance_id!r} is not an azure instance id (group/vm)")
        return group, name

    # --- launching ---------------------------------------------------------------------

    def _body(self, request: LaunchRequest, name: str, digest: str) -> dict[str, Any]:
        """The VM as ARM takes it (wire names, so the body reads like the REST reference)."""
        script = startup_script(request).encode()
        key_path = f"/home/{ADMIN_USER}/.ssh/authorized_keys"
        nic = {
            "name": f"{name}-nic",
            "properties": {
                "primary": True,
                "deleteOption": "Delete",
                "ipConfigurations": [
                    {
                        "name": "ipconfig",
                        "properties": {"primary": True, "subnet": {"id": self.subnet_id}},
                    }
                ],
            },
        }
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": request.instance_type},
            "storageProfile": {
                "imageReference": dict(self.image),
                "osDisk": {
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
                },
            },
            "osProfile": {
                "computerName": name,
                "adminUsername": ADMIN_USER,
                "customData": base64.b64encode(script).decode(),
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {"publicKeys": [{"path": key_path, "keyData": self._public_key()}]},
                },
            },
            "networkProfile": {
                "networkApiVersion": NETWORK_API_VERSION,
                "networkInterfaceConfigurations": [nic],
            },
            "priority": "Regular",
        }
        if request.market == "spot":
            cap = request.max_price_per_hour
            properties["priority"] = "Spot"
            properties["evictionPolicy"] = self.eviction_policy
            properties["billingProfile"] = {"maxPrice": cap if cap is not None else -1}
        tags = dict(instance_tags(request))
        tags[TAG_REQUEST] = digest
        body: dict[str, Any] = {"location": request.region, "tags": tags, "properties": properties}
        if request.zone:
            body["zones"] = [request.zone]
        return body

    def _public_key(self) -> str:
        """The configured SSH key, else a throwaway one (its private half is dropped)."""
        with self._lock:
            if not self.ssh_public_key:
                from cryptography.hazmat.primitives import serialization
                from cryptography.hazmat.primitives.asymmetric import rsa

                public = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
                raw = public.public_bytes(
                    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
                )
                self.ssh_public_key = raw.decode() + " broker-throwaway"
            return self.ssh_public_key

    # --- the catalog -------------------------------------------------------------------

    def _capacity_view(self, table: OfferTable) -> CapacityView:
        from datetime import timedelta

        now = self.clock.now()
        with self._lock:
            if self._view is not None and now < self._view[0]:
                return self._view[1]
        wanted: dict[str, dict[str, set[str]]] = {}
        columns = (table.text("region"), table.text("instance_type"), table.text("zone"))
        for region, size, zone in zip(*columns, strict=True):
            wanted.setdefault(str(region), {}).setdefault(str(size), set()).add(str(zone))
        compute = self._compute()
        view = self._call(lambda: capacity_view(compute, wanted), "read capacity")
        with self._lock:
            self._view = (now + timedelta(seconds=VIEW_TTL_SECONDS), view)
        return view


def sdk_retry_policy(**options: Any) -> Any:
    """azure-core's RetryPolicy minus 429: the adapter backs off throttling itself
    (with_backoff, injectable sleep), so the two layers do not multiply."""
    from azure.core.pipeline.policies import RetryPolicy

    class _LeaveThrottlingToBroker(RetryPolicy):
        def is_retry(self, settings: Any, response: Any) -> bool:
            if response.http_response.status_code == 429:
                return False
            return super().is_retry(settings, response)

    return _LeaveThrottlingToBroker(**options)


def _launch_order(instance: Instance) -> tuple[str, str]:
    launched = instance.launched_at.isoformat() if instance.launched_at else ""
    return launched, instance.id


def _is_azure_error(exc: BaseException) -> bool:
    from azure.core.exceptions import AzureError

    return isinstance(exc, AzureError)
