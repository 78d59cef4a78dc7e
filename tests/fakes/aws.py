"""AWS for tests, over real HTTP on 127.0.0.1 (docs: offline-cloud-testing.md, AWS).

- `moto_server`: ONE in-process moto ThreadedMotoServer for the whole run (its first EC2
  call costs seconds); `aws_env` resets it per test (POST /moto-api/reset), registers an
  AMI and sets a fake, isolated AWS environment pointing boto3 at it (BROKER_AWS_ENDPOINT).
- `aws_clients`: the tests' own boto3 clients and parsed models, kept for the run.
- `aws_quotas`: a small JSON 1.1 server for what moto lacks, Service Quotas' EC2 codes
  (GetServiceQuota, ListServiceQuotas) and Pricing (GetProducts), set as
  BROKER_AWS_QUOTAS_ENDPOINT.
- Levers only the cloud has: `interrupt_spot` (AWS reclaims a spot instance, in moto's
  backend), `failing_ec2` / `failing_run_instances` (an EC2 action answers an AWS error
  code with the HTTP status AWS uses, so that botocore's retries run as they would),
  `spot_request_instance` and `set_spot_status` (a spot request and its status codes).

pytest finds fixtures by name in the test module (pytest_plugins belongs to the root
conftest only), so a module using them binds the names, e.g.
`moto_server, aws_clients, aws_env = fakes.moto_server, fakes.aws_clients, fakes.aws_env`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock

import pytest

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
# Fake credentials shaped like real ones, so that a leak would be caught by a test.
FAKE_KEY_ID = "AKIABROKERTESTFAKE01"
FAKE_SECRET = "bRoKeR/fAkE/SeCrEt/0123456789+abcdefGHIJ"
# The HTTP status AWS answers each injected code with (400 when not listed): 5xx and
# throttling are retried by botocore before the adapter sees them.
STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InternalError": 500,
    "Unavailable": 503,
    "RequestLimitExceeded": 503,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """The endpoint URL of the run's one moto server."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


class ClientCache:
    """The tests' own boto3 clients (not the adapter's), made once per run: building an
    EC2 client costs ~0.1 s, and every test reads or seeds moto through one."""

    def __init__(self) -> None:
        import botocore.loaders

        self.loader = botocore.loaders.create_loader()  # parsed models, shared
        self._clients: dict[tuple[str, str, str], Any] = {}

    def session(self) -> Any:
        """A new boto3 Session (credentials from the environment, as ever) that shares
        the run's parsed service models."""
        import boto3
        import botocore.session

        core = botocore.session.Session()
        core.register_component("data_loader", self.loader)
        return boto3.session.Session(botocore_session=core)

    def client(self, service: str, region: str, endpoint: str) -> Any:
        key = (service, region, endpoint)
        if key not in self._clients:
            self._clients[key] = self.session().client(
                service, region_name=region, endpoint_url=endpoint
            )
        return self._clients[key]


@pytest.fixture(scope="session")
def aws_clients() -> ClientCache:
    return ClientCache()


@dataclass
class AwsEnv:
    """The fake AWS account of one test: its endpoint, a registered AMI, moto's backends."""

    endpoint: str
    clients: ClientCache
    image_id: str = ""
    region: str = REGION

    def session(self) -> Any:
        """A fresh boto3 Session for an adapter under test (shared parsed models)."""
        return self.clients.session()

    def client(self, service: str = "ec2", region: str | None = None) -> Any:
        """The test's own client of `service` (fake credentials: the same every test)."""
        return self.clients.client(service, region or self.region, self.endpoint)

    def backend(self, region: str | None = None) -> Any:
        """moto's EC2 backend (in-process: the server runs in this process)."""
        from moto.ec2.models import ec2_backends

        return ec2_backends[ACCOUNT][region or self.region]

    def user_data(self, instance_id: str, region: str | None = None) -> str:
        """The user data an instance was launched with, decoded."""
        import base64

        answer = self.client(region=region).describe_instance_attribute(
            InstanceId=instance_id, Attribute="userData"
        )
        return base64.b64decode(answer["UserData"]["Value"]).decode()


def reset(endpoint: str) -> None:
    """Forget every resource of every service (cheap once moto is warm)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


@pytest.fixture
def aws_env(moto_server: str, aws_clients: ClientCache, monkeypatch: pytest.MonkeyPatch) -> AwsEnv:
    """An isolated fake AWS environment on a freshly reset moto (never the developer's
    own AWS configuration)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", moto_server)
    # moto's ~1300 default AMIs cost ~2 s per reset; the tests register their own.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    reset(moto_server)
    env = AwsEnv(moto_server, aws_clients)
    env.image_id = env.client().register_image(Name="broker-test-gpu-ami")["ImageId"]
    return env


# --- Service Quotas and Pricing (JSON 1.1) --------------------------------------------------


@dataclass
class QuotaFake:
    """Answers Service Quotas for EC2 and Pricing GetProducts; records the calls."""

    url: str = ""
    quotas: dict[tuple[str, str], float] = field(default_factory=dict)  # (region, code)
    products: list[dict] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (region, target)
    deny: bool = False

    def set_quota(self, code: str, value: float, region: str = REGION) -> None:
        self.quotas[(region, code)] = float(value)

    def answer(self, region: str, target: str, body: dict) -> tuple[int, dict]:
        self.calls.append((region, target))
        if self.deny:
            return 400, _error("AccessDeniedException", "not allowed servicequotas:*")
        operation = target.rpartition(".")[2]
        if operation == "GetServiceQuota":
            value = self.quotas.get((region, body.get("QuotaCode", "")))
            if body.get("ServiceCode") != "ec2" or value is None:
                return 400, _error("NoSuchResourceException", "The request failed: no quota")
            return 200, {"Quota": _quota(region, body["QuotaCode"], value)}
        if operation == "ListServiceQuotas":
            codes = sorted(code for r, code in self.quotas if r == region)
            quotas = [_quota(region, code, self.quotas[(region, code)]) for code in codes]
            return 200, {"Quotas": quotas if body.get("ServiceCode") == "ec2" else []}
        if operation == "GetProducts":
            return 200, {
                "FormatVersion": "aws_v1",
                "PriceList": [json.dumps(product) for product in self.products],
            }
        return 400, _error("UnknownOperationException", f"unknown operation {target}")


def _quota(region: str, code: str, value: float) -> dict:
    return {
        "ServiceCode": "ec2",
        "QuotaCode": code,
        "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:ec2/{code}",
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def _error(kind: str, message: str) -> dict:
    return {"__type": kind, "message": message}


_CREDENTIAL_REGION = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/")


class _Handler(BaseHTTPRequestHandler):
    fake: QuotaFake

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        found = _CREDENTIAL_REGION.search(self.headers.get("Authorization", ""))
        status, reply = self.fake.answer(
            found.group(1) if found else "", self.headers.get("X-Amz-Target", ""), body
        )
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def aws_quotas(aws_env: AwsEnv, monkeypatch: pytest.MonkeyPatch) -> Iterator[QuotaFake]:
    """The Service Quotas / Pricing fake, set as BROKER_AWS_QUOTAS_ENDPOINT."""
    fake = QuotaFake()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("BROKER_AWS_QUOTAS_ENDPOINT", fake.url)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- levers -----------------------------------------------------------------------------


def interrupt_spot(env: AwsEnv, instance_id: str, region: str | None = None) -> None:
    """AWS reclaims a spot instance: it ends with reason Server.SpotInstanceTermination,
    and its spot request (if it has one) closes as instance-terminated-by-price."""
    from moto.ec2.models.instances import StateReason

    backend = env.backend(region)
    instance = backend.get_instance(instance_id)
    instance.terminate()
    instance.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    instance._reason = f"Service initiated ({when} GMT)"
    for request in backend.spot_instance_requests.values():
        if request.instance is instance:
            request.state = "closed"
            request._status_code = "instance-terminated-by-price"


def aws_error(code: str, message: str, status: int | None = None) -> Exception:
    """The exception that makes moto answer `code` with AWS's HTTP status for it."""
    status = status or STATUS.get(code, 400)
    if status == 400:
        from moto.ec2.exceptions import EC2ClientError

        return EC2ClientError(code, message)
    from werkzeug.exceptions import HTTPException

    body = (
        "<?xml version='1.0' encoding='UTF-8'?><Response><Errors><Error>"
        f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>broker-test</RequestID></Response>"
    )

    class AwsHttpError(HTTPException):
        def get_headers(self, environ: Any = None, scope: Any = None) -> list[tuple[str, str]]:
            return [("Content-Type", "text/xml")]

    error = AwsHttpError(description=body)
    error.code = status
    return error


@contextmanager
def failing_ec2(
    operation: str, code: str, message: str = "injected by the test", status: int | None = None
) -> Iterator[mock.MagicMock]:
    """While inside, moto's EC2 `operation` (the backend method, e.g. "run_instances")
    answers `code`; yields the patched method (call_count: requests that reached it)."""
    from moto.ec2.models import EC2Backend

    error = aws_error(code, message, status)
    with mock.patch.object(EC2Backend, operation, side_effect=error) as patched:
        yield patched


def failing_run_instances(
    code: str, message: str = "injected by the test", status: int | None = None
) -> AbstractContextManager[mock.MagicMock]:
    """While inside, RunInstances answers `code` (see failing_ec2)."""
    return failing_ec2("run_instances", code, message, status)


def spot_request_instance(
    env: AwsEnv, tags: dict[str, str], instance_type: str = "g4dn.xlarge"
) -> tuple[str, str]:
    """A spot instance started by RequestSpotInstances, tagged `tags`: (request id,
    instance id). moto does not report the instance's SpotInstanceRequestId (AWS does):
    the helper sets it on moto's instance."""
    ec2 = env.client()
    answer = ec2.request_spot_instances(
        InstanceCount=1,
        Type="one-time",
        LaunchSpecification={"ImageId": env.image_id, "InstanceType": instance_type},
    )
    request_id = answer["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    request = env.backend().spot_instance_requests[request_id]
    instance = request.instance
    instance.spot_instance_request_id = request_id
    ec2.create_tags(Resources=[instance.id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return request_id, instance.id


def set_spot_status(env: AwsEnv, request_id: str, code: str) -> None:
    """What AWS does to a spot request before and after a reclaim (status code)."""
    env.backend().spot_instance_requests[request_id]._status_code = code


# --- cluster placement groups (moto 5.2 has no placement group API) -----------------------


@dataclass
class PlacementGroups:
    """EC2's CreatePlacementGroup, DeletePlacementGroup and DescribePlacementGroups,
    answered inside moto's EC2 service (real HTTP, moto's own serializer and errors).
    `groups`: (region, name) -> the group; `created`/`deleted`: names in call order."""

    groups: dict[tuple[str, str], dict] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def names(self, region: str = REGION) -> set[str]:
        return {name for r, name in self.groups if r == region}


@pytest.fixture
def aws_placement_groups(
    aws_env: AwsEnv, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlacementGroups]:
    """The placement group calls, added to moto's EC2 responses for one test."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    fake = PlacementGroups()
    ids = iter(range(1, 10**6))

    def create_placement_group(self: Any) -> Any:
        name, key = self._get_param("GroupName"), (self.region, self._get_param("GroupName"))
        if key in fake.groups:
            raise EC2ClientError(
                "InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists."
            )
        tags = [
            tag
            for spec in self._get_param("TagSpecifications", [])
            for tag in spec.get("Tag", spec.get("Tags", []))
        ]
        group = {
            "GroupName": name,
            "GroupId": f"pg-{next(ids):017x}",
            "State": "available",
            "Strategy": self._get_param("Strategy"),
            "Tags": tags,
        }
        fake.groups[key] = group
        fake.created.append(name)
        return ActionResult({"PlacementGroup": group})

    def delete_placement_group(self: Any) -> Any:
        name = self._get_param("GroupName")
        if fake.groups.pop((self.region, name), None) is None:
            raise EC2ClientError(
                "InvalidPlacementGroup.Unknown", f"The placement group '{name}' is unknown."
            )
        fake.deleted.append(name)
        return ActionResult({})

    def describe_placement_groups(self: Any) -> Any:
        groups = [group for (region, _), group in fake.groups.items() if region == self.region]
        return ActionResult({"PlacementGroups": groups})

    for method in (create_placement_group, delete_placement_group, describe_placement_groups):
        monkeypatch.setattr(EC2Response, method.__name__, method, raising=False)
    yield fake
