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
- A job's workdir is uploaded to `staging_uri` (an s3:// prefix, BROKER_AWS_STAGING_URI)
  before the launch, once per archive, and the user data fetches it with the instance
  profile's credentials (`aws s3 cp`): the profile (launch_options' IamInstanceProfile)
  needs s3:GetObject there, and the AMI the AWS CLI. No credentials are in user data.
- A container image (any image but an "ami-…") runs with `docker run --gpus all` on the
  AMI, which needs docker and the NVIDIA container toolkit (the Deep Learning AMIs have
  both).
- A launch of `nodes > 1` is a gang (providers/aws/gang.py, docs/distributed.md): one
  cluster placement group per attempt, one instance per rank tagged `broker-rank`, EFA
  interfaces on p4d/p4de/p5, all or nothing; its id is "<region>/gang/<attempt-id>",
  and once every member has a private IP the `broker-peers` tag (head first) is set on
  each, which the members read from IMDS.

Beside this module: launch.py (a request as RunInstances parameters, what EC2 refuses),
instances.py (EC2's answers as Instances and notices), listing.py (DescribeInstances and
the spot requests), capacity.py (offerings and quotas: the offers' view).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pricing.userio.settings import resolve_text
from providers.aws import listing
from providers.aws.capacity import CapacityView, read_capacity
from providers.aws.errors import map_error
from providers.aws.gang import AwsGang, fabric_of
from providers.aws.instances import NAME
from providers.aws.launch import OWN_PARAMETERS, choose_image, run_parameters
from providers.base import Clock, Instance, InterruptionNotice, LaunchRequest, request_hash
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
    restrict_offers,
    sdk_call,
)
from providers.cloudgang import (
    MAX_CLOUD_GANG_NODES,
    Node,
    end_gang,
    gang_fabric,
    gang_id,
    gang_instance,
    group_by_attempt,
    is_member,
    launch_gang,
    parse_gang_id,
    refresh,
    sold,
)
from providers.errors import InsufficientCapacity, NotFound, ProviderError, RateLimited
from providers.workdir import stage_workdir

if TYPE_CHECKING:
    from pricing.table import OfferTable

T = TypeVar("T")

DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 3  # botocore's attempts per call, the first included (standard mode)
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
CAPACITY_TTL_SECONDS = 300.0  # the capacity view costs ~10 calls per region
MAX_REGION_THREADS = 8


class AwsProvider(Restrictions, Gangs):
    """EC2 instances as broker instances (see the module docstring).

    `image_id`: the AMI for jobs that do not name one. `launch_options`: extra
    RunInstances parameters for every launch (IamInstanceProfile, SecurityGroupIds,
    SubnetId, KeyName, BlockDeviceMappings, ...). `max_attempts`: botocore's attempts
    per call (1: no retry); throttling is then also retried by
    `providers.cloud.with_backoff`, pausing with `sleep`.
    `session`: the boto3 Session to make clients from (a profile, say); default a new one.
    `broker_id`: whose instances list_instances() and interruptions() report (a launch
    tags its instance with the request's broker id). `staging_uri`: the s3:// prefix a
    job's workdir is uploaded to (default BROKER_AWS_STAGING_URI).
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
        staging_uri: str | None = None,
    ) -> None:
        clashes = OWN_PARAMETERS & set(launch_options or {})
        if clashes:
            raise ValueError(f"launch_options may not set {', '.join(sorted(clashes))}")
        self.catalog = catalog
        self.endpoint = endpoint or endpoint_override(NAME)
        self.quotas_endpoint = (
            quotas_endpoint or resolve_text("aws_quotas_endpoint") or self.endpoint
        )
        self.clock = clock or WallClock()
        self.broker_id = broker_id
        self.cooldown = cooldown or CapacityCooldown(self.clock)
        self.sleep = sleep
        self.image_id = image_id or resolve_text("aws_image_id")
        self.staging_uri = staging_uri or resolve_text("aws_staging_uri")
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
        self._views: Expiring[None, CapacityView] = Expiring(self.clock, capacity_ttl)
        self._reported = ReportedOnce()
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
        image = choose_image(request, self.image_id)
        place = request.zone or request.region
        if self.cooldown.cooling(request.instance_type, place, request.market):
            raise cooling_down(NAME, request, place)
        digest = request_hash(request)
        if request.nodes > 1:
            try:
                return self._launch_gang(request, image, digest)
            except InsufficientCapacity:
                self.cooldown.mark(request.instance_type, place, request.market)
                raise
        existing = self._find_attempt(request, digest)
        if existing is not None:
            return existing
        staged = stage_workdir(NAME, request, self.staging_uri)  # the VM fetches it from S3
        params = run_parameters(staged, image, digest, self.launch_options)
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
        return listing.instances(self, request.region, answer["Instances"])[0]

    def describe(self, instance_id: str) -> Instance:
        gang = parse_gang_id(instance_id)
        if gang is not None:
            return self._gang_view(AwsGang(self, *gang), self._gang_nodes(*gang))
        region, raw = listing.read(self, instance_id)
        return listing.instances(self, region, [raw])[0]

    def terminate(self, instance_id: str) -> bool:
        gang = parse_gang_id(instance_id)
        if gang is not None:
            return end_gang(AwsGang(self, *gang), self._gang_nodes(*gang))
        region, raw = listing.read(self, instance_id)
        state = raw["State"]["Name"]
        if state in ("shutting-down", "terminated"):
            return False
        answer = self.call("ec2", region, "terminate_instances", InstanceIds=[raw["InstanceId"]])
        changes = answer.get("TerminatingInstances") or [{}]
        previous = (changes[0].get("PreviousState") or {}).get("Name", state)
        return previous in ("pending", "running")

    def list_instances(self) -> list[Instance]:
        def one(region: str) -> list[Instance]:
            raws = listing.broker_items(self, region, self.broker_id)
            found = listing.instances(self, region, raws)
            members = [
                Node(i, raw.get("PrivateIpAddress") or "")
                for raw, i in zip(raws, found, strict=True)
                if is_member(i)
            ]
            gangs = [
                gang_instance(gang_id(region, attempt), nodes)
                for attempt, nodes in group_by_attempt(members).items()
            ]
            return [i for i in found if not is_member(i)] + gangs

        return sorted((i for part in self._each_region(one) for i in part), key=launch_order)

    def interruptions(self) -> list[InterruptionNotice]:
        def one(region: str) -> list[InterruptionNotice]:
            return listing.region_notices(self, region, self.broker_id, self.clock.now)

        return self._reported.fresh(n for part in self._each_region(one) for n in part)

    def object_store(self) -> Any:
        raise NotImplementedError("AWS checkpoints go through providers.storage (S3)")

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """MAX_CLOUD_GANG_NODES for a type the catalog sells in that AWS region (every
        EC2 type can share a cluster placement group; EFA where fabric_of says), 0 for
        one it does not sell."""
        if cloud != NAME or not sold(self.catalog, NAME, region, instance_type):
            return 0
        return MAX_CLOUD_GANG_NODES

    # --- AWS-only verbs ------------------------------------------------------------------

    def capacity_view(self) -> CapacityView:
        """The capacity view of the catalog's rows (cached for `capacity_ttl` seconds)."""
        return self._views.get(None, self._read_capacity)

    def call(self, service: str, region: str, operation: str, **params: Any) -> dict:
        """One API call: errors mapped onto providers.errors, throttling backed off."""
        method = getattr(self._client(service, region), operation)
        return self._mapped(lambda: method(**params), f"{operation} in {region}")

    def pages(self, service: str, region: str, operation: str, key: str, **params: Any) -> list:
        """Every item under `key` of every page of a paginated call."""
        paginator = self._client(service, region).get_paginator(operation)
        return self._mapped(
            lambda: [item for page in paginator.paginate(**params) for item in page[key]],
            f"{operation} in {region}",
        )

    # --- helpers -------------------------------------------------------------------------

    def _launch_gang(self, request: LaunchRequest, image: str, digest: str) -> Instance:
        fabric = gang_fabric(NAME, request, fabric_of(request.instance_type))
        staged = stage_workdir(NAME, request, self.staging_uri)  # the VMs fetch it from S3
        gang = AwsGang(self, request.region, request.attempt_id, (staged, image, digest, fabric))
        return self._gang_view(gang, launch_gang(gang, request.nodes))

    def _gang_nodes(self, region: str, attempt_id: str) -> list[Node]:
        nodes = AwsGang(self, region, attempt_id).members()
        if not nodes:
            raise NotFound(NAME, f"no gang {gang_id(region, attempt_id)}")
        return nodes

    def _gang_view(self, gang: AwsGang, nodes: list[Node]) -> Instance:
        """The gang as one Instance, refreshed (peers written, a failed or interrupted
        gang's other members ended): EC2 keeps ended instances, nothing to remember."""
        return gang_instance(gang_id(gang.region, gang.attempt_id), refresh(gang, nodes))

    def _find_attempt(self, request: LaunchRequest, digest: str) -> Instance | None:
        return listing.find_attempt(
            self, request.region, request.broker_id, request.attempt_id, digest
        )

    def _restricted(self) -> tuple[OfferTable, list[Unavailable]]:
        view = self.capacity_view()
        table = catalog_rows(self.catalog, NAME, self.regions)
        items = (*view.unavailable, *cooling_unavailable(table, NAME, self.cooldown))
        return restrict_offers(table, NAME, items, view.headroom)

    def _read_capacity(self) -> CapacityView:
        table = catalog_rows(self.catalog, NAME, self.regions)
        wanted: dict[str, set[tuple[str, str]]] = {}
        columns = (table.text("region"), table.text("instance_type"), table.text("zone"))
        for region, instance_type, zone in zip(*(c.tolist() for c in columns), strict=True):
            wanted.setdefault(region, set()).add((instance_type, zone))
        return read_capacity(self, wanted, self._each_region)

    def _mapped(self, call: Callable[[], T], action: str) -> T:
        return sdk_call(call, (BotoCoreError, ClientError), map_error, action, sleep=self.sleep)

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
