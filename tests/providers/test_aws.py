"""The AWS adapter, through boto3 over HTTP against moto (and a JSON 1.1 fake for
Service Quotas): the provider contract, then what only EC2 has."""

from __future__ import annotations

import json
import math
import socket
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from hypothesis import given
from hypothesis import strategies as st

from broker.clock import FixedClock
from pricing.catalog import read_offer_table
from pricing.table import OfferTable
from providers.aws import AwsProvider
from providers.aws import errors as aws_errors
from providers.aws.capacity import family, quota_headroom
from providers.aws.check import check
from providers.aws.instances import spot_interrupted
from providers.aws.launch import client_token
from providers.base import (
    TAG_REQUEST,
    Instance,
    LaunchRequest,
    instance_tags,
    request_hash,
    startup_script,
)
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from tests.fakes import aws as fakes
from tests.fakes.aws import (
    FAKE_KEY_ID,
    FAKE_SECRET,
    AwsEnv,
    QuotaFake,
    aws_error,
    failing_ec2,
    failing_run_instances,
    interrupt_spot,
    set_spot_status,
    spot_request_instance,
)
from tests.fakes.offers import write_catalog
from tests.providers.contract import (
    AWS_PLACE,
    CooldownContract,
    GangsContract,
    ProviderContract,
    RestrictionsContract,
    no_sleep,
    spot_request,
)

# The fixtures of tests.fakes.aws, as names pytest finds here.
moto_server = fakes.moto_server
aws_env = fakes.aws_env
aws_quotas = fakes.aws_quotas
aws_clients = fakes.aws_clients
aws_placement_groups = fakes.aws_placement_groups

# The code each error kind of the contract is injected as (statuses: tests.fakes.aws).
# Capacity comes last: it cools the place down, and the contract reuses one provider.
KIND_CODES = {
    "quota": "VcpuLimitExceeded",
    "throttle": "RequestLimitExceeded",
    "credentials": "AuthFailure",
    "invalid": "InvalidParameterValue",
    "capacity": "InsufficientInstanceCapacity",
}


@dataclass
class AwsHarness:
    env: AwsEnv
    catalog: OfferTable
    error_kinds: tuple[str, ...] = tuple(KIND_CODES)

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def new_provider(self, **options) -> AwsProvider:
        settings = dict(
            catalog=self.catalog,
            regions=["us-east-1"],  # one client per provider (test_..._other_regions: all)
            sleep=no_sleep(),
            image_id=self.env.image_id,
            max_attempts=1,  # botocore's own retries: see the retry tests
            session=self.env.session(),
        )
        return AwsProvider(**(settings | options))

    def request(self, attempt: str, **changes) -> LaunchRequest:
        return spot_request(attempt, AWS_PLACE, changes)

    def unknown_id(self) -> str:
        return "us-east-1/i-0123456789abcdef0"

    def interrupt(self, instance: Instance) -> None:
        region, _, instance_id = instance.id.partition("/")
        interrupt_spot(self.env, instance_id, region)

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        with failing_run_instances(KIND_CODES[kind]):
            yield


@pytest.fixture
def catalog(tmp_path: Path) -> OfferTable:
    return read_offer_table(write_catalog(tmp_path / "offers.csv"))


@pytest.fixture
def harness(aws_env: AwsEnv, catalog: OfferTable, aws_placement_groups) -> AwsHarness:
    return AwsHarness(aws_env, catalog)


class TestAwsContract(ProviderContract, CooldownContract, RestrictionsContract, GangsContract):
    pass


# --- launching ------------------------------------------------------------------------------


@contextmanager
def sent_run_instances(provider: AwsProvider, region: str = "us-east-1") -> Iterator[list[dict]]:
    """The RunInstances requests as they go on the wire (query parameters)."""
    sent: list[dict] = []

    def record(request, **_kwargs):
        body = request.body if isinstance(request.body, str) else request.body.decode()
        sent.append(dict(urllib.parse.parse_qsl(body)))

    events = provider._client("ec2", region).meta.events
    events.register("before-send.ec2.RunInstances", record)
    try:
        yield sent
    finally:
        events.unregister("before-send.ec2.RunInstances", record)


def test_spot_launch_carries_market_options_and_max_price(harness):
    provider = harness.provider
    with sent_run_instances(provider) as sent:
        provider.launch(harness.request("s-1", max_price_per_hour=0.35))
        provider.launch(harness.request("s-2"))
        provider.launch(harness.request("s-3", market="on-demand"))
    capped, uncapped, on_demand = sent
    assert capped["InstanceMarketOptions.MarketType"] == "spot"
    assert capped["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert capped["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert capped["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.35"
    assert uncapped["InstanceMarketOptions.MarketType"] == "spot"
    assert "InstanceMarketOptions.SpotOptions.MaxPrice" not in uncapped
    assert not any(key.startswith("InstanceMarketOptions") for key in on_demand)
    markets = {i.attempt_id: i.market for i in provider.list_instances()}
    assert markets == {"s-1": "spot", "s-2": "spot", "s-3": "on-demand"}


def test_client_token_is_derived_from_broker_and_attempt(harness):
    provider = harness.provider
    with sent_run_instances(provider) as sent:
        instance = provider.launch(harness.request("tok-1"))
    assert sent[0]["ClientToken"] == "broker:tok-1"
    raw = harness.env.client().describe_instances(InstanceIds=[instance.id.split("/")[1]])
    assert raw["Reservations"][0]["Instances"][0]["ClientToken"] == "broker:tok-1"
    assert client_token("team-a", "tok-1") != client_token("team-b", "tok-1")
    long = client_token("b" * 63, "a" * 63)
    assert len(long) <= 64 and long.isascii() and long == client_token("b" * 63, "a" * 63)


def test_a_launch_whose_answer_is_lost_returns_the_instance_aws_started(harness):
    """RunInstances started the instance but every answer was a 5xx: the launch finds
    it by its tags instead of failing (or starting a second one)."""
    from moto.ec2.models import EC2Backend

    real = EC2Backend.run_instances
    started = []

    def start_then_fail(self, *args, **kwargs):
        started.append(real(self, *args, **kwargs))
        raise aws_error("InternalError", "try again")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EC2Backend, "run_instances", start_then_fail)
        instance = harness.provider.launch(harness.request("lost-1"))
    assert len(started) == 1 and instance.attempt_id == "lost-1" and instance.active
    assert [i.id for i in harness.provider.list_instances()] == [instance.id]


def test_user_data_is_the_startup_script(harness):
    request = harness.request("ud-1", env={"EPOCHS": "3"}, checkpoint_uri="s3://b/ck")
    instance = harness.provider.launch(request)
    assert harness.env.user_data(instance.id.split("/")[1]) == startup_script(request)


def test_tags_round_trip_on_instance_and_volume(harness):
    request = harness.request("tag-1", job_name="train", team="vision")
    instance = harness.provider.launch(request)
    expected = {**dict(instance_tags(request)), TAG_REQUEST: request_hash(request)}
    assert dict(harness.new_provider().describe(instance.id).tags) == expected
    volumes = harness.env.client().describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance.id.split("/")[1]]}]
    )["Volumes"]
    assert volumes and {t["Key"]: t["Value"] for t in volumes[0]["Tags"]} == expected


def test_instances_in_other_regions_are_listed_and_described(harness):
    """By default the catalog's regions (us-east-1, eu-central-1) are all watched."""
    first = harness.new_provider(regions=None)
    assert first.regions == ("eu-central-1", "us-east-1")
    request = harness.request("eu-1", region="eu-central-1", instance_type="p4d.24xlarge")
    instance = first.launch(request)
    assert instance.id.startswith("eu-central-1/i-") and instance.zone.startswith("eu-central-1")
    first.launch(harness.request("us-1"))
    other = harness.new_provider(regions=None)
    assert {i.attempt_id for i in other.list_instances()} == {"eu-1", "us-1"}
    assert instance.id in {i.id for i in other.list_instances()}
    assert other.describe(instance.id).instance_type == "p4d.24xlarge"
    assert other.terminate(instance.id) is True


def test_launch_options_reach_run_instances_but_cannot_replace_the_adapters(harness):
    provider = harness.new_provider(launch_options={"Monitoring": {"Enabled": True}})
    instance = provider.launch(harness.request("opt-1"))
    raw = harness.env.client().describe_instances(InstanceIds=[instance.id.split("/")[1]])
    assert raw["Reservations"][0]["Instances"][0]["Monitoring"]["State"] == "enabled"
    with pytest.raises(ValueError, match="UserData"):
        harness.new_provider(launch_options={"UserData": "#!/bin/sh\n"})


def test_the_request_broker_id_tags_and_the_provider_broker_id_lists(harness):
    mine = harness.provider.launch(harness.request("own-1"))
    theirs = harness.provider.launch(harness.request("own-1", broker_id="other"))
    assert mine.id != theirs.id and theirs.tag("broker-id") == "other"
    assert [i.id for i in harness.provider.list_instances()] == [mine.id]
    other = harness.new_provider(broker_id="other")
    assert [i.id for i in other.list_instances()] == [theirs.id]


def test_load_through_the_registry(aws_env, catalog):
    from providers.registry import load_provider

    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    provider = load_provider("aws", catalog=catalog, clock=clock)
    assert isinstance(provider, AwsProvider) and provider.name == "aws"
    assert provider.endpoint == aws_env.endpoint  # BROKER_AWS_ENDPOINT
    assert provider.regions == ("eu-central-1", "us-east-1")
    assert provider.list_instances() == []


def test_a_region_never_enabled_lists_nothing_and_sells_nothing(harness):
    provider = harness.new_provider(regions=["eu-central-1"])
    with failing_ec2("describe_instances", "OptInRequired", status=401):
        assert provider.list_instances() == []
    with failing_ec2("describe_instance_types", "OptInRequired", status=401):
        reasons = provider.unavailable()
    assert {(u.region, u.instance_type, u.reason) for u in reasons} == {
        ("eu-central-1", "p4d.24xlarge", "the region is not enabled for this account")
    }
    with failing_ec2("describe_instances", "AuthFailure", status=401):
        with pytest.raises(CredentialsError):
            provider.list_instances()


def test_zone_is_placed(harness):
    instance = harness.provider.launch(harness.request("z-1", zone="us-east-1c"))
    assert instance.zone == "us-east-1c"


def test_requests_ec2_cannot_serve_are_invalid(harness, aws_env):
    provider = harness.provider
    with pytest.raises(InvalidRequest, match="at most 16 nodes"):
        provider.launch(harness.request("bad-1", nodes=17))
    with pytest.raises(InvalidRequest, match="no efa interconnect"):
        provider.launch(harness.request("bad-1", nodes=2, interconnect="efa"))
    with pytest.raises(InvalidRequest, match="not aws"):
        provider.launch(harness.request("bad-2", cloud="gcp"))
    with pytest.raises(InvalidRequest, match="16384"):
        provider.launch(harness.request("bad-3", command="x" * 17000))
    no_image = harness.new_provider(image_id=None)
    with pytest.raises(InvalidRequest, match="BROKER_AWS_IMAGE_ID"):
        no_image.launch(harness.request("bad-4"))
    assert provider.list_instances() == []
    own = no_image.launch(harness.request("ami-1", image="ami-0abc0abc0abc0abc0"))
    raw = aws_env.client().describe_instances(InstanceIds=[own.id.split("/")[1]])
    assert raw["Reservations"][0]["Instances"][0]["ImageId"] == "ami-0abc0abc0abc0abc0"


def test_image_id_comes_from_the_environment(harness, monkeypatch):
    monkeypatch.setenv("BROKER_AWS_IMAGE_ID", harness.env.image_id)
    instance = harness.new_provider(image_id=None).launch(harness.request("env-ami"))
    assert instance.active


def test_botocore_retries_a_capacity_500_before_the_adapter_sees_it(harness):
    provider = harness.new_provider(max_attempts=3)
    with failing_run_instances("InsufficientInstanceCapacity") as patched:
        with pytest.raises(InsufficientCapacity) as error:
            provider.launch(harness.request("r-1", zone="us-east-1a"))
    assert patched.call_count == 3  # botocore tried three times
    assert error.value.code == "InsufficientInstanceCapacity"
    assert provider.cooldown.cooling("g4dn.xlarge", "us-east-1a", "spot")
    assert not provider.cooldown.cooling("g4dn.xlarge", "us-east-1b", "spot")


def test_throttling_is_retried_then_rate_limited(harness):
    with failing_run_instances("RequestLimitExceeded") as patched:
        with pytest.raises(RateLimited):
            harness.provider.launch(harness.request("t-1"))
    assert patched.call_count == 5  # providers.cloud.with_backoff's attempts
    with failing_run_instances("RequestLimitExceeded", status=400) as patched:
        with pytest.raises(RateLimited):
            harness.provider.launch(harness.request("t-2"))
    assert patched.call_count == 5


def test_error_messages_never_carry_the_secret(harness):
    secret_text = f"signature for {FAKE_KEY_ID} with aws_secret_access_key={FAKE_SECRET}"
    for kind, code in KIND_CODES.items():
        with failing_run_instances(code, secret_text), pytest.raises(ProviderError) as error:
            harness.provider.launch(harness.request(f"sec-{kind}"))
        for text in (str(error.value), error.value.message, repr(error.value)):
            assert FAKE_SECRET not in text and FAKE_KEY_ID not in text, kind
        assert error.value.__cause__ is None and error.value.__suppress_context__


# --- reading instances ----------------------------------------------------------------------


def test_interrupted_instance_ends_with_its_time_and_terminate_leaves_it(harness):
    provider = harness.provider
    instance = provider.launch(harness.request("i-1"))
    harness.interrupt(instance)
    seen = provider.describe(instance.id)
    assert seen.state == "interrupted" and seen.exit_code is None
    assert seen.ended_at is not None and seen.ended_at.tzinfo is not None
    assert provider.terminate(instance.id) is False
    assert provider.describe(instance.id).state == "interrupted"


def test_user_terminated_spot_instance_is_not_an_interruption(harness):
    provider = harness.provider
    instance = provider.launch(harness.request("u-1"))
    assert provider.terminate(instance.id) is True
    assert provider.describe(instance.id).state == "terminated"
    assert provider.interruptions() == []


def test_spot_request_status_warns_then_decides(harness, aws_env):
    """A spot request marked for termination is a notice with a deadline while the
    instance still runs; an ended instance whose request says instance-terminated-by-price
    is interrupted even when its state reason says nothing."""
    from moto.ec2.models.instances import StateReason

    tags = {"broker-id": "broker", "broker-job": "j-spot", "broker-attempt": "sr-1"}
    request_id, instance_id = spot_request_instance(aws_env, tags)
    provider = harness.provider
    set_spot_status(aws_env, request_id, "marked-for-termination")
    [notice] = provider.interruptions()
    assert notice.instance_id == f"us-east-1/{instance_id}" and notice.kind == "spot-reclaim"
    assert notice.deadline == notice.noticed_at + timedelta(seconds=120)
    assert provider.describe(notice.instance_id).state == "running"
    interrupt_spot(aws_env, instance_id)
    aws_env.backend().get_instance(instance_id).state_reason = StateReason("", "")
    assert provider.describe(notice.instance_id).state == "interrupted"
    assert provider.interruptions() == []  # reported once already
    fresh = harness.new_provider()
    assert [n.instance_id for n in fresh.interruptions()] == [notice.instance_id]
    set_spot_status(aws_env, request_id, "instance-terminated-by-user")
    assert fresh.describe(notice.instance_id).state == "terminated"


def test_spot_status_codes():
    assert spot_interrupted("instance-terminated-by-price")
    assert spot_interrupted("instance-terminated-no-capacity")
    assert spot_interrupted("instance-stopped-by-price")
    assert not spot_interrupted("instance-terminated-by-user")
    assert not spot_interrupted("fulfilled")
    assert not spot_interrupted("marked-for-termination")


def test_malformed_ids_are_not_found(harness):
    for bad in ("i-0123456789abcdef0", "us-east-1/vol-1234", "nowhere/i-0123456789abcdef0", ""):
        with pytest.raises(NotFound):
            harness.provider.describe(bad)


# --- the capacity view ----------------------------------------------------------------------

ZONE_ROWS = (
    "aws,us-east-1,us-east-1e,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
    "aws,us-east-1,us-east-1a,g4dn.xlarge,T4,1,16,4,16,,0.526,0.2,,,test,2026-11-20",
    "aws,us-east-1,,p3.2xlarge,V100,1,16,8,61,,3.06,0.9,,,test,2026-11-20",
)


def zone_catalog(tmp_path: Path, rows=ZONE_ROWS) -> OfferTable:
    return read_offer_table(write_catalog(tmp_path / "zones.csv", rows))


def rows_by(table: OfferTable) -> dict[tuple[str, str, str], dict]:
    return {(r["region"], r["zone"], r["instance_type"]): r for r in table.records()}


def test_capacity_view_marks_types_not_offered_where_the_row_says(harness, tmp_path):
    provider = harness.new_provider(catalog=zone_catalog(tmp_path))
    reasons = {(u.zone, u.instance_type): u for u in provider.unavailable()}
    assert (
        reasons[("us-east-1e", "g4dn.xlarge")].reason == "g4dn.xlarge is not offered in us-east-1e"
    )
    assert reasons[("", "p3.2xlarge")].reason == "p3.2xlarge is not offered in us-east-1"
    assert ("us-east-1a", "g4dn.xlarge") not in reasons
    rows = rows_by(provider.offers())
    assert math.isnan(rows[("us-east-1", "us-east-1e", "g4dn.xlarge")]["price_spot"])
    assert math.isnan(rows[("us-east-1", "", "p3.2xlarge")]["price_on_demand"])
    assert rows[("us-east-1", "us-east-1a", "g4dn.xlarge")]["price_on_demand"] == 0.526
    view = provider.capacity_view()
    facts = view.types[("us-east-1", "g4dn.xlarge")]
    assert (facts.vcpus, facts.gpus, facts.gpu_name, facts.gpu_memory_mib) == (4, 1, "T4", 16384)


def test_offers_are_this_clouds_rows_of_its_regions(harness, catalog):
    provider = harness.provider
    records = provider.offers().records()
    assert {(r["cloud"], r["region"]) for r in records} == {("aws", "us-east-1")}
    assert {r["instance_type"] for r in records} == {"p4d.24xlarge", "g4dn.xlarge", "m6i.2xlarge"}
    assert harness.new_provider(catalog=None).offers().records() == []


def test_quota_headroom_becomes_capacity_or_unavailable(harness, aws_quotas: QuotaFake):
    aws_quotas.set_quota("L-DB2E81BA", 12)  # on-demand G and VT: 12 vCPUs
    aws_quotas.set_quota("L-3819A6DF", 8)  # spot G and VT: 8 vCPUs
    aws_quotas.set_quota("L-7212CCBC", 0)  # spot P: none
    clock = FixedClock(datetime(2026, 11, 20, tzinfo=UTC))
    provider = harness.new_provider(clock=clock)
    provider.launch(harness.request("q-1", market="on-demand"))  # 4 vCPUs on-demand
    harness.env.client().run_instances(  # someone else's instance counts too
        ImageId=harness.env.image_id, InstanceType="g5.xlarge", MinCount=1, MaxCount=1
    )
    provider.launch(harness.request("q-spot"))  # 4 vCPUs of spot
    rows = rows_by(provider.offers())
    g4dn = rows[("us-east-1", "", "g4dn.xlarge")]
    assert g4dn["capacity"] == 1  # on-demand (12 - 4 - 4) / 4, spot (8 - 4) / 4
    assert g4dn["price_spot"] == 0.2 and g4dn["price_on_demand"] == 0.526
    p4d = rows[("us-east-1", "", "p4d.24xlarge")]
    assert math.isnan(p4d["price_spot"]) and p4d["price_on_demand"] == 21.9576
    assert math.isnan(p4d["capacity"])  # no on-demand P quota known: no limit known
    assert math.isnan(rows[("us-east-1", "", "m6i.2xlarge")]["capacity"])
    quota_reasons = [u for u in provider.unavailable() if u.reason.startswith("quota")]
    assert [(u.instance_type, u.market) for u in quota_reasons] == [("p4d.24xlarge", "spot")]
    assert quota_reasons[0].reason == (
        "quota L-7212CCBC (All P Spot Instance Requests): 0 vcpus free"
    )
    # The view is cached: no new quota calls until its time is up.
    calls = len(aws_quotas.calls)
    provider.offers()
    assert len(aws_quotas.calls) == calls
    clock.advance(timedelta(seconds=301))
    provider.launch(harness.request("q-2", market="on-demand"))
    rows = rows_by(provider.offers())
    assert len(aws_quotas.calls) > calls
    g4dn = rows[("us-east-1", "", "g4dn.xlarge")]
    assert math.isnan(g4dn["price_on_demand"]) and g4dn["price_spot"] == 0.2
    assert g4dn["capacity"] == 1  # spot still has room for one
    reasons = {(u.instance_type, u.market) for u in provider.unavailable()}
    assert ("g4dn.xlarge", "on-demand") in reasons


def test_quotas_are_asked_per_region_at_their_own_endpoint(harness, aws_quotas):
    aws_quotas.set_quota("L-417A185B", 96, region="eu-central-1")
    provider = harness.new_provider(regions=None)
    rows = rows_by(provider.offers())
    assert rows[("eu-central-1", "", "p4d.24xlarge")]["capacity"] == 1
    assert math.isnan(rows[("us-east-1", "", "p4d.24xlarge")]["capacity"])
    assert {region for region, _ in aws_quotas.calls} == {"us-east-1", "eu-central-1"}
    assert {t for _, t in aws_quotas.calls} == {"ServiceQuotasV20190624.GetServiceQuota"}


def test_quotas_denied_leave_capacity_unknown(harness, aws_quotas):
    aws_quotas.set_quota("L-DB2E81BA", 0)
    aws_quotas.deny = True
    rows = rows_by(harness.provider.offers())
    g4dn = rows[("us-east-1", "", "g4dn.xlarge")]
    assert math.isnan(g4dn["capacity"]) and g4dn["price_on_demand"] == 0.526


def test_a_cooling_place_is_unavailable_in_offers(harness):
    provider = harness.provider
    with failing_run_instances("InsufficientInstanceCapacity"), pytest.raises(InsufficientCapacity):
        provider.launch(harness.request("cool-1"))
    cooling = [u for u in provider.unavailable() if "cooling" in u.reason]
    assert [(u.region, u.zone, u.instance_type, u.market) for u in cooling] == [
        ("us-east-1", "", "g4dn.xlarge", "spot")
    ]
    row = rows_by(provider.offers())[("us-east-1", "", "g4dn.xlarge")]
    assert math.isnan(row["price_spot"]) and row["price_on_demand"] == 0.526


def test_quota_families():
    assert [family(t) for t in ("g4dn.xlarge", "p4d.24xlarge", "vt1.3xlarge", "m6i.2xlarge")] == [
        "g",
        "p",
        "vt",
        "m",
    ]
    usage = {("g", "on-demand"): 8.0, ("g", "spot"): 4.0, ("p", "on-demand"): 96.0}
    rules = {
        h.name.split()[0]: h
        for h in quota_headroom("r", {"L-DB2E81BA": 10, "L-417A185B": 64}, usage)
    }
    assert rules["L-DB2E81BA"].free == 2 and rules["L-DB2E81BA"].market == "on-demand"
    assert rules["L-417A185B"].free == 0
    assert rules["L-DB2E81BA"].applies("g5.xlarge") and rules["L-DB2E81BA"].applies("vt1.3xlarge")
    assert not rules["L-DB2E81BA"].applies("p4d.24xlarge")


# --- errors ---------------------------------------------------------------------------------


def client_error(code: str, status: int = 400, message: str = "m") -> ClientError:
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "RunInstances")


def test_every_code_of_the_table_maps_to_its_class():
    for code, kind in aws_errors.CODES.items():
        error = aws_errors.map_error(client_error(code), "run")
        if kind is aws_errors._Retryable:
            assert type(error) is ProviderError and error.retryable, code
        else:
            assert type(error) is kind and error.code == code, code
    assert aws_errors.CODES["InsufficientInstanceCapacity"] is InsufficientCapacity
    assert aws_errors.CODES["VcpuLimitExceeded"] is QuotaExceeded


@pytest.mark.parametrize(
    ("code", "status", "kind", "retryable"),
    [
        ("InvalidVpcID.NotFound", 400, NotFound, False),
        ("InvalidSomething.Malformed", 400, InvalidRequest, False),
        ("InvalidFoo", 400, InvalidRequest, False),
        ("SomethingNew", 403, CredentialsError, False),
        ("SomethingNew", 429, RateLimited, True),
        ("SomethingNew", 503, ProviderError, True),
        ("SomethingNew", 409, ProviderError, False),
    ],
)
def test_unknown_codes_fall_back_on_shape_and_status(code, status, kind, retryable):
    error = aws_errors.map_error(client_error(code, status))
    assert type(error) is kind and error.retryable == retryable and error.provider == "aws"


def test_errors_before_any_answer():
    cases = [
        (NoCredentialsError(), CredentialsError, False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), ProviderError, True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), ProviderError, True),
        (ParamValidationError(report="MaxCount: must be an int"), InvalidRequest, False),
        (ValueError("a bug"), ProviderError, False),
    ]
    for exc, kind, retryable in cases:
        error = aws_errors.map_error(exc, "launch")
        assert type(error) is kind and error.retryable == retryable, exc
    assert "credentials" in str(aws_errors.map_error(NoCredentialsError()))
    same = InvalidRequest("aws", "x")
    assert aws_errors.map_error(same) is same


@given(
    code=st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
    status=st.integers(0, 599),
    secret=st.sampled_from([FAKE_SECRET, FAKE_KEY_ID]),
)
def test_any_answer_is_a_provider_error_without_secrets(code, status, secret):
    error = aws_errors.map_error(client_error(code, status, f"bad key {secret} here"))
    assert isinstance(error, ProviderError) and error.provider == "aws"
    assert secret not in str(error)
    transient = type(error) is ProviderError and (
        status >= 500 or aws_errors.CODES.get(code) is aws_errors._Retryable
    )
    assert error.retryable == (isinstance(error, InsufficientCapacity | RateLimited) or transient)


# --- check() --------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_ok_names_the_account(aws_env):
    result = check(timeout=5)
    assert result.usable and result.reason == "ok"
    assert "123456789012" in result.detail and aws_env.endpoint in result.detail
    assert FAKE_SECRET not in result.detail and FAKE_KEY_ID not in result.detail


def test_check_without_credentials(aws_env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = check(timeout=2)
    assert not result.usable and result.reason == "no credentials"


def test_check_unreachable_endpoint_answers_fast(aws_env, monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", endpoint)
    result = check(timeout=2)
    assert not result.usable and result.reason == "unreachable"
    assert endpoint in result.detail and result.seconds < 2
    assert FAKE_SECRET not in result.detail


def test_check_and_calls_with_credentials_aws_rejects_or_limits(aws_env, monkeypatch):
    """moto's IAM simulation: an unknown key is rejected; a user without policies may
    ask who it is, but not list instances."""
    from moto.core.authorization import enable_iam_authentication

    iam = aws_env.client("iam")
    iam.create_user(UserName="no-rights")
    key = iam.create_access_key(UserName="no-rights")["AccessKey"]
    with enable_iam_authentication():
        rejected = check(timeout=2)
        assert not rejected.usable and rejected.reason == "credentials rejected"
        assert "InvalidClientTokenId" in rejected.detail and FAKE_SECRET not in rejected.detail
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        assert check(timeout=2).usable
        provider = AwsProvider(regions=["us-east-1"], image_id=aws_env.image_id, max_attempts=1)
        with pytest.raises(CredentialsError) as error:
            provider.list_instances()
    assert error.value.code == "AccessDenied" and "ec2:DescribeInstances" in str(error.value)
    assert key["SecretAccessKey"] not in str(error.value)


def test_the_quotas_fake_answers_boto3_for_list_and_pricing(aws_env, aws_quotas):
    """The fake's other answers (for adapters and importers that list quotas or read
    Pricing) parse in boto3 as AWS's would."""
    aws_quotas.set_quota("L-417A185B", 192)
    quotas = aws_env.clients.session().client(
        "service-quotas", region_name="us-east-1", endpoint_url=aws_quotas.url
    )
    listed = quotas.list_service_quotas(ServiceCode="ec2")["Quotas"]
    assert [(q["QuotaCode"], q["Value"]) for q in listed] == [("L-417A185B", 192.0)]
    product = {"product": {"attributes": {"instanceType": "p4d.24xlarge"}}, "terms": {}}
    aws_quotas.products.append(product)
    pricing = aws_env.clients.session().client(
        "pricing", region_name="us-east-1", endpoint_url=aws_quotas.url
    )
    answer = pricing.get_products(ServiceCode="AmazonEC2")
    assert [json.loads(item) for item in answer["PriceList"]] == [product]
