"""The GCP adapter through google-cloud-compute over real HTTP, against the loopback GCE of
tests/fakes/gce.py: the provider contract, then what only GCE has (the insert body, GPUs
attached to N1, labels, requestId, zones and quotas, preemption records, check())."""

from __future__ import annotations

import json
import math
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pricing.catalog import read_offer_table
from pricing.table import OfferTable
from providers.base import TAG_BROKER, TAG_JOB, TAG_TEAM, Instance, LaunchRequest, startup_script
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from tests.fakes.gce import FakeGce
from tests.fakes.offers import write_catalog
from tests.providers.contract import (
    CooldownContract,
    GangsContract,
    ProviderContract,
    RestrictionsContract,
    attempts_of,
    no_sleep,
    spot_request,
)

# GCP rows of the test catalog (see tests/fakes/gce.py for what each zone offers).
ROWS = (
    "gcp,us-central1,,a2-highgpu-1g,A100,1,40,12,85,,3.67,1.2,,,test,2026-11-20",
    "gcp,us-central1,us-central1-b,a2-highgpu-8g,A100,8,40,96,680,nvlink,29.39,11.6,,,test,2026-11-20",
    "gcp,us-central1,,n1-standard-8,V100,1,16,8,30,,2.86,0.9,,,test,2026-11-20",
    "gcp,us-central1,,n1-standard-8,T4,1,16,8,30,,0.73,0.25,,,test,2026-11-20",
    "gcp,us-central1,,g2-standard-8,L4,1,24,8,32,,0.85,0.3,,,test,2026-11-20",
    "gcp,europe-west4,,n1-standard-8,V100,1,16,8,30,,2.95,0.95,,,test,2026-11-20",
    "gcp,europe-west4,,a2-highgpu-8g,A100,8,40,96,680,nvlink,32.5,12.9,,,test,2026-11-20",
    "aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
)


@pytest.fixture(scope="module")
def sdk():
    """google-cloud-compute, imported once (about 2 s)."""
    from google.cloud import compute_v1

    return compute_v1


@pytest.fixture(autouse=True)
def offline_google_auth(monkeypatch, tmp_path, sdk):
    """google-auth never looks for a metadata server, gcloud's config or a developer's
    credentials: nothing leaves 127.0.0.1."""
    from google.auth.compute_engine import _metadata

    monkeypatch.setenv("NO_GCE_CHECK", "true")  # read at import; patched below as well
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeGce]:
    server = FakeGce()
    yield server
    server.close()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> OfferTable:
    return read_offer_table(write_catalog(tmp_path_factory.mktemp("gcp") / "offers.csv", ROWS))


class Clock:
    def __init__(self) -> None:
        self.time = datetime(2026, 11, 20, tzinfo=UTC)

    def now(self) -> datetime:
        return self.time


def make_provider(fake: FakeGce, catalog: OfferTable | None = None, **options):
    from google.auth.credentials import AnonymousCredentials

    from providers.gcp import GcpProvider

    options = {"sleep": no_sleep(), "timeout": 5.0, "operation_timeout": 10.0} | options
    return GcpProvider(
        catalog=catalog,
        endpoint=fake.url,
        project=fake.project,
        credentials=AnonymousCredentials(),
        **options,
    )


def make_request(attempt: str, **changes) -> LaunchRequest:
    where = {"cloud": "gcp", "region": "us-central1", "instance_type": "a2-highgpu-1g"}
    return spot_request(attempt, where | {"command": "python train.py --resume"}, changes)


# --- the contract ------------------------------------------------------------------------

LEVERS = {
    "capacity": "ZONE_RESOURCE_POOL_EXHAUSTED",
    "quota": "QUOTA_EXCEEDED",
    "throttle": "429",
    "credentials": "401",
    "invalid": "400",
}


@dataclass
class GceHarness:
    fake: FakeGce
    catalog: OfferTable
    error_kinds: tuple[str, ...] = tuple(LEVERS)
    made: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def new_provider(self):
        return make_provider(self.fake, self.catalog)

    def request(self, attempt: str, **changes) -> LaunchRequest:
        return make_request(attempt, **changes)

    def unknown_id(self) -> str:
        return "us-central1-a/broker-never-launched"

    def interrupt(self, instance: Instance) -> None:
        self.fake.preempt(*instance.id.split("/"))

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        self.fake.fail_inserts(LEVERS[kind])
        try:
            yield
        finally:
            self.fake.fail_inserts(None)


@pytest.fixture
def harness(fake, catalog) -> GceHarness:
    return GceHarness(fake, catalog)


class TestGcpContract(ProviderContract, CooldownContract, RestrictionsContract, GangsContract):
    pass


# --- the insert body -----------------------------------------------------------------------


def inserted(fake: FakeGce, name: str) -> tuple[dict, dict[str, str]]:
    """The body of the (last) insert of VM `name`, and the query of the last insert."""
    bodies = [body for body in fake.inserts if body["name"] == name]
    queries = [q for m, p, q in fake.calls if m == "POST" and p.endswith("/instances")]
    return bodies[-1], queries[-1]


def metadata(body: dict) -> dict[str, str]:
    return {item["key"]: item["value"] for item in body["metadata"]["items"]}


def test_spot_insert_asks_for_spot_and_carries_the_job(fake, catalog):
    from providers.gcp.provider import instance_name, request_id

    request = make_request("a-spot", env={"EPOCHS": "3"}, team="vision", job_name="resnet")
    instance = make_provider(fake, catalog).launch(request)
    body, query = inserted(fake, instance_name("a-spot"))
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    assert body["machineType"] == f"zones/{instance.zone}/machineTypes/a2-highgpu-1g"
    assert "guestAccelerators" not in body  # an A2 carries its A100
    assert metadata(body)["startup-script"] == startup_script(request)
    assert query["requestId"] == request_id(fake.project, instance.zone, "a-spot")
    assert instance.id == f"{instance.zone}/broker-a-spot" and instance.state == "running"
    assert instance.tag(TAG_TEAM) == "vision" and instance.market == "spot"


def test_on_demand_insert_is_not_spot_and_keeps_its_gpu_host_policy(fake, catalog):
    make_provider(fake, catalog).launch(make_request("a-od", market="on-demand"))
    body, _ = inserted(fake, "broker-a-od")
    assert body["scheduling"] == {"onHostMaintenance": "TERMINATE"}


def test_stop_action_is_a_choice(fake, catalog):
    make_provider(fake, catalog, spot_action="STOP").launch(make_request("a-stop"))
    assert inserted(fake, "broker-a-stop")[0]["scheduling"]["instanceTerminationAction"] == "STOP"
    with pytest.raises(ValueError):
        make_provider(fake, catalog, spot_action="HIBERNATE")


def test_n1_offers_get_their_gpu_attached(fake, catalog):
    request = make_request("a-n1", region="europe-west4", instance_type="n1-standard-8")
    instance = make_provider(fake, catalog).launch(request)
    body, _ = inserted(fake, "broker-a-n1")
    assert instance.zone == "europe-west4-a"
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/europe-west4-a/acceleratorTypes/nvidia-tesla-v100",
         "acceleratorCount": 1}
    ]  # fmt: skip


def test_an_n1_sold_with_several_gpus_must_say_which(fake, catalog):
    with pytest.raises(InvalidRequest, match="T4.*V100"):
        make_provider(fake, catalog).launch(make_request("a-amb", instance_type="n1-standard-8"))
    assert fake.inserts == []


@dataclass(frozen=True, kw_only=True)
class GpuRequest(LaunchRequest):
    """A request that names its GPU (the change proposed for LaunchRequest)."""

    accelerator: str = ""
    accelerator_count: float = 0


def test_a_request_naming_its_gpu_settles_it(fake, catalog):
    request = GpuRequest(**vars(make_request("a-t4", instance_type="n1-standard-8")))
    request = GpuRequest(**(vars(request) | {"accelerator": "t4", "accelerator_count": 2}))
    instance = make_provider(fake, catalog).launch(request)
    body, _ = inserted(fake, "broker-a-t4")
    assert instance.zone == "us-central1-b"  # the only zone with T4s
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-b/acceleratorTypes/nvidia-tesla-t4",
         "acceleratorCount": 2}
    ]  # fmt: skip


def test_a_gpu_type_no_zone_sells_is_invalid(fake, catalog):
    fake.offered["europe-west4-a"] = (("n1-standard-8",), ())
    request = make_request("a-nogpu", region="europe-west4", instance_type="n1-standard-8")
    with pytest.raises(InvalidRequest, match="nvidia-tesla-v100"):
        make_provider(fake, catalog).launch(request)


LABEL = re.compile(r"[a-z0-9_-]{0,63}")


def test_labels_follow_gce_rules_and_tags_keep_their_exact_values(fake, catalog):
    request = make_request("Run.2_B", job_id="Job.With_UPPER", team="ML Team / Vision")
    provider = make_provider(fake, catalog)
    instance = provider.launch(request)
    body, _ = inserted(fake, instance.id.split("/")[1])
    labels = body["labels"]
    assert all(LABEL.fullmatch(key) and LABEL.fullmatch(value) for key, value in labels.items())
    assert labels[TAG_JOB] == "job_with_upper" and labels[TAG_TEAM] == "ml_team___vision"
    assert labels[TAG_BROKER] == "broker" and len(labels["broker-request"]) == 16
    described = make_provider(fake, catalog).describe(instance.id)
    assert described.job_id == "Job.With_UPPER" and described.attempt_id == "Run.2_B"
    assert described.tag(TAG_TEAM) == "ML Team / Vision"
    assert json.loads(metadata(body)["broker-tags"])[0] == ["broker-id", "broker"]


ATTEMPT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", fullmatch=True)


@given(st.lists(ATTEMPT, min_size=2, max_size=2, unique=True))
@example(["abc", "abc-"])
@example(["Ab", "ab"])
@example(["a.b", "a-b"])
@example(["x" * 63, "x" * 62 + "y"])
def test_instance_names_are_gce_names_one_per_attempt(attempts):
    from providers.gcp.provider import instance_name

    names = [instance_name(attempt) for attempt in attempts]
    assert all(re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name) for name in names)
    assert names[0] != names[1] and names[0] == instance_name(attempts[0])


@given(st.text(max_size=100))
def test_label_values_follow_gce_rules(value):
    from providers.gcp.provider import label_value

    assert LABEL.fullmatch(label_value(value))


def test_image_is_the_default_family_unless_a_gce_image_is_asked(fake, catalog, monkeypatch):
    from providers.gcp.provider import DEFAULT_IMAGE

    def image_of(name):
        return inserted(fake, name)[0]["disks"][0]["initializeParams"]["sourceImage"]

    provider = make_provider(fake, catalog)
    provider.launch(make_request("a-img1", image="pytorch/pytorch:2.4-cuda12"))
    own = "projects/my-project/global/images/family/trainer"
    provider.launch(make_request("a-img2", image=own))
    monkeypatch.setenv("BROKER_GCP_IMAGE", "projects/p/global/images/golden")
    make_provider(fake, catalog).launch(make_request("a-img3"))
    assert image_of("broker-a-img1") == DEFAULT_IMAGE
    assert image_of("broker-a-img2") == own
    assert image_of("broker-a-img3") == "projects/p/global/images/golden"


def test_impossible_gangs_and_foreign_requests_are_invalid(fake, catalog):
    provider = make_provider(fake, catalog)
    with pytest.raises(InvalidRequest, match="no compact placement"):
        provider.launch(make_request("a-mn", nodes=2, instance_type="n1-standard-8"))
    with pytest.raises(InvalidRequest, match="no infiniband"):
        provider.launch(make_request("a-ib", nodes=2, interconnect="infiniband"))
    with pytest.raises(InvalidRequest):
        provider.launch(make_request("a-aws", cloud="aws"))
    with pytest.raises(InvalidRequest, match="zone"):
        provider.launch(make_request("a-zone", zone="europe-west4-a"))
    assert fake.inserts == []


# --- idempotency, zones, errors --------------------------------------------------------------


def test_a_retried_insert_is_idempotent_through_its_request_id(fake, catalog):
    fake.lose_insert_responses(1)  # the insert happens; the client sees a 503 and retries
    instance = make_provider(fake, catalog).launch(make_request("a-lost", zone="us-central1-a"))
    posts = [q for m, p, q in fake.calls if m == "POST" and p.endswith("/instances")]
    assert len(posts) == 2 and posts[0]["requestId"] == posts[1]["requestId"]
    assert [body["name"] for body in fake.inserts] == ["broker-a-lost"]
    assert instance.id == "us-central1-a/broker-a-lost" and instance.active


def test_a_stockout_moves_on_to_the_next_zone_and_cools_the_first(fake, catalog):
    provider = make_provider(fake, catalog)
    fake.fail_inserts("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", times=1)
    instance = provider.launch(make_request("a-next"))
    assert instance.zone == "us-central1-b"
    assert provider.cooldown.cooling("a2-highgpu-1g", "us-central1-a", "spot")
    assert not provider.cooldown.cooling("a2-highgpu-1g", "us-central1-b", "spot")


def test_throttling_is_retried_with_backoff(fake, catalog):
    pauses: list[float] = []
    provider = make_provider(fake, catalog, sleep=pauses.append)
    fake.fail_inserts("429", times=2)
    assert provider.launch(make_request("a-429", zone="us-central1-a")).active
    assert len(pauses) == 2


def test_errors_never_quote_secrets(fake, catalog):
    fake.fail_inserts("401")
    with pytest.raises(CredentialsError) as error:
        make_provider(fake, catalog).launch(make_request("a-401", zone="us-central1-a"))
    assert "Secret-T0ken" not in str(error.value) and "ya29" not in str(error.value)
    assert error.value.__cause__ is None and error.value.__suppress_context__


def api_error(status: int, reason: str = "", message: str = "boom"):
    from google.api_core.exceptions import from_http_status

    return from_http_status(status, message, errors=[{"reason": reason}] if reason else [])


@pytest.mark.parametrize(
    ("status", "reason", "message", "expected"),
    [
        (429, "rateLimitExceeded", "", RateLimited),
        (403, "rateLimitExceeded", "", RateLimited),
        (403, "userRateLimitExceeded", "", RateLimited),
        (503, "backendError", "", RateLimited),
        (500, "", "", RateLimited),
        (403, "quotaExceeded", "", QuotaExceeded),
        (403, "limitExceeded", "", QuotaExceeded),
        (503, "", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: no n1", InsufficientCapacity),
        (400, "", "QUOTA_EXCEEDED: Quota 'CPUS' exceeded", QuotaExceeded),
        (403, "forbidden", "", CredentialsError),
        (403, "insufficientPermissions", "", CredentialsError),
        (403, "accessNotConfigured", "", CredentialsError),
        (401, "authError", "", CredentialsError),
        (401, "", "", CredentialsError),
        (403, "", "", CredentialsError),
        (404, "notFound", "", NotFound),
        (400, "invalid", "", InvalidRequest),
        (400, "badRequest", "", InvalidRequest),
        (400, "required", "", InvalidRequest),
        (409, "alreadyExists", "", InvalidRequest),
        (412, "conditionNotMet", "", InvalidRequest),
        (418, "", "", ProviderError),
    ],
)
def test_http_errors_are_classified(status, reason, message, expected):
    from providers.gcp.errors import from_exception

    error = from_exception(api_error(status, reason, message or "boom"), "insert z/n")
    assert type(error) is expected and error.provider == "gcp"
    assert error.retryable == (expected in (RateLimited, InsufficientCapacity))


@pytest.mark.parametrize(
    ("code", "status", "expected", "retryable"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", 503, InsufficientCapacity, True),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", 503, InsufficientCapacity, True),
        ("QUOTA_EXCEEDED", 403, QuotaExceeded, False),
        ("RATE_LIMIT_EXCEEDED", 403, RateLimited, True),
        ("RESOURCE_OPERATION_RATE_EXCEEDED", 403, RateLimited, True),
        ("RESOURCE_NOT_FOUND", 400, InvalidRequest, False),
        ("UNSUPPORTED_OPERATION", 400, InvalidRequest, False),
        ("SOMETHING_NEW", 400, InvalidRequest, False),
        ("SOMETHING_NEW", 403, CredentialsError, False),
        ("SOMETHING_NEW", 503, ProviderError, True),
        ("SOMETHING_NEW", 0, ProviderError, False),
    ],
)
def test_operation_errors_are_classified(sdk, code, status, expected, retryable):
    from providers.gcp.errors import from_operation

    operation = sdk.Operation(
        status="DONE",
        http_error_status_code=status,
        error={"errors": [{"code": code, "message": "token=abc123 says no"}]},
    )
    error = from_operation(operation, "insert z/n")
    assert type(error) is expected and error.retryable is retryable and error.code == code
    assert "abc123" not in str(error)
    assert from_operation(sdk.Operation(status="DONE"), "insert z/n") is None


def test_other_failures_are_classified():
    import google.auth.exceptions as auth
    import requests

    from providers.gcp.errors import from_exception

    assert type(from_exception(auth.DefaultCredentialsError("none"), "x")) is CredentialsError
    assert type(from_exception(auth.RefreshError("invalid_grant"), "x")) is CredentialsError
    unreachable = from_exception(requests.ConnectionError("refused"), "x")
    assert type(unreachable) is ProviderError and unreachable.retryable
    assert type(from_exception(auth.TransportError("timed out"), "x")) is ProviderError


# --- states, preemption, terminate -------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "spot", "preempted", "state"),
    [
        ("PROVISIONING", True, False, "pending"),
        ("STAGING", False, False, "pending"),
        ("RUNNING", True, True, "running"),
        ("REPAIRING", False, False, "running"),
        ("STOPPING", True, True, "interrupted"),
        ("STOPPING", False, True, "terminated"),
        ("TERMINATED", True, False, "terminated"),
        ("TERMINATED", True, True, "interrupted"),
        ("SUSPENDED", False, False, "terminated"),
        ("SOMETHING_NEW", False, False, "pending"),
    ],
)
def test_gce_statuses_map_to_states(status, spot, preempted, state):
    from providers.gcp.provider import instance_state

    assert instance_state(status, spot, preempted) == state


def test_a_stopped_preempted_vm_is_interrupted_and_reported_once(fake, catalog):
    provider = make_provider(fake, catalog, spot_action="STOP")
    instance = provider.launch(make_request("a-pre"))
    assert provider.interruptions() == []
    fake.preempt(instance.zone, "broker-a-pre")
    restarted = make_provider(fake, catalog)  # knows nothing: reads the operation history
    assert restarted.describe(instance.id).state == "interrupted"
    assert [i.state for i in restarted.list_instances()] == ["interrupted"]
    notice = provider.interruptions()
    assert [(n.instance_id, n.kind) for n in notice] == [(instance.id, "spot-reclaim")]
    assert notice[0].deadline is not None and provider.interruptions() == []
    assert provider.terminate(instance.id) is False  # already ended; the disk is freed
    assert (instance.zone, "broker-a-pre") not in fake.instances


def test_a_deleted_preempted_vm_is_interrupted_for_a_restarted_controller(fake, catalog):
    instance = make_provider(fake, catalog).launch(make_request("a-del"))
    fake.preempt(instance.zone, "broker-a-del")  # DELETE: GCE forgets the VM
    restarted = make_provider(fake, catalog)
    described = restarted.describe(instance.id)
    assert described.state == "interrupted" and described.ended_at is not None
    assert [n.instance_id for n in restarted.interruptions()] == [instance.id]
    assert restarted.interruptions() == []
    assert restarted.terminate(instance.id) is False


def test_an_on_demand_vm_stopped_by_gce_is_terminated_not_interrupted(fake, catalog):
    provider = make_provider(fake, catalog)
    instance = provider.launch(make_request("a-odstop", market="on-demand"))
    fake.instances[(instance.zone, "broker-a-odstop")]["status"] = "TERMINATED"
    assert provider.describe(instance.id).state == "terminated"
    assert provider.interruptions() == []


def test_terminate_is_known_to_a_restarted_controller(fake, catalog):
    instance = make_provider(fake, catalog).launch(make_request("a-term"))
    assert make_provider(fake, catalog).terminate(instance.id) is True
    restarted = make_provider(fake, catalog)
    assert restarted.describe(instance.id).state == "terminated"
    assert restarted.terminate(instance.id) is False
    with pytest.raises(NotFound):
        restarted.describe("not-an-id")


def test_instances_of_another_broker_are_not_listed_nor_reported(fake, catalog):
    ours = make_provider(fake, catalog)
    theirs = make_provider(fake, catalog, broker_id="Other.Broker", spot_action="STOP")
    mine = ours.launch(make_request("a-mine"))
    other = theirs.launch(make_request("a-theirs", broker_id="Other.Broker"))
    assert [i.id for i in ours.list_instances()] == [mine.id]
    assert [i.id for i in theirs.list_instances()] == [other.id]
    fake.preempt(other.zone, "broker-a-theirs")
    assert make_provider(fake, catalog).interruptions() == []


def test_listing_is_restricted_to_the_regions(fake, catalog):
    provider = make_provider(fake, catalog)
    provider.launch(make_request("a-eu", region="europe-west4", instance_type="a2-highgpu-1g"))
    provider.launch(make_request("a-us"))
    only_eu = make_provider(fake, catalog, regions=["europe-west4"])
    assert [i.attempt_id for i in only_eu.list_instances()] == ["a-eu"]
    assert sorted(i.attempt_id for i in provider.list_instances()) == ["a-eu", "a-us"]


def test_a_failed_launch_leaves_no_vm(fake, catalog):
    provider = make_provider(fake, catalog)
    fake.fail_inserts("QUOTA_EXCEEDED")
    with pytest.raises(QuotaExceeded, match="NVIDIA_A100_GPUS"):
        provider.launch(make_request("a-quota"))
    assert fake.instances == {} and attempts_of(provider, "a-quota") == []


# --- capacity: zones and quotas -------------------------------------------------------------


def by_row(table: OfferTable) -> dict[tuple[str, str, str, str], dict]:
    return {
        (r["region"], r["zone"], r["instance_type"], r["accelerator"]): r for r in table.records()
    }


def test_offers_mark_what_no_zone_sells_as_unavailable(fake, catalog):
    provider = make_provider(fake, catalog)
    rows = by_row(provider.offers())
    assert {r["cloud"] for r in rows.values()} == {"gcp"}  # this cloud's rows only
    assert len(rows) == 7
    sold = rows[("us-central1", "", "a2-highgpu-1g", "A100")]
    assert sold["price_spot"] == 1.2 and sold["capacity"] == 16  # 16 A100s of quota free
    gone = rows[("us-central1", "us-central1-b", "a2-highgpu-8g", "A100")]
    assert math.isnan(gone["price_spot"]) and math.isnan(gone["price_on_demand"])
    assert gone["capacity"] == 0
    assert math.isnan(rows[("europe-west4", "", "a2-highgpu-8g", "A100")]["price_on_demand"])
    # n1-standard-8 is sold in us-central1 with its V100 (zone a) and its T4 (zone b)
    assert rows[("us-central1", "", "n1-standard-8", "T4")]["price_spot"] == 0.25
    assert rows[("us-central1", "", "n1-standard-8", "V100")]["price_spot"] == 0.9
    # g2 (L4) only in us-central1-a: sold
    assert rows[("us-central1", "", "g2-standard-8", "L4")]["price_on_demand"] == 0.85
    reasons = {(u.region, u.zone, u.instance_type): u.reason for u in provider.unavailable()}
    assert reasons == {
        ("us-central1", "us-central1-b", "a2-highgpu-8g"): (
            "machine type a2-highgpu-8g is not offered in us-central1-b"
        ),
        ("europe-west4", "", "a2-highgpu-8g"): (
            "machine type a2-highgpu-8g is not offered in any zone of europe-west4"
        ),
    }


def test_a_gpu_missing_from_every_zone_hides_only_that_gpus_row(fake, catalog):
    fake.offered["us-central1-b"] = (("n1-standard-8", "a2-highgpu-1g"), ("nvidia-tesla-a100",))
    rows = by_row(make_provider(fake, catalog).offers())
    assert math.isnan(rows[("us-central1", "", "n1-standard-8", "T4")]["price_spot"])
    assert rows[("us-central1", "", "n1-standard-8", "V100")]["price_spot"] == 0.9


def test_quotas_become_capacity_and_unavailable_markets(fake, catalog):
    quotas = fake.quotas["us-central1"]
    quotas["NVIDIA_A100_GPUS"] = (16.0, 16.0)  # on-demand A100s used up
    quotas["PREEMPTIBLE_NVIDIA_A100_GPUS"] = (16.0, 12.0)  # 4 spot A100s left
    quotas["NVIDIA_L4_GPUS"] = (8.0, 5.0)  # no preemptible L4 quota: both markets share it
    provider = make_provider(fake, catalog)
    rows = by_row(provider.offers())
    one = rows[("us-central1", "", "a2-highgpu-1g", "A100")]
    assert math.isnan(one["price_on_demand"]) and one["price_spot"] == 1.2
    assert one["capacity"] == 4
    l4 = rows[("us-central1", "", "g2-standard-8", "L4")]
    assert l4["capacity"] == 3 and l4["price_spot"] == 0.3
    assert rows[("europe-west4", "", "n1-standard-8", "V100")]["capacity"] == 8
    reasons = [u for u in provider.unavailable() if u.instance_type == "a2-highgpu-1g"]
    assert [(u.market, u.reason) for u in reasons] == [
        ("on-demand", "quota NVIDIA_A100_GPUS: 0 gpus free")
    ]


def test_vcpu_quotas_count_too(fake, catalog):
    quotas = fake.quotas["us-central1"]
    quotas["CPUS"] = (32.0, 0.0)  # on-demand: four n1-standard-8, two a2-highgpu-1g
    quotas["PREEMPTIBLE_CPUS"] = (24.0, 20.0)  # spot: 4 vCPUs, not one VM
    provider = make_provider(fake, catalog)
    rows = by_row(provider.offers())
    t4, a100 = (
        rows[("us-central1", "", "n1-standard-8", "T4")],
        rows[("us-central1", "", "a2-highgpu-1g", "A100")],
    )
    assert math.isnan(t4["price_spot"]) and t4["price_on_demand"] == 0.73 and t4["capacity"] == 4
    assert math.isnan(a100["price_spot"]) and a100["capacity"] == 2
    assert rows[("europe-west4", "", "n1-standard-8", "V100")]["price_spot"] == 0.95
    spot = {(u.instance_type, u.reason) for u in provider.unavailable() if u.market == "spot"}
    assert ("n1-standard-8", "quota PREEMPTIBLE_CPUS: 4 vcpus free") in spot


def test_the_capacity_view_is_cached_for_a_few_minutes(fake, catalog):
    clock = Clock()
    provider = make_provider(fake, catalog, clock=clock)
    provider.offers()
    calls = len(fake.calls)
    assert calls == 4  # two aggregated lists, one regions.get per region
    provider.offers()
    provider.unavailable()
    assert len(fake.calls) == calls
    clock.time += timedelta(minutes=6)
    provider.offers()
    assert len(fake.calls) == 2 * calls


def test_lists_follow_every_page(fake, catalog):
    fake.page_size = 1
    provider = make_provider(fake, catalog)
    launched = [provider.launch(make_request(f"a-page{n}")).id for n in range(3)]
    assert sorted(i.id for i in make_provider(fake, catalog).list_instances()) == sorted(launched)
    assert len(provider.offers()) == 7 and provider.unavailable()


def test_no_catalog_means_no_offers_and_launches_still_work(fake):
    provider = make_provider(fake)
    assert len(provider.offers()) == 0 and fake.calls == []
    assert provider.launch(make_request("a-nocat")).zone == "us-central1-a"


def test_project_comes_from_the_environment(fake, monkeypatch):
    from google.auth.credentials import AnonymousCredentials

    from providers.gcp import GcpProvider

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", fake.project)
    monkeypatch.setenv("BROKER_GCP_ENDPOINT", fake.url)
    provider = GcpProvider(credentials=AnonymousCredentials(), sleep=no_sleep())
    assert provider.project == fake.project and provider.endpoint == fake.url
    assert provider.launch(make_request("a-env")).active


def test_no_credentials_is_a_credentials_error(fake):
    from providers.gcp import GcpProvider

    with pytest.raises(CredentialsError):
        GcpProvider(endpoint=fake.url)


# --- check() --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def key_file(tmp_path, fake, monkeypatch, private_key) -> str:
    """A service-account key in GOOGLE_APPLICATION_CREDENTIALS whose tokens come from the
    fake (an authorized_user file always asks oauth2.googleapis.com). Returns the key."""
    path = tmp_path / "key.json"
    info = {
        "type": "service_account",
        "project_id": fake.project,
        "private_key_id": "k1",
        "private_key": private_key,
        "client_email": f"broker@{fake.project}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{fake.url}/token",
    }
    path.write_text(json.dumps(info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    return private_key


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_without_credentials():
    from providers.gcp.check import check

    result = check(timeout=2.0)
    assert not result.usable and result.reason.startswith("no credentials")


def test_check_ok_names_the_project_and_no_secret(fake, key_file, monkeypatch):
    from providers.gcp.check import check

    monkeypatch.setenv("BROKER_GCP_ENDPOINT", fake.url)
    result = check(timeout=2.0)
    assert result.usable and result.reason == "ok"
    assert fake.project in result.detail and "PRIVATE KEY" not in repr(result)
    assert ("GET", f"/compute/v1/projects/{fake.project}/zones", {"maxResults": "1"}) in fake.calls


def test_check_unreachable(fake, key_file, monkeypatch):
    from providers.gcp.check import check

    monkeypatch.setenv("BROKER_GCP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    result = check(timeout=2.0)
    assert not result.usable and result.reason.startswith("unreachable") and result.seconds < 2


@pytest.mark.parametrize(
    ("lever", "reason"), [("403", "permission denied"), ("401", "credentials")]
)
def test_check_refused(fake, key_file, monkeypatch, lever, reason):
    from providers.gcp.check import check

    monkeypatch.setenv("BROKER_GCP_ENDPOINT", fake.url)
    fake.fail_all = lever
    result = check(timeout=2.0)
    assert not result.usable and result.reason.startswith(reason)
    assert "Secret-T0ken" not in result.reason


def test_check_without_the_sdk(monkeypatch):
    from providers.gcp.check import check

    monkeypatch.setitem(sys.modules, "google.cloud.compute_v1", None)
    result = check()
    assert not result.usable and "pip install 'broker[gcp]'" in result.reason


def test_a_zone_cooling_down_after_a_stockout_is_not_offered_there(fake, tmp_path):
    a2 = "a2-highgpu-1g,A100,1,40,12,85,,3.67,1.2,,,test,2026-11-20"
    rows = (f"gcp,us-central1,us-central1-a,{a2}", f"gcp,us-central1,,{a2}")
    provider = make_provider(fake, read_offer_table(write_catalog(tmp_path / "o.csv", rows)))
    provider.cooldown.mark("a2-highgpu-1g", "us-central1-a", "spot")
    offers = by_row(provider.offers())
    zonal = offers[("us-central1", "us-central1-a", "a2-highgpu-1g", "A100")]
    assert math.isnan(zonal["price_spot"]) and zonal["price_on_demand"] == 3.67
    # the region-wide row stays sold: another zone of the region may have the capacity
    assert offers[("us-central1", "", "a2-highgpu-1g", "A100")]["price_spot"] == 1.2
    assert [u.zone for u in provider.unavailable() if "cooling" in u.reason] == ["us-central1-a"]
