"""The Azure adapter through the real azure-mgmt-compute SDK, against the HTTPS fake ARM
on loopback (tests/fakes/azure.py): the provider contract, then what only Azure has."""

from __future__ import annotations

import base64
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from azure.core.credentials import AccessToken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import FixedClock, SystemClock
from pricing.catalog import read_offer_table
from providers.azure import AzureProvider
from providers.azure.body import vm_name
from providers.azure.check import check
from providers.azure.errors import map_error
from providers.base import (
    ID_PATTERN,
    Instance,
    LaunchRequest,
    instance_tags,
    request_hash,
    startup_script,
)
from providers.cloud import BACKOFF_ATTEMPTS
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from tests.fakes.azure import SUBSCRIPTION, TOKEN, Failure, FakeArm, make_certificate
from tests.fakes.offers import write_catalog
from tests.providers.contract import (
    CooldownContract,
    GangsContract,
    ProviderContract,
    RestrictionsContract,
    no_sleep,
    spot_request,
)

GROUP = "rg-test"
REGION = "eastus"
SIZE = "Standard_NC24ads_A100_v4"  # 24 vCPUs, one A100
FAMILY = "standardNCADSA100v4Family"
SUBNET = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}"
    "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/default"
)
SSH_KEY = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 test@broker"

FAILURES = {
    "capacity": Failure(
        "AllocationFailed",
        "Allocation failed. We do not have sufficient capacity for the requested VM size "
        "in this region.",
    ),
    "quota": Failure(
        "OperationNotAllowed",
        f"Operation could not be completed as it results in exceeding approved {FAMILY} Cores "
        "quota. Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 24.",
    ),
    "throttle": Failure("TooManyRequests", "The request is being throttled.", status=429),
    "credentials": Failure(
        "AuthorizationFailed",
        "The client does not have authorization to perform action "
        "'Microsoft.Compute/virtualMachines/write'.",
        status=403,
    ),
    "invalid": Failure("InvalidParameter", "The value of parameter vmSize is invalid.", 400),
}


class FakeCredential:
    """What tests hand the SDK instead of DefaultAzureCredential."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def get_token(self, *scopes: str, **_options) -> AccessToken:
        if self.error is not None:
            raise self.error
        return AccessToken(TOKEN, int(time.time()) + 3600)


@pytest.fixture(scope="module")
def arm(tmp_path_factory) -> Iterator[tuple[FakeArm, Path]]:
    cert, key = make_certificate(tmp_path_factory.mktemp("arm"))
    fake = FakeArm(cert, key).start()
    yield fake, cert
    fake.stop()


def seed(fake: FakeArm) -> None:
    fake.reset()
    fake.add_sku(SIZE, REGION, FAMILY, 24)
    fake.set_usage(REGION, "cores", 0, 1000)
    fake.set_usage(REGION, "lowPriorityCores", 0, 1000)
    fake.set_usage(REGION, FAMILY, 0, 1000)


@dataclass
class AzureHarness:
    fake: FakeArm
    cert: Path
    options: dict = field(default_factory=dict)
    # capacity last: its cool-down would turn the later kinds into capacity errors
    error_kinds: tuple[str, ...] = ("quota", "throttle", "credentials", "invalid", "capacity")

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def new_provider(self, **changes) -> AzureProvider:
        options = dict(
            endpoint=self.fake.url,
            subscription_id=SUBSCRIPTION,
            resource_group=GROUP,
            credential=FakeCredential(),
            connection_verify=str(self.cert),
            subnet_id=SUBNET,
            ssh_public_key=SSH_KEY,
            sleep=no_sleep(),
        )
        return AzureProvider(**(options | self.options | changes))

    def request(self, attempt: str, **changes) -> LaunchRequest:
        return spot_request(
            attempt, {"cloud": "azure", "region": REGION, "instance_type": SIZE}, changes
        )

    def unknown_id(self) -> str:
        return f"{GROUP}/broker-never-launched"

    def interrupt(self, instance: Instance) -> None:
        self.fake.evict(*instance.id.split("/"))

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        self.fake.fail_creates(FAILURES[kind])
        try:
            yield
        finally:
            self.fake.fail_creates(None)


@pytest.fixture
def harness(arm) -> AzureHarness:
    fake, cert = arm
    seed(fake)
    return AzureHarness(fake, cert)


class TestAzureContract(ProviderContract, CooldownContract, RestrictionsContract, GangsContract):
    pass


# --- what the VM is made of -------------------------------------------------------------


def test_spot_body_has_priority_eviction_policy_and_price_cap(harness):
    harness.provider.launch(harness.request("a-1", max_price_per_hour=1.25))
    harness.provider.launch(harness.request("a-2"))
    harness.provider.launch(harness.request("a-3", market="on-demand"))
    capped, uncapped, on_demand = (body["properties"] for body in harness.fake.creates())
    assert capped["priority"] == "Spot" and capped["evictionPolicy"] == "Deallocate"
    assert capped["billingProfile"] == {"maxPrice": 1.25}
    assert uncapped["billingProfile"] == {"maxPrice": -1}
    assert on_demand["priority"] == "Regular" and "billingProfile" not in on_demand
    assert "evictionPolicy" not in on_demand


def test_body_holds_tags_request_hash_network_and_image(harness):
    request = harness.request("a-4", job_name="train", team="vision", zone="2")
    instance = harness.provider.launch(request)
    (body,) = harness.fake.creates()
    assert body["tags"] == dict(instance_tags(request)) | {"broker-request": request_hash(request)}
    assert body["zones"] == ["2"] and body["location"] == REGION
    assert set(instance_tags(request)) <= set(instance.tags)
    assert instance.id == f"{GROUP}/broker-a-4" and instance.zone == "2"
    properties = body["properties"]
    nic = properties["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
    assert nic["ipConfigurations"][0]["properties"]["subnet"] == {"id": SUBNET}
    assert nic["deleteOption"] == "Delete"
    assert properties["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert properties["storageProfile"]["imageReference"]["offer"] == "ubuntu-hpc"
    keys = properties["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    assert [k["keyData"] for k in keys] == [SSH_KEY]


def test_image_and_throwaway_key(harness):
    provider = harness.new_provider(image="Canonical:ubuntu-24_04-lts:server:latest")
    provider.ssh_public_key = None
    provider.launch(harness.request("a-5"))
    properties = harness.fake.creates()[0]["properties"]
    assert properties["storageProfile"]["imageReference"] == {
        "publisher": "Canonical",
        "offer": "ubuntu-24_04-lts",
        "sku": "server",
        "version": "latest",
    }
    key = properties["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"]
    assert key.startswith("ssh-rsa ") and key != SSH_KEY


_counter = iter(range(10**6))
_values = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=30)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    command=_values.filter(str.strip),
    env=st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _values),
)
def test_custom_data_is_the_startup_script(harness, command, env):
    harness.fake.requests.clear()
    request = harness.request(f"cd-{next(_counter)}", command=command, env=env)
    harness.provider.launch(request)
    (body,) = harness.fake.creates()
    custom = base64.b64decode(body["properties"]["osProfile"]["customData"]).decode()
    assert custom == startup_script(request)


@given(st.from_regex(ID_PATTERN, fullmatch=True), st.from_regex(ID_PATTERN, fullmatch=True))
def test_vm_names_are_valid_and_distinct(first, second):
    name = vm_name(first)
    assert re.fullmatch(r"broker-[a-z0-9-]*[a-z0-9]", name) and len(name) <= 64
    assert vm_name(first) == name
    if first != second:
        assert vm_name(second) != name


def test_same_attempt_twice_creates_one_vm(harness):
    first = harness.provider.launch(harness.request("a-6"))
    again = harness.provider.launch(harness.request("a-6"))
    restarted = harness.new_provider().launch(harness.request("a-6"))
    assert first.id == again.id == restarted.id
    assert len(harness.fake.creates()) == 1 and len(harness.fake.vms) == 1


def test_impossible_gangs_and_missing_subnet_are_invalid(harness):
    with pytest.raises(InvalidRequest, match="no infiniband"):
        harness.provider.launch(harness.request("a-7", nodes=2, interconnect="infiniband"))
    with pytest.raises(InvalidRequest, match="at most 16"):
        harness.provider.launch(harness.request("a-7", nodes=17))
    with pytest.raises(InvalidRequest, match="subnet"):
        harness.new_provider(subnet_id=None).launch(harness.request("a-8"))
    assert harness.fake.creates() == []


def test_endpoint_comes_from_the_environment(harness, monkeypatch):
    monkeypatch.setenv("BROKER_AZURE_ENDPOINT", harness.fake.url)
    provider = harness.new_provider(endpoint=None)
    assert provider.launch(harness.request("a-9")).state == "running"


# --- states and interruptions -----------------------------------------------------------


def test_instance_view_states(harness):
    provider = harness.provider
    spot = provider.launch(harness.request("s-1"))
    on_demand = provider.launch(harness.request("s-2", market="on-demand"))
    assert provider.describe(spot.id).state == "running" and spot.exit_code is None
    creating = harness.fake.vms[spot.id.lower()]
    creating.provisioning, creating.power = "Creating", None
    assert harness.new_provider().describe(spot.id).state == "pending"
    creating.provisioning, creating.power = "Succeeded", "stopped"
    assert harness.new_provider().describe(spot.id).state == "interrupted"
    harness.fake.vms[on_demand.id.lower()].power = "deallocated"
    assert harness.new_provider().describe(on_demand.id).state == "terminated"


def test_eviction_is_seen_by_a_restarted_controller(harness):
    instance = harness.provider.launch(harness.request("s-3"))
    harness.interrupt(instance)
    restarted = harness.new_provider()
    assert [n.instance_id for n in restarted.interruptions()] == [instance.id]
    assert restarted.describe(instance.id).state == "interrupted"
    assert restarted.terminate(instance.id) is False  # already ended, but the disk goes
    assert instance.id.lower() not in harness.fake.vms
    assert restarted.describe(instance.id).state == "interrupted"


def test_eviction_policy_delete_shows_as_interrupted(harness):
    provider = harness.new_provider(eviction_policy="Delete")
    instance = provider.launch(harness.request("s-4"))
    assert harness.fake.creates()[0]["properties"]["evictionPolicy"] == "Delete"
    harness.interrupt(instance)
    assert instance.id.lower() not in harness.fake.vms
    assert provider.describe(instance.id).state == "interrupted"
    assert [n.kind for n in provider.interruptions()] == ["spot-reclaim"]
    with pytest.raises(NotFound):  # Azure forgot it, and so does a new provider
        harness.new_provider().describe(instance.id)


def test_terminated_spot_vm_is_not_an_interruption(harness):
    provider = harness.provider
    instance = provider.launch(harness.request("s-5"))
    assert provider.terminate(instance.id) is True
    assert provider.describe(instance.id).state == "terminated"
    assert provider.interruptions() == []
    assert [i.state for i in provider.list_instances()] == ["terminated"]


def test_list_keeps_to_its_broker_id_and_regions(harness):
    harness.provider.launch(harness.request("l-1"))
    harness.provider.launch(harness.request("l-2", broker_id="other"))
    assert [i.attempt_id for i in harness.new_provider().list_instances()] == ["l-1"]
    assert [i.attempt_id for i in harness.new_provider(broker_id="other").list_instances()] == [
        "l-2"
    ]
    assert harness.new_provider(regions=["westeurope"]).list_instances() == []


# --- errors -----------------------------------------------------------------------------


ASYNC_CODES = {
    "AllocationFailed": InsufficientCapacity,
    "ZonalAllocationFailed": InsufficientCapacity,
    "SkuNotAvailable": InsufficientCapacity,
    "OverconstrainedAllocationRequest": InsufficientCapacity,
    "QuotaExceeded": QuotaExceeded,
}
HTTP_ERRORS = [
    (409, "OperationNotAllowed", "exceeding approved lowPriorityCores quota", QuotaExceeded),
    (409, "OperationNotAllowed", "The VM is being deleted.", InvalidRequest),
    (429, "TooManyRequests", "throttled", RateLimited),
    (401, "AuthenticationFailed", "token expired", CredentialsError),
    (403, "AuthorizationFailed", "no write permission", CredentialsError),
    (403, "SomethingNew", "forbidden", CredentialsError),
    (400, "InvalidParameter", "bad vmSize", InvalidRequest),
    (400, "BadRequest", "bad body", InvalidRequest),
    (404, "ResourceGroupNotFound", "no group rg-test", InvalidRequest),
]


@pytest.mark.parametrize("code", sorted(ASYNC_CODES))
def test_async_operation_errors_are_classified(harness, code):
    harness.fake.fail_creates(Failure(code, f"{code} happened"))
    with pytest.raises(ASYNC_CODES[code]) as error:
        harness.provider.launch(harness.request("e-1"))
    assert error.value.code == code and error.value.provider == "azure"
    assert harness.fake.vms == {}, "the Failed VM was not cleaned up"


@pytest.mark.parametrize(("status", "code", "message", "kind"), HTTP_ERRORS)
def test_http_errors_are_classified(harness, status, code, message, kind):
    harness.fake.fail_creates(Failure(code, message, status))
    with pytest.raises(kind) as error:
        harness.provider.launch(harness.request("e-2"))
    assert type(error.value) is kind
    assert TOKEN not in f"{error.value} {error.value!r} {error.value.message}"


def test_server_errors_are_retryable_provider_errors(harness):
    # 501: a 5xx the SDK does not retry itself (500/502/503/504 it retries, with waits)
    harness.fake.fail_creates(Failure("NotImplemented", "not here", 501))
    with pytest.raises(ProviderError) as error:
        harness.provider.launch(harness.request("e-3"))
    assert type(error.value) is ProviderError and error.value.retryable


def test_error_table_edges():
    from azure.core.exceptions import HttpResponseError, ODataV4Format, ServiceRequestError

    unreachable = map_error(ServiceRequestError("connection refused"), "create")
    assert type(unreachable) is ProviderError and unreachable.retryable
    assert "cannot reach Azure" in unreachable.message
    wrapped = HttpResponseError("wrapped")
    wrapped.error = ODataV4Format(
        {
            "error": {
                "code": "ResourceOperationFailure",
                "message": "failed",
                "details": [{"code": "ZonalAllocationFailed", "message": "no room"}],
            }
        }
    )
    assert isinstance(map_error(wrapped), InsufficientCapacity)
    assert map_error(wrapped).code == "ZonalAllocationFailed"
    assert type(map_error(ValueError("odd"))) is ProviderError


def test_throttling_is_retried_with_backoff(harness):
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            harness.fake.fail_creates(None)

    harness.fake.fail_creates(FAILURES["throttle"])
    instance = harness.new_provider(sleep=sleep).launch(harness.request("e-4"))
    assert instance.state == "running" and len(pauses) == 2
    assert len(harness.fake.creates()) == 3
    with harness.fail_launches("throttle"), pytest.raises(RateLimited):
        harness.provider.launch(harness.request("e-5"))
    assert len(harness.fake.creates()) == 3 + BACKOFF_ATTEMPTS


def test_credential_errors_never_show_the_token(harness):
    from azure.identity import CredentialUnavailableError

    provider = harness.new_provider(credential=FakeCredential(CredentialUnavailableError("none")))
    with pytest.raises(CredentialsError):
        provider.launch(harness.request("e-6"))
    for kind in harness.error_kinds:
        with harness.fail_launches(kind), pytest.raises(ProviderError) as error:
            harness.provider.launch(harness.request(f"e-7-{kind}"))
        shown = f"{error.value} {error.value!r} {error.value.message} {error.value.code}"
        assert TOKEN not in shown
        assert error.value.__cause__ is None and error.value.__suppress_context__
    assert harness.fake.vms == {}


# --- offers: restrictions and quotas -----------------------------------------------------

CATALOG = (
    f"azure,eastus,,{SIZE},A100,1,80,24,220,,3.67,0.9,,,test,2026-11-20",
    "azure,eastus,,Standard_ND96asr_v4,A100,8,40,96,900,nvlink,27.2,8.0,,,test,2026-11-20",
    "azure,eastus,,Standard_NC6s_v3,V100,1,16,6,112,,3.06,0.6,,,test,2026-11-20",
    "azure,eastus,2,Standard_NC4as_T4_v3,T4,1,16,4,28,,0.53,0.1,,,test,2026-11-20",
    "azure,westeurope,,Standard_NC4as_T4_v3,T4,1,16,4,28,,0.6,0.12,,,test,2026-11-20",
    "aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
)


@pytest.fixture
def catalog(tmp_path):
    return read_offer_table(write_catalog(tmp_path / "offers.csv", CATALOG))


def restricted_fake(fake: FakeArm) -> None:
    location = {"type": "Location", "values": [REGION], "reasonCode": "NotAvailableForSubscription"}
    location["restrictionInfo"] = {"locations": [REGION]}
    fake.add_sku("Standard_ND96asr_v4", REGION, "standardNDASv4_A100Family", 96)
    fake.skus[-1]["restrictions"] = [location]
    zone = {"type": "Zone", "values": [REGION], "reasonCode": "NotAvailableForSubscription"}
    zone["restrictionInfo"] = {"locations": [REGION], "zones": ["2"]}
    fake.add_sku("Standard_NC4as_T4_v3", REGION, "standardNCASv3_T4Family", 4)
    fake.skus[-1]["restrictions"] = [zone]
    fake.add_sku("Standard_NC4as_T4_v3", "westeurope", "standardNCASv3_T4Family", 4)
    fake.set_usage("westeurope", "cores", 0, 100)


def by_type(table) -> dict[tuple[str, str, str], dict]:
    return {(r["region"], r["zone"], r["instance_type"]): r for r in table.records()}


def test_capacity_view_marks_restricted_skus(harness, catalog):
    restricted_fake(harness.fake)
    provider = harness.new_provider(catalog=catalog)
    rows = by_type(provider.offers())
    assert {r[2] for r in rows} == {
        SIZE,
        "Standard_ND96asr_v4",
        "Standard_NC6s_v3",
        "Standard_NC4as_T4_v3",
    }
    assert math.isnan(rows[(REGION, "", "Standard_ND96asr_v4")]["price_on_demand"])
    assert math.isnan(rows[(REGION, "", "Standard_NC6s_v3")]["price_spot"])
    assert math.isnan(rows[(REGION, "2", "Standard_NC4as_T4_v3")]["price_spot"])
    assert rows[(REGION, "", SIZE)]["price_on_demand"] == 3.67
    assert rows[("westeurope", "", "Standard_NC4as_T4_v3")]["price_on_demand"] == 0.6
    reasons = {(u.region, u.zone, u.instance_type): u.reason for u in provider.unavailable()}
    assert "NotAvailableForSubscription" in reasons[(REGION, "", "Standard_ND96asr_v4")]
    assert "zone 2" in reasons[(REGION, "2", "Standard_NC4as_T4_v3")]
    assert "not offered" in reasons[(REGION, "", "Standard_NC6s_v3")]


def test_usage_headroom_becomes_capacity_and_unavailable(harness, catalog):
    restricted_fake(harness.fake)
    harness.fake.set_usage(REGION, FAMILY, 24, 72)  # room for two more 24-vCPU VMs
    harness.fake.set_usage(REGION, "lowPriorityCores", 10, 20)  # no 24-vCPU spot VM fits
    clock = FixedClock(SystemClock().now())
    provider = harness.new_provider(catalog=catalog, clock=clock)
    row = by_type(provider.offers())[(REGION, "", SIZE)]
    assert row["capacity"] == 2 and row["price_on_demand"] == 3.67
    assert math.isnan(row["price_spot"])
    quota = [u for u in provider.unavailable() if u.instance_type == SIZE]
    assert [(u.market, u.reason) for u in quota] == [
        ("spot", "quota lowPriorityCores: 10 vcpus free")
    ]

    def skus() -> list[str]:
        return [path for _, path, _ in harness.fake.requests if path.endswith("/skus")]

    harness.fake.set_usage(REGION, FAMILY, 72, 72)
    provider.offers()
    assert len(skus()) == 2  # eastus and westeurope, once: the view is cached
    clock.advance(timedelta(minutes=10))
    row = by_type(provider.offers())[(REGION, "", SIZE)]
    assert len(skus()) == 4 and row["capacity"] == 0 and math.isnan(row["price_on_demand"])


def test_offers_without_catalog_are_empty(harness):
    assert len(harness.provider.offers()) == 0 and harness.provider.unavailable() == []
    assert harness.fake.requests == []


# --- check ------------------------------------------------------------------------------


def test_check_ok_and_denied(harness):
    options = dict(
        subscription_id=SUBSCRIPTION,
        credential=FakeCredential(),
        endpoint=harness.fake.url,
        connection_verify=str(harness.cert),
    )
    result = check(2.0, **options)
    assert result.usable and result.reason == "ok" and SUBSCRIPTION in result.detail
    harness.fake.deny = True
    denied = check(2.0, **options)
    assert not denied.usable and denied.reason.startswith("denied: AuthorizationFailed")
    assert TOKEN not in f"{result} {denied}"
    missing = check(2.0, **(options | {"subscription_id": ""}))
    assert not missing.usable and "AZURE_SUBSCRIPTION_ID" in missing.reason


def test_check_without_credentials(harness, monkeypatch):
    from azure.identity import EnvironmentCredential

    for name in ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    result = check(2.0, subscription_id=SUBSCRIPTION, credential=EnvironmentCredential())
    assert not result.usable and result.reason.startswith("no credentials")
    assert harness.fake.requests == []


def test_check_unreachable(harness):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.monotonic()
    result = check(
        1.0,
        subscription_id=SUBSCRIPTION,
        credential=FakeCredential(),
        endpoint=f"https://127.0.0.1:{port}",
    )
    assert not result.usable and result.reason.startswith("unreachable")
    assert time.monotonic() - started < 3.0


def test_a_size_cooling_down_after_an_allocation_failure_is_not_offered(harness, catalog):
    provider = harness.new_provider(catalog=catalog)
    provider.cooldown.mark(SIZE, REGION, "spot")
    row = by_type(provider.offers())[(REGION, "", SIZE)]
    assert math.isnan(row["price_spot"]) and row["price_on_demand"] == 3.67
    cooling = [u for u in provider.unavailable() if "cooling" in u.reason]
    assert [(u.region, u.instance_type, u.market) for u in cooling] == [(REGION, SIZE, "spot")]


def test_check_answers_an_sdk_exception_instead_of_a_thread_traceback(harness, monkeypatch):
    """An `http://` AZURE_AUTHORITY_HOST is a ValueError inside azure-identity, raised in
    the check's own thread: it printed a thread traceback and answered nothing."""
    for name, value in (
        ("AZURE_AUTHORITY_HOST", "http://127.0.0.1:1"),
        ("AZURE_CLIENT_ID", "id"),
        ("AZURE_TENANT_ID", "tenant"),
        ("AZURE_CLIENT_SECRET", "Abc8Q~NotARealSecret0123456789abcdEFgh"),
    ):
        monkeypatch.setenv(name, value)
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    result = check(2.0, subscription_id=SUBSCRIPTION)
    assert not result.usable
    assert result.reason.startswith("check failed: ValueError:") and "https" in result.reason
    assert seen == []
    assert "NotARealSecret" not in result.reason
