"""The provider contract suite: the sentences of `providers.base.Provider`, as tests.

Every provider (sandbox, AWS on moto, GCE and Azure on their loopback fakes) runs
the same tests: a test module defines a `harness` fixture returning a `Harness` and
a class that inherits `ProviderContract`. The harness knows how to make the cloud
do what only the cloud can (reclaim a spot instance, answer with an error).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Protocol

import pytest

from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_JOB, Instance, LaunchRequest, Provider
from providers.capabilities import (
    Billing,
    Capacity,
    CheckpointStores,
    Gangs,
    PlayedReclaims,
    PoolShares,
    Restrictions,
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
from providers.gang import TAG_RANK, GangMember, gang_state
from tests.waiting import wait_ended, wait_until

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

    def member_tags(self, instance: Instance, member: GangMember) -> dict[str, str]:
        """What the engine keeps of one node of a gang (GangMembersContract only)."""
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


# The place of most harnesses' requests: a T4 spot VM in AWS us-east-1 (or its stand-in).
AWS_PLACE = {"cloud": "aws", "region": "us-east-1", "instance_type": "g4dn.xlarge"}


def spot_request(
    attempt: str, where: Mapping[str, object], changes: Mapping[str, object]
) -> LaunchRequest:
    """The contract's usual request: a spot attempt of job j-contract running `sleep 30`
    `where` says (cloud, region, instance type...), with `changes` applied over both (a
    harness's `request`)."""
    fields = dict(attempt_id=attempt, job_id="j-contract", market="spot", command="sleep 30")
    return LaunchRequest(**(fields | dict(where) | dict(changes)))


def names_of(provider: Provider) -> set[str]:
    """Names an error or notice may carry: the provider's, or a fleet member's."""
    from providers.fleet import Fleet

    members = provider.members if isinstance(provider, Fleet) else {}
    return {provider.name, *members}


def attempts_of(provider: Provider, attempt: str) -> list[Instance]:
    return [i for i in provider.list_instances() if i.attempt_id == attempt]


class ProviderContract:
    """Inherit in a test module that defines a `harness` fixture (cloud adapters also
    inherit CooldownContract, and each provider the suite of every capability it
    declares: CapacityContract, BillingContract, ...)."""

    def test_is_a_provider(self, harness: Harness) -> None:
        assert isinstance(harness.provider, Provider)

    def test_every_declared_capability_runs_its_suite(self, harness: Harness) -> None:
        """A provider that declares a capability is tested against its contract here."""
        for capability, suite in CAPABILITY_SUITES.items():
            declared = isinstance(harness.provider, capability)
            assert declared == isinstance(self, suite), (capability.__name__, declared)

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
        assert wait_ended(provider, instance.id, 120), provider.describe(instance.id)
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


# --- capabilities (providers.capabilities): one suite each --------------------------------


class CapacityContract:
    """`Capacity.free_nodes`: a launch takes a node of its place, its end gives it back."""

    def test_a_launch_takes_a_node_and_its_end_gives_it_back(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Capacity)
        request = harness.request("cap-1")
        place = (request.cloud, request.region)
        before = provider.free_nodes()[place]
        instance = provider.launch(request)
        assert provider.free_nodes()[place] == before - request.nodes
        provider.terminate(instance.id)
        assert wait_until(lambda: provider.free_nodes()[place] == before, 120)
        assert all(free >= 0 for free in provider.free_nodes().values())


class PoolSharesContract:
    """`PoolShares.free_gpus`: a launch takes its GPUs (count x nodes) of its pool, its
    end gives them back; never negative."""

    def test_a_launch_takes_its_gpus_and_its_end_gives_them_back(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, PoolShares)
        request = harness.request("shares-1")
        pool = (request.cloud, request.zone)
        before = provider.free_gpus()
        instance = provider.launch(request)
        taken = provider.free_gpus()
        if pool in before:  # a member that sells whole nodes only lists nothing here
            assert taken[pool] == before[pool] - int(request.accelerator_count * request.nodes)
        else:
            assert pool not in taken
        provider.terminate(instance.id)
        assert wait_until(lambda: provider.free_gpus() == before, 120), provider.free_gpus()
        assert all(free >= 0 for free in provider.free_gpus().values())


class BillingContract:
    """`Billing.billed_hours`: never negative, and fixed once the instance has ended;
    `Billing.time_scale`: positive, the same for the same cloud."""

    def test_the_time_scale_is_positive_and_stable(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Billing)
        cloud = harness.request("scale-1").cloud
        assert provider.time_scale(cloud) > 0
        assert provider.time_scale(cloud) == provider.time_scale(cloud)

    def test_billed_hours_are_not_negative_and_stop_at_the_end(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Billing)
        instance = provider.launch(harness.request("bill-1"))
        assert provider.billed_hours(provider.describe(instance.id)) >= 0
        provider.terminate(instance.id)
        assert wait_ended(provider, instance.id, 120), provider.describe(instance.id)
        ended = provider.describe(instance.id)
        hours = provider.billed_hours(ended)
        assert hours >= 0 and provider.billed_hours(provider.describe(instance.id)) == hours


class CheckpointStoresContract:
    """`CheckpointStores`: one stable store per (job, place), distinct between places,
    and `last_checkpoint_at` None until something is written there."""

    def test_a_store_per_place_and_when_it_was_last_written(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, CheckpointStores)
        request = harness.request("ckpt-1", job_id="j-ckpt")
        here = provider.checkpoint_store("j-ckpt", request.cloud, request.region)
        assert here is not None
        assert here == provider.checkpoint_store("j-ckpt", request.cloud, request.region)
        assert here != provider.checkpoint_store("j-ckpt", request.cloud, "elsewhere-1")
        assert here != provider.checkpoint_store("j-other", request.cloud, request.region)
        assert provider.last_checkpoint_at("j-ckpt", request.cloud, request.region) is None
        from broker.controller.checkpoints import folder_uri

        provider.object_store().put(b"weights", folder_uri(here) + "step-1/weights.bin")
        assert provider.last_checkpoint_at("j-ckpt", request.cloud, request.region) is not None


class PlayedReclaimsContract:
    """`PlayedReclaims.interrupt`: a notice for a running instance, which then ends
    interrupted; None for an ended one; NotFound for an unknown one."""

    def test_a_played_reclaim_interrupts_once(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, PlayedReclaims)
        instance = provider.launch(harness.request("reclaim-1"))
        notice = provider.interrupt(instance.id)
        assert notice is not None and notice.instance_id == instance.id and notice.kind
        harness.interrupt(instance)  # the harness waits for the job to go
        assert provider.describe(instance.id).state == "interrupted"
        assert provider.interrupt(instance.id) is None
        with pytest.raises(NotFound):
            provider.interrupt(harness.unknown_id())

    def test_a_played_crunch_stops_selling_spot_there(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, PlayedReclaims)
        request = harness.request("crunch-1")
        provider.crunch_spot(request.cloud)
        rows = [r for r in provider.offers().records() if r["cloud"] == request.cloud]
        assert rows and all(r["price_spot"] != r["price_spot"] for r in rows)  # NaN: not sold
        with pytest.raises(InsufficientCapacity):
            provider.launch(request)
        on_demand = provider.launch(harness.request("crunch-2", market="on-demand"))
        assert on_demand.market == "on-demand"


class RestrictionsContract:
    """`Restrictions.unavailable`: every refusal names its place, market and reason."""

    def test_every_unavailable_offer_says_why(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Restrictions)
        for refusal in provider.unavailable():
            assert refusal.cloud and refusal.region and refusal.reason


class GangsContract:
    """`Gangs`: a gang of N nodes is one attempt and one Instance whose members are ranks
    0..N-1, launched once (a relaunch adds no node), ended as a unit; more nodes than
    `max_gang_nodes` is refused before anything starts. The harness's request, with
    `nodes` changed, must fit a gang."""

    def test_a_gang_is_one_instance_of_its_ranked_members(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Gangs)
        request = harness.request("g-1", nodes=2)
        assert provider.max_gang_nodes(request.cloud, request.region, request.instance_type) >= 2
        gang = provider.launch(request)
        assert gang.nodes == 2 and [m.rank for m in gang.members] == [0, 1]
        assert len({m.node_id for m in gang.members}) == 2 and gang.id not in (
            m.node_id for m in gang.members
        )
        assert gang.attempt_id == "g-1" and gang.job_id == request.job_id
        again = harness.new_provider().launch(request)
        assert again.id == gang.id
        assert [m.node_id for m in again.members] == [m.node_id for m in gang.members]
        listed = attempts_of(harness.new_provider(), "g-1")
        assert [(i.id, i.nodes) for i in listed] == [(gang.id, 2)]
        assert [m.rank for m in listed[0].members] == [0, 1]
        assert [m.node_id for m in provider.describe(gang.id).members] == [
            m.node_id for m in gang.members
        ]

    def test_terminating_a_gang_ends_every_member(self, harness: Harness) -> None:
        provider = harness.provider
        gang = provider.launch(harness.request("g-2", nodes=2))
        assert provider.terminate(gang.id) is True
        # A cloud returns once it accepted the termination: wait for the state it reports
        # (an engine that returns once the gang stopped passes at the first look).
        assert wait_ended(provider, gang.id, 120), provider.describe(gang.id)
        assert provider.terminate(gang.id) is False
        ended = provider.describe(gang.id)
        assert not ended.active and ended.nodes == 2
        assert all(m.state not in ("pending", "running") for m in ended.members)

    def test_more_nodes_than_the_most_are_refused(self, harness: Harness) -> None:
        provider = harness.provider
        assert isinstance(provider, Gangs)
        request = harness.request("g-3")
        most = provider.max_gang_nodes(request.cloud, request.region, request.instance_type)
        with pytest.raises(InvalidRequest):
            provider.launch(harness.request("g-3", nodes=most + 1))
        assert attempts_of(provider, "g-3") == []


class GangMembersContract:
    """Beyond `GangsContract`, for providers whose harness can tell each node's tags and
    reclaim a running gang (the sandbox, the fleet, on-prem pools): every node is
    tagged with its rank, describe aggregates the members, a reclaim ends them all."""

    def gang(self, harness: Harness, attempt: str) -> Instance:
        provider = harness.provider
        assert isinstance(provider, Gangs)
        request = harness.request(attempt, nodes=2)
        assert provider.max_gang_nodes(request.cloud, request.region, request.instance_type) >= 2
        return provider.launch(request)

    def test_every_node_is_tagged_with_its_rank(self, harness: Harness) -> None:
        instance = self.gang(harness, "gm-1")
        for member in instance.members:
            assert harness.member_tags(instance, member)[TAG_RANK] == str(member.rank)

    def test_describe_aggregates_the_members(self, harness: Harness) -> None:
        instance = self.gang(harness, "gm-2")
        described = harness.provider.describe(instance.id)
        assert described.state == gang_state(described.members)[0]
        assert described.active
        assert all(m.state in ("pending", "running") for m in described.members)

    def test_a_reclaim_interrupts_the_whole_gang(self, harness: Harness) -> None:
        provider = harness.provider
        provider.interruptions()  # whatever came before
        instance = self.gang(harness, "gm-3")
        harness.interrupt(instance)
        assert [n.instance_id for n in provider.interruptions()] == [instance.id]
        ended = provider.describe(instance.id)
        assert ended.state == "interrupted"
        assert all(m.state not in ("pending", "running") for m in ended.members)


CAPABILITY_SUITES: dict[type, type] = {
    Capacity: CapacityContract,
    PoolShares: PoolSharesContract,
    Billing: BillingContract,
    CheckpointStores: CheckpointStoresContract,
    PlayedReclaims: PlayedReclaimsContract,
    Restrictions: RestrictionsContract,
    Gangs: GangsContract,
}
