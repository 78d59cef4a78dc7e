"""AWS EC2 as a broker `Provider`, through boto3.

Endpoints: `endpoint` (default BROKER_AWS_ENDPOINT) is passed as `endpoint_url` to every
client the adapter makes; Service Quotas (and Pricing, should the adapter ever ask it)
go to `quotas_endpoint`, default BROKER_AWS_QUOTAS_ENDPOINT, else the same endpoint. With
neither set, boto3 uses the public endpoints. Credentials come only from boto3's
standard chain (environment, ~/.aws, SSO, instance role).

How the contract is kept on EC2:
- `Instance.id` is "<region>/<instance-id>", enough to describe or terminate it anywhere.
- Launch is idempotent per attempt: the instance carries `instance_tags(request)` and
  `broker-request` (a hash of the request); a launch first looks the attempt up by tag,
  and RunInstances gets a ClientToken derived from (broker id, attempt id), so a retry
  after a timeout cannot start a second instance either. Another request under the same
  attempt id is InvalidRequest.
- The AMI: the request's image when it is an "ami-…", else `image_id` (option, or
  BROKER_AWS_IMAGE_ID); with neither the launch is InvalidRequest.
- Spot launches are one-time requests (`InstanceMarketOptions`), interruption behaviour
  terminate, `MaxPrice` = `request.max_price_per_hour` when set.
- States: pending and running as such; stopping, stopped, shutting-down and terminated
  are "terminated", or "interrupted" when AWS reclaimed a spot instance (state reason
  Server.SpotInstanceTermination/Shutdown, or its spot request ended
  "instance-terminated-by-…"/"instance-stopped-by-…" other than by the user). EC2 cannot
  know the job's exit code: it is None.
- `interruptions()` also reports a spot instance whose request is marked for termination
  (the two-minute notice) while it still runs, with its deadline.
- Multi-node launches are not supported yet (InvalidRequest).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pricing.userio.settings import resolve_text
from providers.aws.capacity import FILTER_CHUNK, CapacityView, read_capacity
from providers.aws.errors import map_error
from providers.base import (
    ENDED_STATES,
    TAG_ATTEMPT,
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
    restrict_offers,
    with_backoff,
)
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    RateLimited,
)

if TYPE_CHECKING:
    from pricing.table import OfferTable

T = TypeVar("T")

NAME = "aws"
DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 3  # botocore's attempts per call, the first included (standard mode)
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
CAPACITY_TTL_SECONDS = 300.0  # the capacity view costs ~10 calls per region
USER_DATA_LIMIT = 16 * 1024  # bytes, before base64
SPOT_NOTICE_SECONDS = 120.0
MAX_REGION_THREADS = 8
REGION_SHAPE = r"[a-z]{2}(?:-[a-z]+)+-\d+"
ID_SHAPE = re.compile(rf"(?P<region>{REGION_SHAPE})/(?P<iid>i-[0-9a-f]{{8,17}})")
INTERRUPTION_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
SPOT_MARKED = frozenset({"marked-for-termination", "marked-for-stop", "marked-for-hibernation"})
ENDING = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
# RunInstances parameters the adapter sets itself (launch_options may not override them).
OWN_PARAMETERS = frozenset(
    {
        "ImageId",
        "InstanceType",
        "MinCount",
        "MaxCount",
        "ClientToken",
        "UserData",
        "TagSpecifications",
        "Placement",
        "InstanceMarketOptions",
        "InstanceInitiatedShutdownBehavior",
    }
)
_ENDED_AT = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


class _UtcClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def client_token(broker_id: str, attempt_id: str) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters; scoped per account
    and region, so the broker id keeps two brokers sharing an account apart)."""
    token = f"{broker_id}:{attempt_id}"
    if len(token) <= 64 and token.isascii():
        return token
    return "broker-" + hashlib.sha256(token.encode()).hexdigest()[:57]


def spot_interrupted(status_code: str) -> bool:
    """Did AWS (not the user) end the instance of a spot request with this status?"""
    ended = status_code.startswith(("instance-terminated-", "instance-stopped-"))
    return ended and not status_code.endswith("-by-user")


class AwsProvider(Restrictions):
    """EC2 instances as broker instances (see the module docstring).

    `image_id`: the AMI for jobs that do not name one. `launch_options`: extra
    RunInstances parameters for every launch (IamInstanceProfile, SecurityGroupIds,
    SubnetId, KeyName, BlockDeviceMappings, ...). `max_attempts`: botocore's attempts
    per call (1: no retry); throttling is then also retried by
    `providers.cloud.with_backoff`, pausing with `sleep`.
    `session`: the boto3 Session to make clients from (a profile, say); default a new one.
    `broker_id`: whose instances list_instances() and interruptions() report (a launch
    tags its instance with the request's broker id).
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
        image_id: str | None = None,
        quotas_endpoint: str | None = None,
        launch_options: Mapping[str, Any] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        capacity_ttl: float = CAPACITY_TTL_SECONDS,
        session: boto3.session.Session | None = None,
    ) -> None:
        clashes = OWN_PARAMETERS & set(launch_options or {})
        if clashes:
            raise ValueError(f"launch_options may not set {', '.join(sorted(clashes))}")
        self.catalog = catalog
        self.endpoint = endpoint or endpoint_override(NAME)
        self.quotas_endpoint = (
            quotas_endpoint or resolve_text("aws_quotas_endpoint") or self.endpoint
        )
        self.clock = clock or _UtcClock()
        self.broker_id = broker_id
        self.cooldown = cooldown or CapacityCooldown(self.clock)
        self.sleep = sleep
        self.image_id = image_id or resolve_text("aws_image_id")
        self.launch_options = dict(launch_options or {})
        self.capacity_ttl = capacity_ttl
        self._config = Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
        )
        self._session = session or boto3.session.Session()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._view: tuple[datetime, CapacityView] | None = None
        self._reported: set[str] = set()
        self.regions = (
            tuple(regions or ())
            or catalog_regions(self.catalog, NAME)
            or (self._session.region_name or DEFAULT_REGION,)
        )

    # --- the Provider contract (docstrings in providers.base) ----------------------------

    def offers(self) -> OfferTable:
        """The catalog's AWS rows in `regions`, as this account can buy them now."""
        return self._restricted()[0]

    def unavailable(self) -> list[Unavailable]:
        """Why rows of offers() are not sold: the capacity view, quotas, cool-downs."""
        return self._restricted()[1]

    def launch(self, request: LaunchRequest) -> Instance:
        image = self._check(request)
        place = request.zone or request.region
        if self.cooldown.cooling(request.instance_type, place, request.market):
            raise InsufficientCapacity(
                NAME,
                f"{request.instance_type} ({request.market}) in {place} is cooling down "
                "after a capacity failure",
            )
        digest = request_hash(request)
        existing = self._find_attempt(request, digest)
        if existing is not None:
            return existing
        params = self._run_parameters(request, image, digest)
        try:
            answer = self.call("ec2", request.region, "run_instances", **params)
        except InsufficientCapacity:
            self.cooldown.mark(request.instance_type, place, request.market)
            raise
        except ProviderError as exc:
            if not exc.retryable or isinstance(exc, RateLimited):
                raise
            # No answer, or a 5xx: AWS may have started it all the same.
            found = self._find_attempt(request, digest)
            if found is None:
                raise
            return found
        return self._instances(request.region, answer["Instances"])[0]

    def describe(self, instance_id: str) -> Instance:
        region, raw = self._raw(instance_id)
        return self._instances(region, [raw])[0]

    def terminate(self, instance_id: str) -> bool:
        region, raw = self._raw(instance_id)
        state = raw["State"]["Name"]
        if state in ("shutting-down", "terminated"):
            return False
        answer = self.call("ec2", region, "terminate_instances", InstanceIds=[raw["InstanceId"]])
        changes = answer.get("TerminatingInstances") or [{}]
        previous = (changes[0].get("PreviousState") or {}).get("Name", state)
        return previous in ("pending", "running")

    def list_instances(self) -> list[Instance]:
        found = [i for part in self._each_region(self._list_region) for i in part]
        never = datetime.min.replace(tzinfo=UTC)
        return sorted(found, key=lambda i: (i.launched_at or never, i.id))

    def interruptions(self) -> list[InterruptionNotice]:
        notices = [n for part in self._each_region(self._region_notices) for n in part]
        with self._lock:
            fresh = [n for n in notices if n.instance_id not in self._reported]
            self._reported.update(n.instance_id for n in fresh)
        return sorted(fresh, key=lambda n: (n.noticed_at, n.instance_id))

    def object_store(self) -> Any:
        raise NotImplementedError("AWS checkpoints go through providers.storage (S3)")

    # --- AWS-only verbs ------------------------------------------------------------------

    def capacity_view(self) -> CapacityView:
        """The capacity view of the catalog's rows (cached for `capacity_ttl` seconds)."""
        now = self.clock.now()
        with self._lock:
            cached = self._view
        if cached is not None and now - cached[0] < timedelta(seconds=self.capacity_ttl):
            return cached[1]
        table = catalog_rows(self.catalog, NAME, self.regions)
        wanted: dict[str, set[tuple[str, str]]] = {}
        columns = (table.text("region"), table.text("instance_type"), table.text("zone"))
        for region, instance_type, zone in zip(*(c.tolist() for c in columns), strict=True):
            wanted.setdefault(region, set()).add((instance_type, zone))
        view = read_capacity(self, wanted, self._each_region)
        with self._lock:
            self._view = (now, view)
        return view

    def call(self, service: str, region: str, operation: str, **params: Any) -> dict:
        """One API call: errors mapped onto providers.errors, throttling backed off."""
        method = getattr(self._client(service, region), operation)
        action = f"{operation} in {region}"

        def once() -> dict:
            try:
                return method(**params)
            except (BotoCoreError, ClientError) as exc:
                raise map_error(exc, action) from None

        return with_backoff(once, sleep=self.sleep)

    def pages(self, service: str, region: str, operation: str, key: str, **params: Any) -> list:
        """Every item under `key` of every page of a paginated call."""
        paginator = self._client(service, region).get_paginator(operation)
        action = f"{operation} in {region}"

        def everything() -> list:
            try:
                return [item for page in paginator.paginate(**params) for item in page[key]]
            except (BotoCoreError, ClientError) as exc:
                raise map_error(exc, action) from None

        return with_backoff(everything, sleep=self.sleep)

    # --- launching -----------------------------------------------------------------------

    def _check(self, request: LaunchRequest) -> str:
        """The AMI to launch; InvalidRequest when EC2 could never do what is asked."""
        if request.cloud != NAME:
            raise InvalidRequest(NAME, f"request for cloud {request.cloud!r}, not aws")
        if request.nodes > 1:
            raise InvalidRequest(NAME, "multi-node launches on aws are not supported yet")
        if not re.fullmatch(REGION_SHAPE, request.region):
            raise InvalidRequest(NAME, f"{request.region!r} is not an AWS region")
        if request.max_price_per_hour is not None and not request.max_price_per_hour > 0:
            raise InvalidRequest(NAME, "max_price_per_hour must be positive")
        size = len(startup_script(request).encode())
        if size > USER_DATA_LIMIT:
            raise InvalidRequest(
                NAME, f"the start-up script is {size} bytes; EC2 user data takes {USER_DATA_LIMIT}"
            )
        if request.image.startswith("ami-"):
            return request.image
        if self.image_id:
            return self.image_id
        raise InvalidRequest(
            NAME,
            "no AMI to launch: pass image_id= or set BROKER_AWS_IMAGE_ID, "
            "or give the job an image 'ami-…'",
        )

    def _run_parameters(self, request: LaunchRequest, image: str, digest: str) -> dict:
        tags = [{"Key": k, "Value": v[:256]} for k, v in instance_tags(request)]
        tags.append({"Key": TAG_REQUEST, "Value": digest})
        params: dict[str, Any] = {
            **self.launch_options,
            "ImageId": image,
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": client_token(request.broker_id, request.attempt_id),
            "UserData": startup_script(request),  # botocore base64-encodes it
            "InstanceInitiatedShutdownBehavior": "terminate",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
        }
        if request.zone:
            params["Placement"] = {"AvailabilityZone": request.zone}
        if request.market == "spot":
            options: dict[str, str] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.max_price_per_hour is not None:
                options["MaxPrice"] = f"{request.max_price_per_hour:.6f}".rstrip("0").rstrip(".")
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        return params

    def _find_attempt(self, request: LaunchRequest, digest: str) -> Instance | None:
        """The instance already launched for this attempt (any state), or None;
        InvalidRequest when it was launched for another request."""
        raws = self._describe(
            request.region,
            Filters=[
                {"Name": f"tag:{TAG_BROKER}", "Values": [request.broker_id]},
                {"Name": f"tag:{TAG_ATTEMPT}", "Values": [request.attempt_id]},
            ],
        )
        if not raws:
            return None
        raws.sort(key=lambda raw: raw["State"]["Name"] in ENDING)  # a live one first
        raw = raws[0]
        if _tags(raw).get(TAG_REQUEST) != digest:
            raise InvalidRequest(
                NAME, f"attempt {request.attempt_id} was launched with another request"
            )
        return self._instances(request.region, [raw])[0]

    # --- reading instances ---------------------------------------------------------------

    def _raw(self, instance_id: str) -> tuple[str, dict]:
        """(region, DescribeInstances item) of an instance id; NotFound when unknown."""
        shape = ID_SHAPE.fullmatch(instance_id)
        if shape is None:
            raise NotFound(NAME, f"no instance {instance_id!r} (ids are '<region>/i-…')")
        region, iid = shape["region"], shape["iid"]
        raws = self._describe(region, InstanceIds=[iid])
        if not raws:
            raise NotFound(NAME, f"no instance {instance_id}")
        return region, raws[0]

    def _describe(self, region: str, **params: Any) -> list[dict]:
        reservations = self.pages("ec2", region, "describe_instances", "Reservations", **params)
        return [raw for reservation in reservations for raw in reservation.get("Instances", ())]

    def _list_region(self, region: str) -> list[Instance]:
        return self._instances(region, self._broker_raws(region))

    def _broker_raws(self, region: str) -> list[dict]:
        """DescribeInstances items of every instance of this broker in `region`."""
        try:
            return self._describe(
                region, Filters=[{"Name": f"tag:{TAG_BROKER}", "Values": [self.broker_id]}]
            )
        except CredentialsError as exc:
            if exc.code == "OptInRequired":  # a region this account never enabled
                return []
            raise

    def _region_notices(self, region: str) -> list[InterruptionNotice]:
        notices = []
        raws = [raw for raw in self._broker_raws(region) if raw.get("InstanceLifecycle") == "spot"]
        statuses = self._spot_statuses(region, raws, ended_only=False)
        for raw, instance in zip(raws, self._instances(region, raws, statuses), strict=True):
            status = statuses.get(raw.get("SpotInstanceRequestId", ""), ("", None))
            if instance.state == "interrupted":
                reason = (raw.get("StateReason") or {}).get("Message") or status[0]
                noticed = instance.ended_at or self.clock.now()
                notices.append(_notice(instance, noticed, instance.ended_at, reason))
            elif instance.active and status[0] in SPOT_MARKED:
                noticed = status[1] or self.clock.now()
                deadline = noticed + timedelta(seconds=SPOT_NOTICE_SECONDS)
                notices.append(_notice(instance, noticed, deadline, status[0]))
        return notices

    def _spot_statuses(
        self, region: str, raws: Iterable[dict], ended_only: bool = True
    ) -> dict[str, tuple[str, datetime | None]]:
        """Spot request id -> (status code, updated at) for the spot instances in `raws`
        that have a request (all of them, or only the ended ones)."""
        ids = sorted(
            {
                raw["SpotInstanceRequestId"]
                for raw in raws
                if raw.get("SpotInstanceRequestId")
                and (not ended_only or raw["State"]["Name"] in ENDING)
            }
        )
        if not ids:
            return {}
        requests = [  # a filter, not ids: AWS forgets closed requests within hours
            item
            for start in range(0, len(ids), FILTER_CHUNK)
            for item in self.pages(
                "ec2",
                region,
                "describe_spot_instance_requests",
                "SpotInstanceRequests",
                Filters=[
                    {
                        "Name": "spot-instance-request-id",
                        "Values": ids[start : start + FILTER_CHUNK],
                    }
                ],
            )
        ]
        return {
            item["SpotInstanceRequestId"]: (
                str((item.get("Status") or {}).get("Code", "")),
                (item.get("Status") or {}).get("UpdateTime"),
            )
            for item in requests
        }

    def _instances(
        self,
        region: str,
        raws: Sequence[dict],
        statuses: Mapping[str, tuple[str, datetime | None]] | None = None,
    ) -> list[Instance]:
        if statuses is None:
            statuses = self._spot_statuses(region, raws)
        return [self._instance(region, raw, statuses) for raw in raws]

    def _instance(
        self, region: str, raw: dict, statuses: Mapping[str, tuple[str, datetime | None]]
    ) -> Instance:
        spot = raw.get("InstanceLifecycle") == "spot"
        status = statuses.get(raw.get("SpotInstanceRequestId", ""), ("", None))[0]
        state = _state(raw, status)
        ended_at = None
        if state in ENDED_STATES:
            found = _ENDED_AT.search(raw.get("StateTransitionReason") or "")
            if found:
                ended_at = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)
        return Instance(
            id=f"{region}/{raw['InstanceId']}",
            provider=NAME,
            cloud=NAME,
            region=region,
            zone=(raw.get("Placement") or {}).get("AvailabilityZone", ""),
            instance_type=raw.get("InstanceType", ""),
            market="spot" if spot else "on-demand",
            state=state,
            exit_code=None,
            tags=tuple(sorted(_tags(raw).items())),
            launched_at=raw.get("LaunchTime"),
            ended_at=ended_at,
        )

    # --- offers --------------------------------------------------------------------------

    def _restricted(self) -> tuple[OfferTable, list[Unavailable]]:
        view = self.capacity_view()
        table = catalog_rows(self.catalog, NAME, self.regions)
        items = (*view.unavailable, *cooling_unavailable(table, NAME, self.cooldown))
        return restrict_offers(table, NAME, items, view.headroom)

    # --- clients -------------------------------------------------------------------------

    def _client(self, service: str, region: str) -> Any:
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                quotas = service in ("service-quotas", "pricing")
                endpoint = self.quotas_endpoint if quotas else self.endpoint
                client = self._session.client(
                    service, region_name=region, endpoint_url=endpoint, config=self._config
                )
                self._clients[(service, region)] = client
            return client

    def _each_region(
        self, work: Callable[[str], T], regions: Sequence[str] | None = None
    ) -> list[T]:
        """`work(region)` for every region (default: `regions`), side by side."""
        regions = list(self.regions if regions is None else regions)
        if len(regions) <= 1:
            return [work(region) for region in regions]
        workers = min(MAX_REGION_THREADS, len(regions))
        with ThreadPoolExecutor(workers, thread_name_prefix="aws-region") as pool:
            return list(pool.map(work, regions))


def _tags(raw: Mapping[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in raw.get("Tags") or ()}


def _state(raw: Mapping[str, Any], spot_status: str) -> InstanceState:
    name = raw["State"]["Name"]
    if name in ("pending", "running"):
        return name
    reason = (raw.get("StateReason") or {}).get("Code", "")
    if raw.get("InstanceLifecycle") == "spot" and (
        reason in INTERRUPTION_REASONS or spot_interrupted(spot_status)
    ):
        return "interrupted"
    return "terminated"


def _notice(
    instance: Instance, noticed: datetime, deadline: datetime | None, detail: str
) -> InterruptionNotice:
    return InterruptionNotice(
        instance_id=instance.id,
        provider=NAME,
        kind="spot-reclaim",
        noticed_at=noticed,
        deadline=deadline,
        detail=detail,
    )
