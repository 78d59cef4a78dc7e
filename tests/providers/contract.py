"""The provider contract suite: the sentences of `providers.base.Provider`, as tests.

Every provider (sandbox, AWS on moto, GCE and Azure on their loopback fakes) runs
the same tests: a test module defines a `harness` fixture returning a `Harness` and
a class that inherits `ProviderContract`. The harness knows how to make the cloud
do what only the cloud can (reclaim a spot instance, answer with an error).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

import pytest

from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_JOB, Instance, LaunchRequest, Provider
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)

# The error classes a harness can make a launch fail with.
ERRORS: dict[str, type[ProviderError]] = {
    "capacity": InsufficientCapacity,
    "quota": QuotaExceeded,
    "throttle": RateLimited,
    "credentials": CredentialsError,
    "invalid": InvalidRequest,
}


class Harness(Protocol):
    """One provider under test, and the levers of its (emulated) cloud."""

    provider: Provider
    error_kinds: tuple[str, ...]  # the keys of ERRORS this harness can inject

    def request(self, attempt: str, **changes) -> LaunchRequest:
        """A spot request this provider can launch, with `changes` applied."""
        ...

    def unknown_id(self) -> str:
        """An instance id of the provider's shape that was never launched."""
        ...

    def interrupt(self, instance: Instance) -> None:
        """The cloud reclaims `instance` (a spot reclaim), as the cloud itself would."""
        ...

    def fail_launches(self, kind: str) -> AbstractContextManager[None]:
        """While inside, every launch call the cloud receives fails with `kind`."""
        ...

    def new_provider(self) -> Provider:
        """Another provider object on the same account (a restarted controller)."""
        ...


def names_of(provider: Provider) -> set[str]:
    """Names an error or notice may carry: the provider's, or a fleet member's."""
    return {provider.name, *getattr(provider, "members", {})}


def attempts_of(provider: Provider, attempt: str) -> list[Instance]:
    return [i for i in provider.list_instances() if i.attempt_id == attempt]


class ProviderContract:
    """Inherit in a test module that defines a `harness` fixture (cloud adapters also
    inherit CooldownContract)."""

    def test_is_a_provider(self, harness: Harness) -> None:
        assert isinstance(harness.provider, Provider)

    def test_launch_is_idempotent_per_attempt(self, harness: Harness) -> None:
        provider = harness.provider
        first = provider.launch(harness.request("c-1"))
        again = provider.launch(harness.request("c-1"))
        from_restart = harness.new_provider().launch(harness.request("c-1"))
        assert first.id == again.id == from_restart.id
        assert len(attempts_of(provider, "c-1")) == 1
        assert first.market == "spot" and first.active

    def test_same_attempt_with_another_request_is_invalid(self, harness: Harness) -> None:
        provider = harness.provider
        provider.launch(harness.request("c-2"))
        with pytest.raises(InvalidRequest):
            provider.launch(harness.request("c-2", command="echo something else"))
        assert len(attempts_of(provider, "c-2")) == 1

    def test_tags_round_trip_through_list(self, harness: Harness) -> None:
        launched = harness.provider.launch(harness.request("c-3", job_id="j-tags"))
        found = {i.id: i for i in harness.new_provider().list_instances()}
        assert launched.id in found
        listed = found[launched.id]
        assert listed.tag(TAG_JOB) == "j-tags" and listed.tag(TAG_ATTEMPT) == "c-3"
        assert listed.tag(TAG_BROKER) == "broker"
        assert harness.provider.describe(launched.id).attempt_id == "c-3"

    def test_terminate_is_repeatable(self, harness: Harness) -> None:
        provider = harness.provider
        instance = provider.launch(harness.request("c-4"))
        assert provider.terminate(instance.id) is True
        assert provider.terminate(instance.id) is False
        assert not provider.describe(instance.id).active

    def test_unknown_instances_are_not_found(self, harness: Harness) -> None:
        unknown = harness.unknown_id()
        with pytest.raises(NotFound):
            harness.provider.describe(unknown)
        with pytest.raises(NotFound):
            harness.provider.terminate(unknown)

    def test_interruptions_are_reported_once(self, harness: Harness) -> None:
        provider = harness.provider
        provider.interruptions()  # whatever came before
        instance = provider.launch(harness.request("c-5"))
        harness.interrupt(instance)
        notices = provider.interruptions()
        assert [n.instance_id for n in notices] == [instance.id]
        assert notices[0].provider in names_of(provider) and notices[0].kind
        assert provider.interruptions() == []
        assert provider.describe(instance.id).state == "interrupted"

    def test_launch_errors_are_classified(self, harness: Harness) -> None:
        assert harness.error_kinds, "a harness injects at least one error kind"
        for kind in harness.error_kinds:
            provider = harness.new_provider()  # its own cool-down: kinds don't mask each other
            request = harness.request(f"c-err-{kind}")
            with harness.fail_launches(kind), pytest.raises(ERRORS[kind]) as error:
                provider.launch(request)
            assert error.value.provider in names_of(provider), kind
            assert error.value.retryable == (kind in ("capacity", "throttle")), kind
            live = [i for i in attempts_of(provider, request.attempt_id) if i.active]
            assert not live, f"{kind}: an instance was left behind"


class CooldownContract:
    """For cloud adapters: a capacity failure makes failover move on at once."""

    def test_capacity_failure_cools_the_place_down(self, harness: Harness) -> None:
        provider = harness.provider
        with harness.fail_launches("capacity"), pytest.raises(InsufficientCapacity):
            provider.launch(harness.request("c-6"))
        # The cloud would accept it now, but the place is cooling down: fail over at once.
        with pytest.raises(InsufficientCapacity, match="cool"):
            provider.launch(harness.request("c-7"))
        on_demand = provider.launch(harness.request("c-8", market="on-demand"))
        assert on_demand.market == "on-demand"


def no_sleep() -> Callable[[float], None]:
    """A sleep for adapters under test: backoff runs its course without waiting."""
    return lambda _seconds: None
