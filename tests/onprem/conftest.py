"""Fixtures of the on-prem tests (the services themselves are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from broker.clock import SystemClock
from onprem.executors.base import NodeUnreachable
from onprem.provider import OnPremProvider


@pytest.fixture
def make(tmp_path):
    """make(*pools, grace=5.0) -> an OnPremProvider over the pools; after the test every
    live instance it knows is terminated and its connections are closed."""
    made = []

    def provider(*pools, grace: float = 5.0) -> OnPremProvider:
        built = OnPremProvider(pools, clock=SystemClock(), workdir=tmp_path, terminate_grace=grace)
        made.append(built)
        return built

    yield provider
    for built in made:
        try:
            for instance in built.list_instances():
                if instance.active:
                    built.terminate(instance.id)
        except NodeUnreachable:
            pass  # a pool made unreachable on purpose; another provider ends its jobs
        finally:
            built.close()
