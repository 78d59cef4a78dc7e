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
- Every SDK call runs with retry=None and a timeout; throttling (429, 5xx) is retried here
  with bounded backoff (providers.cloud.with_backoff), so nothing hangs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pricing.gpus import find_gpu
from pricing.userio.settings import resolve_text
from providers.base import (
    ACTIVE_STATES,
    ENDED_STATES,
    TAG_BROKER,
    TAG_REQUEST,
    Clock,
    Instance,
    InstanceState,
    InterruptionNotice,
    LaunchRequest,
    request_hash,
)
from providers.capabilities import Restrictions
from providers.cloud import (
    CapacityCooldown,
    Unavailable,
    catalog_regions,
    catalog_rows,
    cooling_unavailable,
    endpoint_override,
    restrict_offers,
    with_backoff,
)
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
)
from providers.gcp import capacity, errors, operations
from providers.gcp.capacity import CapacityView, region_of
from providers.gcp.operations import PREEMPTED
from providers.gcp.vm import (
    DEFAULT_IMAGE,
    GCE_NAME,
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
    tags_of,
    zone_of,
)

if TYPE_CHECKING:
    from pricing.table import OfferTable

T = TypeVar("T")
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


class _UtcClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class GcpProvider(Restrictions):
    """A `Provider` on Compute Engine (see the module docstring for the choices).

    `project`: default GOOGLE_CLOUD_PROJECT, CLOUDSDK_CORE_PROJECT, else the one
    google.auth.default() reports; `credentials`: default google.auth.default().
    `image`: the boot image (BROKER_GCP_IMAGE overrides the default; a request whose image
    is a GCE image path uses that). `regions`: where to list and read capacity (default:
    the catalog's GCP regions, else CLOUDSDK_COMPUTE_REGION, else every region).
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
    ) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        if spot_action not in SPOT_ACTIONS:
            raise ValueError(f"spot_action {spot_action!r}: expected one of {SPOT_ACTIONS}")
        self._catalog = catalog
        self.regions = tuple(regions) if regions is not None else _default_regions(catalog)
        self.endpoint = endpoint or endpoint_override(NAME)
        self.clock: Clock = clock or _UtcClock()
        self.broker_id = broker_id
        self.cooldown = cooldown or CapacityCooldown(self.clock)
        self._sleep = sleep
        self.credentials, self.project = _credentials_and_project(credentials, project)
        self.image = image or resolve_text("gcp_image") or DEFAULT_IMAGE
        self.spot_action, self.network, self.disk_gb = spot_action, network, disk_gb
        self.timeout, self.operation_timeout = timeout, operation_timeout
        self.capacity_ttl = capacity_ttl
        options = ClientOptions(api_endpoint=self.endpoint) if self.endpoint else None

        def client(cls: type[T]) -> T:
            return cls(credentials=self.credentials, transport="rest", client_options=options)

        self._vms = client(compute_v1.InstancesClient)
        self._zone_ops = client(compute_v1.ZoneOperationsClient)
        self._all_ops = client(compute_v1.GlobalOperationsClient)
        self._capacity_clients = {
            "machine_types": client(compute_v1.MachineTypesClient),
            "accelerator_types": client(compute_v1.AcceleratorTypesClient),
            "regions": client(compute_v1.RegionsClient),
        }
        self._known: dict[str, Instance] = {}  # last seen, per id (launched or described)
        self._preempted: set[str] = set()  # ids GCE recorded a preemption for
        self._reported: set[str] = set()  # ids whose notice interruptions() returned
        self._ended_at: dict[str, datetime] = {}
        self._views: dict[tuple, tuple[datetime, CapacityView]] = {}
        self._restricted: tuple[datetime, OfferTable, list[Unavailable]] | None = None

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
        self._validate(request)
        name, digest = instance_name(request.attempt_id), request_hash(request)
        found = self._aggregated_instances(f'name = "{name}"', (request.region,))
        if found:
            return self._adopt(found[0], digest, request)
        gpu = self._gpu(request)
        zones = [request.zone] if request.zone else self._zones(request, gpu)
        failure: InsufficientCapacity | None = None
        for zone in zones:
            if self.cooldown.cooling(request.instance_type, zone, request.market):
                continue
            try:
                return self._insert(request, zone, name, digest, gpu)
            except InsufficientCapacity as exc:
                self.cooldown.mark(request.instance_type, zone, request.market)
                failure = exc
        if failure is not None:
            raise failure
        where = ", ".join(zones)
        raise InsufficientCapacity(
            NAME,
            f"{request.instance_type} ({request.market}) in {where} is cooling down "
            "after a capacity failure",
            code="cooldown",
        )

    def describe(self, instance_id: str) -> Instance:
        zone, name = parse_id(instance_id)
        try:
            vm = self._get(zone, name)
        except NotFound:
            return self._vanished(instance_id, zone, name)
        return self._remember(self._instance(vm))

    def terminate(self, instance_id: str) -> bool:
        from google.cloud import compute_v1

        zone, name = parse_id(instance_id)
        try:
            current = self._instance(self._get(zone, name))
        except NotFound:
            self._vanished(instance_id, zone, name)  # NotFound when never known
            return False
        delete = compute_v1.DeleteInstanceRequest(
            project=self.project,
            zone=zone,
            instance=name,
            request_id=request_id(self.project, zone, f"delete/{name}"),
        )
        try:  # accepted is enough (the contract); deleting a stopped VM frees its disk
            self._call(
                lambda: self._vms.delete_unary(request=delete, retry=None, timeout=self.timeout),
                f"delete {instance_id}",
            )
        except NotFound:
            return False
        if current.active:
            self._remember(replace(current, state="terminated", ended_at=self.clock.now()))
        return current.active

    def list_instances(self) -> list[Instance]:
        vms = self._aggregated_instances(f'labels.{TAG_BROKER} = "{label_value(self.broker_id)}"')
        ended_spot = any(STATES.get(vm.status) == "terminated" and is_spot(vm) for vm in vms)
        preempted = set(self._preemptions()) if ended_spot else set()
        mine = [self._instance(vm, preempted) for vm in vms]
        mine = [i for i in mine if i.tag(TAG_BROKER) == self.broker_id]
        for instance in mine:
            self._remember(instance)
        return sorted(mine, key=lambda i: (i.launched_at or datetime.min.replace(tzinfo=UTC), i.id))

    def interruptions(self) -> list[InterruptionNotice]:
        fresh = {k: op for k, op in self._preemptions().items() if k not in self._reported}
        if self.regions:
            fresh = {k: op for k, op in fresh.items() if region_of(k.split("/")[0]) in self.regions}
        ours = {k for k, i in self._known.items() if i.tag(TAG_BROKER) == self.broker_id}
        if set(fresh) - ours:  # reclaimed VMs this object never saw: whose are they?
            named = self._aggregated_instances(f'name eq "{NAME_PREFIX}.*"')
            owners = {f"{zone_of(vm)}/{vm.name}": tag_of(vm, TAG_BROKER) for vm in named}
            gone = {k for k in fresh if k not in owners and k.split("/")[1].startswith(NAME_PREFIX)}
            ours |= gone | {k for k, owner in owners.items() if owner == self.broker_id}
        notices = []
        for key, op in sorted(fresh.items()):
            if key not in ours:
                continue
            self._reported.add(key)
            started = parse_time(op.insert_time) or self.clock.now()
            deadline = started + timedelta(seconds=PREEMPTION_NOTICE_SECONDS)
            notices.append(
                InterruptionNotice(
                    key, NAME, "spot-reclaim", self.clock.now(), deadline, op.status_message
                )
            )
        return notices

    def object_store(self) -> Any:
        raise NotImplementedError("gs:// checkpoints go through providers.storage")

    # --- launching -----------------------------------------------------------------------

    def _validate(self, request: LaunchRequest) -> None:
        if request.cloud != NAME:
            raise InvalidRequest(NAME, f"a {request.cloud} request cannot launch on {NAME}")
        if request.nodes > 1:
            raise InvalidRequest(NAME, "multi-node launches on gcp are not supported yet")
        if not GCE_NAME.fullmatch(request.instance_type):
            raise InvalidRequest(NAME, f"{request.instance_type!r} is not a GCE machine type")
        if request.zone and (
            not GCE_NAME.fullmatch(request.zone) or region_of(request.zone) != request.region
        ):
            raise InvalidRequest(NAME, f"zone {request.zone!r} is not in {request.region}")

    def _gpu(self, request: LaunchRequest) -> tuple[str, int] | None:
        """(GCE accelerator type, count) to attach: N1 types only, from the request's
        catalog row (or the request itself, where it names one)."""
        if capacity.family(request.instance_type) not in capacity.ATTACHABLE_FAMILIES:
            return None
        name = getattr(request, "accelerator", "") or ""
        count = getattr(request, "accelerator_count", 0) or 0
        if not name:
            options = self._catalog_gpus(request)
            if len(options) > 1:
                sold = ", ".join(f"{n} x{c:g}" for n, c in sorted(options))
                raise InvalidRequest(
                    NAME,
                    f"{request.instance_type} in {request.region} is sold with {sold}: "
                    "the request must say which GPU to attach",
                )
            if not options:
                return None
            ((name, count),) = options
        model = find_gpu(name)
        try:
            gpu = capacity.attached_gpu(request.instance_type, model.name if model else name)
        except KeyError:
            raise InvalidRequest(NAME, f"GCE has no accelerator type for {name}") from None
        return (gpu, max(1, int(count))) if gpu else None

    def _catalog_gpus(self, request: LaunchRequest) -> set[tuple[str, float]]:
        table = self._catalog
        if table is None:
            return set()
        rows = (
            (table.text("cloud") == NAME)
            & (table.text("region") == request.region)
            & (table.text("instance_type") == request.instance_type)
            & (table.text("accelerator") != "")
        )
        if request.zone:
            rows &= (table.text("zone") == request.zone) | (table.text("zone") == "")
        names, counts = table.text("accelerator")[rows], table.numbers["accelerator_count"][rows]
        return set(zip(names.tolist(), counts.tolist(), strict=True))

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
    ) -> Instance:
        from google.cloud import compute_v1

        where = f"{zone}/{name}"
        insert = compute_v1.InsertInstanceRequest(
            project=self.project,
            zone=zone,
            instance_resource=compute_v1.Instance(self._body(request, zone, name, digest, gpu)),
            request_id=request_id(self.project, zone, request.attempt_id),
        )
        try:
            operation = self._call(
                lambda: self._vms.insert_unary(request=insert, retry=None, timeout=self.timeout),
                f"insert {where}",
            )
        except NotFound as exc:  # the zone, image or network the request names
            raise InvalidRequest(NAME, exc.message, code=exc.code) from None
        except InvalidRequest as exc:
            if exc.code != "alreadyExists":
                raise
            return self._adopt(self._get(zone, name), digest, request)  # another launch won
        try:
            operation = self._wait(zone, operation, f"insert {where}")
        except ProviderError:  # never leave a VM behind an exception
            self._discard(zone, name)
            raise
        failure = errors.from_operation(operation, f"insert {where}")
        if failure is not None:
            raise failure
        return self._adopt(self._get(zone, name), digest, request)

    def _body(
        self, request: LaunchRequest, zone: str, name: str, digest: str, gpu: tuple[str, int] | None
    ) -> dict[str, Any]:
        """The Instance resource for `request` in `zone` (vm.insert_body, our settings)."""
        return insert_body(
            request,
            zone,
            name,
            digest,
            gpu,
            image=self.image,
            spot_action=self.spot_action,
            network=self.network,
            disk_gb=self.disk_gb,
        )

    def _wait(self, zone: str, operation: Any, action: str) -> Any:
        """`operation` once DONE, or as it is after `operation_timeout` seconds."""
        return operations.wait(
            self._zone_ops,
            self.project,
            zone,
            operation,
            self._call,
            action,
            self.operation_timeout,
        )

    def _discard(self, zone: str, name: str) -> None:
        """Delete a VM whose launch failed half-way (best effort)."""
        with contextlib.suppress(ProviderError):
            self._call(
                lambda: self._vms.delete_unary(
                    project=self.project, zone=zone, instance=name, retry=None, timeout=self.timeout
                ),
                f"delete {zone}/{name}",
            )

    def _adopt(self, vm: Any, digest: str, request: LaunchRequest) -> Instance:
        if vm.labels.get(TAG_REQUEST) != digest:
            raise InvalidRequest(
                NAME, f"attempt {request.attempt_id} was launched with another request"
            )
        return self._remember(self._instance(vm))

    # --- reading -------------------------------------------------------------------------

    def _get(self, zone: str, name: str) -> Any:
        return self._call(
            lambda: self._vms.get(
                project=self.project, zone=zone, instance=name, retry=None, timeout=self.timeout
            ),
            f"get {zone}/{name}",
        )

    def _aggregated_instances(
        self, expression: str, regions: Sequence[str] | None = None
    ) -> list[Any]:
        """The VMs matching a filter in `regions` (default: the provider's; empty: all)."""
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=expression)

        def read() -> list[Any]:
            pager = self._vms.aggregated_list(request=request, retry=None, timeout=self.timeout)
            return [vm for _, listed in pager for vm in listed.instances]

        regions = self.regions if regions is None else regions
        vms = self._call(read, "list instances")
        return [vm for vm in vms if not regions or region_of(zone_of(vm)) in regions]

    def _preemptions(self) -> dict[str, Any]:
        """id -> the compute.instances.preempted operation GCE recorded for it."""
        found = operations.preemptions(self._all_ops, self.project, self._call, self.timeout)
        self._preempted.update(found)
        return found

    def _history(self, zone: str, name: str) -> set[str]:
        """The kinds of the operations GCE recorded on one VM (insert, delete, preempted)."""
        return operations.history(
            self._zone_ops, self.project, zone, name, self._call, self.timeout
        )

    def _vanished(self, instance_id: str, zone: str, name: str) -> Instance:
        """A VM GCE no longer knows: how it ended, or NotFound when it never existed."""
        known = self._known.get(instance_id)
        if known is not None and known.state in ENDED_STATES:
            return known
        history = self._history(zone, name)
        if PREEMPTED in history:
            self._preempted.add(instance_id)
            state: InstanceState = "interrupted"
        elif "delete" in history or known is not None:
            state = "terminated"
        else:
            raise NotFound(NAME, f"no instance {instance_id}")
        market = "spot" if state == "interrupted" else ""  # only spot VMs are preempted
        base = known or Instance(instance_id, NAME, NAME, region_of(zone), zone, "", market, state)
        return self._remember(replace(base, state=state, ended_at=self._end_of(instance_id)))

    def _instance(self, vm: Any, preempted: Iterable[str] | None = None) -> Instance:
        zone = zone_of(vm)
        key, spot = f"{zone}/{vm.name}", is_spot(vm)
        was_preempted = False
        if spot and STATES.get(vm.status) == "terminated":
            was_preempted = (
                key in self._preempted
                or "preempt" in vm.status_message.lower()
                or (
                    key in preempted
                    if preempted is not None
                    else PREEMPTED in self._history(zone, vm.name)
                )
            )
            if was_preempted:
                self._preempted.add(key)
        state = instance_state(vm.status, spot, was_preempted)
        ended = (
            None
            if state in ACTIVE_STATES
            else parse_time(vm.last_stop_timestamp) or self._end_of(key)
        )
        return Instance(
            id=key,
            provider=NAME,
            cloud=NAME,
            region=region_of(zone),
            zone=zone,
            instance_type=vm.machine_type.rsplit("/", 1)[-1],
            market="spot" if spot else "on-demand",
            state=state,
            tags=tags_of(vm),
            launched_at=parse_time(vm.creation_timestamp),
            ended_at=ended,
        )

    def _remember(self, instance: Instance) -> Instance:
        self._known[instance.id] = instance
        return instance

    def _end_of(self, key: str) -> datetime:
        """When this object first saw `key` ended (GCE does not always say)."""
        return self._ended_at.setdefault(key, self.clock.now())

    # --- capacity ------------------------------------------------------------------------

    def _restrict(self) -> tuple[OfferTable, list[Unavailable]]:
        now = self.clock.now()
        cached = self._restricted
        if cached is None or (now - cached[0]).total_seconds() >= self.capacity_ttl:
            rows = catalog_rows(self._catalog, NAME, self.regions)
            if not len(rows):
                cached = (now, rows, [])
            else:
                types, gpus, regions = capacity.needs(rows)
                view = self._view(types, gpus, regions)
                cached = (now, *capacity.restrict(rows, view))
            self._restricted = cached
        return cached[1], cached[2]

    def _view(
        self, types: set[str], gpus: set[str], regions: Sequence[str], quotas: bool = True
    ) -> CapacityView:
        key = (frozenset(types), frozenset(gpus), tuple(regions), quotas)
        now = self.clock.now()
        cached = self._views.get(key)
        if cached is None or (now - cached[0]).total_seconds() >= self.capacity_ttl:
            view = capacity.fetch(
                self._capacity_clients,
                self.project,
                regions,
                types,
                gpus,
                self._call,
                self.timeout,
                quotas=quotas,
            )
            cached = self._views[key] = (now, view)
        return cached[1]

    # --- calls -----------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T], action: str) -> T:
        """`fn()` with the SDK's errors mapped (errors.py) and throttling retried."""
        kinds = errors.sdk_errors()

        def once() -> T:
            try:
                return fn()
            except kinds as exc:  # the SDK's message may quote secrets: no chained cause
                raise errors.from_exception(exc, action) from None

        return with_backoff(once, sleep=self._sleep)


def _credentials_and_project(credentials: Any, project: str | None) -> tuple[Any, str]:
    project = (
        project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
    )
    if credentials is None or not project:
        import google.auth
        import google.auth.exceptions

        try:
            found, default_project = google.auth.default(scopes=list(SCOPES))
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise errors.from_exception(exc, "find Google credentials") from None
        credentials, project = credentials or found, project or default_project
    if not project:
        raise CredentialsError(NAME, "no GCP project: set GOOGLE_CLOUD_PROJECT or pass project=")
    return credentials, project


def _default_regions(catalog: OfferTable | None) -> tuple[str, ...]:
    regions = catalog_regions(catalog, NAME)
    if regions:
        return regions
    region = os.environ.get("CLOUDSDK_COMPUTE_REGION", "")
    return (region,) if region else ()
