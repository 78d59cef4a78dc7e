"""GcpProvider: the broker's `Provider` on Google Compute Engine (google-cloud-compute, REST).

One attempt is one VM named `instance_name(attempt_id)` in one zone; its id is
"<zone>/<name>". The choices, and why:

- Launch is idempotent per attempt: the name is a function of the attempt, a VM of that
  name is adopted when its `broker-request` label (a hash of the request) matches, else
  InvalidRequest; each insert carries a requestId (UUID5 of project, zone and attempt),
  so an insert retried after a lost answer gets GCE's first operation back.
- A request without a zone tries its region's zones that offer the machine type (and the
  GPU it attaches) in name order, skipping those cooling down after a stockout; each
  stockout cools its zone down, and the last one is raised when every zone failed.
- Spot VMs: provisioningModel SPOT, instanceTerminationAction DELETE by default: a
  reclaimed VM stops costing at once (no stopped disk left behind) and the broker
  relaunches from its checkpoint anyway. GCE records a compute.instances.preempted
  operation, so describe() still says "interrupted" once the VM is gone and
  interruptions() reports it. `spot_action="STOP"` keeps the VM TERMINATED instead.
- GCE takes no spot price cap: `max_price_per_hour` is not sent (the planner filters
  on price already).
- N1 machine types get their GPU attached (guestAccelerators) from the request's catalog
  row; A2/A3/G2 types carry theirs. GPU and spot VMs cannot live-migrate
  (onHostMaintenance TERMINATE).
- Labels (lowercase letters, digits, '-', '_', at most 63) carry the tags for filtering;
  the exact tags also go into the `broker-tags` metadata item, which Instance.tags reads.
- GCE cannot know a job's exit code: `exit_code` is always None.
- A launch of `nodes > 1` is a gang (gang.py, docs/distributed.md): a compact resource
  policy per attempt, one VM per rank in one zone, GPUDirect NICs on a3 high/mega, all
  or nothing; its id is "<zone>/gang/<attempt-id>", and once every member has an IP its
  metadata gets `broker-peers` (head first), which the members read.
- Every SDK call runs with retry=None and a timeout; throttling (429, 5xx) is retried here
  with bounded backoff (providers.cloud.with_backoff), so nothing hangs (api.py).

The rest lives beside this module: vm.py (names, ids, labels, states, the insert
body), attach.py (request checks, the GPU to attach), api.py (the calls to GCE),
operations.py (GCE's operations), sightings.py (what this object has seen of its VMs,
as Instances), capacity.py (zones and quotas: the offers' view).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pricing.userio.settings import resolve_text
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
    ReportedOnce,
    Unavailable,
    WallClock,
    catalog_regions,
    catalog_rows,
    cooling_down,
    cooling_unavailable,
    endpoint_override,
    launch_order,
    refuse_other_request,
    restrict_offers,
)
from providers.cloudgang import (
    Node,
    Remembered,
    end_gang,
    gang_id,
    gang_instance,
    group_by_attempt,
    is_member,
    parse_gang_id,
)
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound, ProviderError
from providers.gcp import capacity, errors, gang
from providers.gcp.api import Compute, credentials_and_project
from providers.gcp.attach import gpu_to_attach, validate
from providers.gcp.capacity import CapacityView, region_of
from providers.gcp.operations import PREEMPTED
from providers.gcp.sightings import Sightings
from providers.gcp.vm import (
    DEFAULT_IMAGE,
    NAME,
    NAME_PREFIX,
    SCOPES,
    STATES,
    TAGS_METADATA,
    insert_body,
    instance_name,
    instance_state,
    is_spot,
    label_value,
    parse_id,
    parse_time,
    request_id,
    tag_of,
    zone_of,
)
from providers.workdir import stage_workdir

if TYPE_CHECKING:
    from pricing.table import OfferTable

PREEMPTION_NOTICE_SECONDS = 30.0  # GCE's shutdown window for a reclaimed spot VM
CAPACITY_TTL_SECONDS = 300.0
SPOT_ACTIONS = ("DELETE", "STOP")
__all__ = [  # the helpers live in vm.py / operations.py; these names stay importable here
    "CAPACITY_TTL_SECONDS",
    "DEFAULT_IMAGE",
    "NAME",
    "NAME_PREFIX",
    "PREEMPTED",
    "PREEMPTION_NOTICE_SECONDS",
    "SCOPES",
    "SPOT_ACTIONS",
    "TAGS_METADATA",
    "GcpProvider",
    "instance_name",
    "instance_state",
    "label_value",
    "parse_id",
    "request_id",
]


class GcpProvider(Restrictions, Gangs):
    """A `Provider` on Compute Engine (see the module docstring for the choices).

    `project`: default GOOGLE_CLOUD_PROJECT, CLOUDSDK_CORE_PROJECT, else the one
    google.auth.default() reports; `credentials`: default google.auth.default().
    `image`: the boot image (BROKER_GCP_IMAGE overrides the default; a request whose image
    is a GCE image path uses that). `regions`: where to list and read capacity (default:
    the catalog's GCP regions, else CLOUDSDK_COMPUTE_REGION, else every region).
    `gpu_network_prefix`: the GPU networks of a3 gang members (gang.py).
    """

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
        project: str | None = None,
        credentials: Any = None,
        image: str | None = None,
        spot_action: str = "DELETE",
        network: str = "global/networks/default",
        disk_gb: int = 100,
        timeout: float = 30.0,
        operation_timeout: float = 300.0,
        capacity_ttl: float = CAPACITY_TTL_SECONDS,
        gpu_network_prefix: str = "broker-gpu",
    ) -> None:
        if spot_action not in SPOT_ACTIONS:
            raise ValueError(f"spot_action {spot_action!r}: expected one of {SPOT_ACTIONS}")
        self._catalog = catalog
        self.regions = tuple(regions) if regions is not None else _default_regions(catalog)
        self.endpoint = endpoint or endpoint_override(NAME)
        self.clock: Clock = clock or WallClock()
        self.broker_id = broker_id
        self.cooldown = cooldown or CapacityCooldown(self.clock)
        self.credentials, self.project = credentials_and_project(credentials, project)
        self.image = image or resolve_text("gcp_image") or DEFAULT_IMAGE
        self.spot_action, self.network, self.disk_gb = spot_action, network, disk_gb
        self.timeout, self.operation_timeout = timeout, operation_timeout
        self.capacity_ttl = capacity_ttl
        self.gpu_network_prefix = gpu_network_prefix
        self._gangs = Remembered()
        self._gce = Compute(self.credentials, self.project, self.endpoint, timeout, sleep)
        self._seen = Sightings(self._gce, self.clock)
        self._reported = ReportedOnce()  # ids whose notice interruptions() returned
        self._views: Expiring[tuple, CapacityView] = Expiring(self.clock, capacity_ttl)
        self._restricted: Expiring[None, tuple[OfferTable, list[Unavailable]]] = Expiring(
            self.clock, capacity_ttl
        )

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """The catalog's GCP rows (in `regions`), restricted by zones and quotas (cached
        for `capacity_ttl` seconds) and by places cooling down after a stockout."""
        table, _ = self._restrict()
        cooling = cooling_unavailable(table, NAME, self.cooldown)
        return restrict_offers(table, NAME, cooling)[0] if cooling else table

    def unavailable(self) -> list[Unavailable]:
        """Why catalog rows are not sold now (as of the last `offers`), cool-downs included."""
        table, reasons = self._restrict()
        return [*reasons, *cooling_unavailable(table, NAME, self.cooldown)]

    def launch(self, request: LaunchRequest) -> Instance:
        validate(request)
        if request.nodes > 1:
            return gang.launch(self, request, request_hash(request))
        name, digest = instance_name(request.attempt_id), request_hash(request)
        found = self._gce.instances(f'name = "{name}"', (request.region,))
        if found:
            return self._adopt(found[0], digest, request)
        gpu = gpu_to_attach(request, self._catalog)
        zones = [request.zone] if request.zone else self._zones(request, gpu)
        staged = stage_workdir(NAME, request, resolve_text("gcp_staging_uri"))  # VM fetches it
        failure: InsufficientCapacity | None = None
        for zone in zones:
            if self.cooldown.cooling(request.instance_type, zone, request.market):
                continue
            try:
                return self._insert(staged, zone, name, digest, gpu)
            except InsufficientCapacity as exc:
                self.cooldown.mark(request.instance_type, zone, request.market)
                failure = exc
        if failure is not None:
            raise failure
        raise cooling_down(NAME, request, ", ".join(zones))

    def describe(self, instance_id: str) -> Instance:
        parsed = parse_gang_id(instance_id)
        if parsed is not None:
            found, nodes = gang.read(self, *parsed)
            return gang.view(found, nodes, parsed[0])
        zone, name = parse_id(instance_id)
        try:
            vm = self._gce.get(zone, name)
        except NotFound:
            return self._seen.vanished(instance_id, zone, name)
        return self._seen.remember(self._seen.instance(vm))

    def terminate(self, instance_id: str) -> bool:
        parsed = parse_gang_id(instance_id)
        if parsed is not None:
            found, nodes = gang.read(self, *parsed)
            if not nodes:  # all gone already (NotFound when never seen)
                return self._gangs.gone(instance_id, NAME).active
            return end_gang(found, nodes)
        zone, name = parse_id(instance_id)
        try:
            current = self._seen.instance(self._gce.get(zone, name))
        except NotFound:
            self._seen.vanished(instance_id, zone, name)  # NotFound when never known
            return False
        try:  # accepted is enough (the contract); deleting a stopped VM frees its disk
            self._gce.delete(zone, name, request_id(self.project, zone, f"delete/{name}"))
        except NotFound:
            return False
        if current.active:
            self._seen.remember(replace(current, state="terminated", ended_at=self.clock.now()))
        return current.active

    def list_instances(self) -> list[Instance]:
        vms = self._gce.instances(
            f'labels.{TAG_BROKER} = "{label_value(self.broker_id)}"', self.regions
        )
        ended_spot = any(STATES.get(vm.status) == "terminated" and is_spot(vm) for vm in vms)
        preempted = set(self._seen.preemptions()) if ended_spot else set()
        nodes = [gang.node_of(self, vm, preempted) for vm in vms]
        nodes = [n for n in nodes if n.instance.tag(TAG_BROKER) == self.broker_id]
        mine = [n.instance for n in nodes if not is_member(n.instance)]
        members: list[Node] = [n for n in nodes if is_member(n.instance)]
        for attempt, group in group_by_attempt(members).items():
            instance_id = gang_id(group[0].instance.zone, attempt)
            mine.append(self._gangs.seen(gang_instance(instance_id, group)))
        return sorted(mine, key=launch_order)

    def interruptions(self) -> list[InterruptionNotice]:
        fresh = {k: op for k, op in self._seen.preemptions().items() if k not in self._reported}
        if self.regions:
            fresh = {k: op for k, op in fresh.items() if region_of(k.split("/")[0]) in self.regions}
        ours = {k for k, i in self._seen.known.items() if i.tag(TAG_BROKER) == self.broker_id}
        if set(fresh) - ours:  # reclaimed VMs this object never saw: whose are they?
            named = self._gce.instances(f'name eq "{NAME_PREFIX}.*"', self.regions)
            owners = {f"{zone_of(vm)}/{vm.name}": tag_of(vm, TAG_BROKER) for vm in named}
            gone = {k for k in fresh if k not in owners and k.split("/")[1].startswith(NAME_PREFIX)}
            ours |= gone | {k for k, owner in owners.items() if owner == self.broker_id}
        notices = []
        for key, op in sorted(fresh.items()):
            if key not in ours:
                continue
            started = parse_time(op.insert_time) or self.clock.now()
            deadline = started + timedelta(seconds=PREEMPTION_NOTICE_SECONDS)
            seen = self._seen.known.get(key)
            if seen is not None and is_member(seen):  # a gang's node: the whole gang's notice
                key = gang_id(seen.zone, seen.attempt_id or "")
            notices.append(
                InterruptionNotice(
                    key, NAME, "spot-reclaim", self.clock.now(), deadline, op.status_message
                )
            )
        return self._reported.fresh(notices)

    def object_store(self) -> Any:
        raise NotImplementedError("gs:// checkpoints go through providers.storage")

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """0 for a type the catalog does not sell there, 1 for one no compact placement
        holds (N1...), else providers.cloudgang.MAX_CLOUD_GANG_NODES."""
        return gang.max_nodes(self, cloud, region, instance_type)

    # --- launching -----------------------------------------------------------------------

    def _zones(self, request: LaunchRequest, gpu: tuple[str, int] | None) -> list[str]:
        """The zones of the request's region that sell its machine type (and GPU)."""
        gpus = {gpu[0]} if gpu else set()
        view = self._view({request.instance_type}, gpus, (request.region,), quotas=False)
        zones = view.zones(request.region, request.instance_type, gpu[0] if gpu else None)
        if not zones:
            why = view.why_not(request.region, "", request.instance_type, gpu and gpu[0])
            raise InvalidRequest(NAME, why or f"{request.instance_type}: no zone sells it")
        return zones

    def _insert(
        self,
        request: LaunchRequest,
        zone: str,
        name: str,
        digest: str,
        gpu: tuple[str, int] | None,
        **member: Any,
    ) -> Instance:
        """Insert one VM and wait for it; `member`: a gang member's insert_body options."""
        action = f"insert {zone}/{name}"
        body = insert_body(
            request,
            zone,
            name,
            digest,
            gpu,
            image=self.image,
            spot_action=self.spot_action,
            network=self.network,
            disk_gb=self.disk_gb,
            **member,
        )
        try:
            operation = self._gce.insert(
                zone, body, request_id(self.project, zone, _insert_key(request, member)), action
            )
        except NotFound as exc:  # the zone, image or network the request names
            raise InvalidRequest(NAME, exc.message, code=exc.code) from None
        except InvalidRequest as exc:
            if exc.code != "alreadyExists":
                raise
            return self._adopt(self._gce.get(zone, name), digest, request)  # another launch won
        try:
            operation = self._gce.wait(zone, operation, action, self.operation_timeout)
        except ProviderError:  # never leave a VM behind an exception
            with contextlib.suppress(ProviderError):  # best effort
                self._gce.delete(zone, name)
            raise
        failure = errors.from_operation(operation, action)
        if failure is not None:
            raise failure
        return self._adopt(self._gce.get(zone, name), digest, request)

    def _adopt(self, vm: Any, digest: str, request: LaunchRequest) -> Instance:
        refuse_other_request(NAME, request.attempt_id, vm.labels.get(TAG_REQUEST), digest)
        return self._seen.remember(self._seen.instance(vm))

    # --- capacity ------------------------------------------------------------------------

    def _restrict(self) -> tuple[OfferTable, list[Unavailable]]:
        def make() -> tuple[OfferTable, list[Unavailable]]:
            rows = catalog_rows(self._catalog, NAME, self.regions)
            if not len(rows):
                return rows, []
            types, gpus, regions = capacity.needs(rows)
            return capacity.restrict(rows, self._view(types, gpus, regions))

        return self._restricted.get(None, make)

    def _view(
        self, types: set[str], gpus: set[str], regions: Sequence[str], quotas: bool = True
    ) -> CapacityView:
        key = (frozenset(types), frozenset(gpus), tuple(regions), quotas)
        return self._views.get(key, lambda: self._gce.capacity(types, gpus, regions, quotas))


def _insert_key(request: LaunchRequest, member: dict[str, Any]) -> str:
    """What an insert's requestId is made from: the attempt, and a gang member's rank."""
    rank = member.get("rank")
    return request.attempt_id if rank is None else f"{request.attempt_id}#{rank}"


def _default_regions(catalog: OfferTable | None) -> tuple[str, ...]:
    regions = catalog_regions(catalog, NAME)
    if regions:
        return regions
    region = os.environ.get("CLOUDSDK_COMPUTE_REGION", "")
    return (region,) if region else ()
