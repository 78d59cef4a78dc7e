"""The provider contract, run against the sandbox (local processes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from broker.clock import SystemClock
from pricing.catalog import read_offer_table
from pricing.table import OfferTable
from providers.base import Instance, LaunchRequest
from providers.gang import GangMember
from providers.sandbox import SandboxProvider
from tests.fakes.offers import write_catalog
from tests.providers.contract import (
    AWS_PLACE,
    BillingContract,
    CapacityContract,
    CheckpointStoresContract,
    GangMembersContract,
    GangsContract,
    PlayedReclaimsContract,
    ProviderContract,
    spot_request,
)


@dataclass
class SandboxHarness:
    offers: OfferTable
    workdir: Path
    error_kinds: tuple[str, ...] = ("capacity", "invalid")
    made: list[SandboxProvider] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.provider = self.new_provider()

    def new_provider(self) -> SandboxProvider:
        provider = SandboxProvider(
            self.offers, self.workdir, SystemClock(), terminate_grace=2.0, notice_seconds=2.0
        )
        self.made.append(provider)
        return provider

    def request(self, attempt: str, **changes) -> LaunchRequest:
        return spot_request(attempt, AWS_PLACE, changes)

    def unknown_id(self) -> str:
        return "sbx-never-launched"

    def member_tags(self, instance: Instance, member: GangMember) -> dict[str, str]:
        """A rank's tags, from its record on disk."""
        attempt, _, rank = member.node_id.removeprefix("sbx-").partition("/")
        record = self.provider._dir.load(f"{attempt}/{rank}")
        assert record is not None, member
        return dict(record.tags)

    def interrupt(self, instance: Instance) -> None:
        self.provider.interrupt(instance.id)
        self.provider.wait(instance.id, 30.0)

    @contextmanager
    def fail_launches(self, kind: str) -> Iterator[None]:
        """Every sandbox on the workdir (the "cloud") refuses launches of that kind."""
        saved = [(p, p.capacity, p._offers, p._index) for p in self.made]
        for provider in self.made:
            if kind == "capacity":
                provider.capacity = 0
            elif kind == "invalid":  # the catalog no longer sells anything
                provider._offers, provider._index = self.offers.take(np.arange(0)), None
            else:
                raise ValueError(kind)
        try:
            yield
        finally:
            for provider, capacity, offers, index in saved:
                provider.capacity, provider._offers, provider._index = capacity, offers, index

    def close(self) -> None:
        for provider in self.made:
            for instance in provider.list_instances():
                provider.terminate(instance.id)


@pytest.fixture
def harness(tmp_path) -> Iterator[SandboxHarness]:
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    harness = SandboxHarness(offers, tmp_path / "sandbox")
    yield harness
    harness.close()


class TestSandboxContract(
    ProviderContract,
    CapacityContract,
    BillingContract,
    CheckpointStoresContract,
    GangMembersContract,
    GangsContract,
    PlayedReclaimsContract,
):
    pass
