"""The rules the three cloud adapters share in providers/cloud.py: SDK calls with mapped
errors, the capacity-view cache, notices reported once, and the launch refusals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.clock import FixedClock
from providers.base import Instance, InterruptionNotice, LaunchRequest, request_hash
from providers.cloud import (
    BACKOFF_ATTEMPTS,
    Expiring,
    ReportedOnce,
    cooling_down,
    launch_order,
    refuse_other_request,
    refuse_unsupported,
    sdk_call,
)
from providers.errors import InsufficientCapacity, InvalidRequest, ProviderError, RateLimited

START = datetime(2026, 11, 29, tzinfo=UTC)


class SdkError(Exception):
    """What an SDK raises."""


def to_error(exc: BaseException, action: str) -> ProviderError:
    if "throttled" in str(exc):
        return RateLimited("test", f"{action}: {exc}")
    return InvalidRequest("test", f"{action}: {exc}", code="Bad")


def request(**fields) -> LaunchRequest:
    base = {
        "attempt_id": "a-1",
        "job_id": "j-1",
        "cloud": "aws",
        "region": "us-east-1",
        "instance_type": "g5.xlarge",
        "command": "true",
    }
    return LaunchRequest(**(base | fields))


def test_sdk_call_maps_the_sdks_errors_without_chaining_them():
    def fail():
        raise SdkError("bad parameter, secret=hunter2")

    with pytest.raises(InvalidRequest) as caught:
        sdk_call(fail, SdkError, to_error, "run_instances", sleep=lambda _: None)
    assert caught.value.message.startswith("run_instances: bad parameter")
    assert "hunter2" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_sdk_call_lets_other_exceptions_and_provider_errors_through():
    def bug():
        raise KeyError("not an SDK error")

    with pytest.raises(KeyError):
        sdk_call(bug, SdkError, to_error, "x", sleep=lambda _: None)

    def already_mapped():
        raise InsufficientCapacity("test", "none left")

    with pytest.raises(InsufficientCapacity):
        sdk_call(already_mapped, SdkError, to_error, "x", sleep=lambda _: None)


@given(failures=st.integers(min_value=0, max_value=BACKOFF_ATTEMPTS + 2))
def test_sdk_call_retries_throttling_a_bounded_number_of_times(failures):
    calls, pauses = [], []

    def call():
        calls.append(1)
        if len(calls) <= failures:
            raise SdkError("throttled")
        return "done"

    if failures < BACKOFF_ATTEMPTS:
        assert sdk_call(call, SdkError, to_error, "x", sleep=pauses.append) == "done"
    else:
        with pytest.raises(RateLimited):
            sdk_call(call, SdkError, to_error, "x", sleep=pauses.append)
    assert len(calls) == min(failures + 1, BACKOFF_ATTEMPTS)
    assert len(pauses) == len(calls) - 1


def test_expiring_reuses_a_value_until_it_is_as_old_as_its_seconds():
    clock = FixedClock(START)
    cache: Expiring[str, int] = Expiring(clock, seconds=300)
    made = []

    def make() -> int:
        made.append(1)
        return len(made)

    assert cache.get("us-east-1", make) == 1
    clock.advance(timedelta(seconds=299))
    assert cache.get("us-east-1", make) == 1
    assert cache.get("eu-west-1", make) == 2  # another key is made on its own
    clock.advance(timedelta(seconds=1))
    assert cache.get("us-east-1", make) == 3  # 300 s old: made again
    assert cache.get("us-east-1", make) == 3


def test_expiring_keeps_nothing_when_making_fails():
    cache: Expiring[None, int] = Expiring(FixedClock(START), seconds=300)

    def fail() -> int:
        raise RateLimited("test", "slow down")

    with pytest.raises(RateLimited):
        cache.get(None, fail)
    assert cache.get(None, lambda: 7) == 7


def notice(instance_id: str, seconds: int) -> InterruptionNotice:
    return InterruptionNotice(
        instance_id, "aws", "spot-reclaim", START + timedelta(seconds=seconds)
    )


def test_each_notice_is_reported_once_in_time_order():
    reported = ReportedOnce()
    first = reported.fresh([notice("b", 2), notice("a", 5), notice("c", 2)])
    assert [n.instance_id for n in first] == ["b", "c", "a"]
    assert "a" in reported and "z" not in reported
    again = reported.fresh([notice("a", 9), notice("z", 1)])
    assert [n.instance_id for n in again] == ["z"]
    assert reported.fresh([notice("z", 1)]) == []


def test_cloud_adapters_refuse_other_clouds_and_several_nodes():
    with pytest.raises(InvalidRequest, match="'gcp', not aws"):
        refuse_unsupported("aws", request(cloud="gcp"))
    with pytest.raises(InvalidRequest, match="multi-node launches on aws"):
        refuse_unsupported("aws", request(nodes=2))
    refuse_unsupported("aws", request(nodes=2), gangs=True)
    refuse_unsupported("aws", request())


def test_the_same_attempt_with_another_request_is_refused():
    asked = request()
    refuse_other_request("aws", asked.attempt_id, request_hash(asked), request_hash(asked))
    other = request_hash(request(instance_type="g5.2xlarge"))
    with pytest.raises(InvalidRequest, match="attempt a-1 was launched with another request"):
        refuse_other_request("aws", asked.attempt_id, other, request_hash(asked))
    with pytest.raises(InvalidRequest):  # an instance without the tag is not this request's
        refuse_other_request("aws", asked.attempt_id, None, request_hash(asked))


def test_a_launch_into_a_cooling_place_is_a_capacity_failure():
    error = cooling_down("gcp", request(cloud="gcp", market="spot"), "us-central1-a, us-central1-b")
    assert isinstance(error, InsufficientCapacity) and error.retryable
    assert error.code == "cooldown"
    assert "g5.xlarge (spot) in us-central1-a, us-central1-b is cooling down" in error.message


def test_instances_list_in_launch_order_unknown_first_then_by_id():
    def instance(iid: str, minutes: int | None) -> Instance:
        launched = None if minutes is None else START + timedelta(minutes=minutes)
        return Instance(iid, "aws", "aws", "r", "z", "t", "spot", "running", launched_at=launched)

    listed = [instance("b", 5), instance("c", None), instance("a", 5), instance("d", 1)]
    assert [i.id for i in sorted(listed, key=launch_order)] == ["c", "d", "a", "b"]
