"""Spot policies by name, so manifests, the simulator and reports can name them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from broker.spotpolicy.deadline_aware import DeadlineAware
from broker.spotpolicy.model import SpotPolicy
from broker.spotpolicy.uniform_progress import Greedy, OnDemand, SpotFailover, UniformProgress
from pricing.userio.suggest import hint

POLICIES: Mapping[str, Callable[..., SpotPolicy]] = MappingProxyType(
    {
        DeadlineAware.name: DeadlineAware,
        UniformProgress.name: UniformProgress,
        Greedy.name: Greedy,
        OnDemand.name: OnDemand,
        SpotFailover.name: SpotFailover,
    }
)


def parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters a named policy accepts, in declaration order."""
    return tuple(inspect.signature(_factory(name)).parameters)


def make_policy(name: str, **params: Any) -> SpotPolicy:
    """Build the named policy; ValueError, with a "did you mean", for an unknown name or
    parameter, and the policy's own ValueError for a bad value."""
    factory = _factory(name)
    known = parameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        first = unknown[0]
        accepted = ", ".join(known) or "none"
        raise ValueError(
            f"spot policy {name!r} has no parameter {first!r}{hint(first, known)}; "
            f"it accepts: {accepted}"
        )
    return factory(**params)


def _factory(name: str) -> Callable[..., SpotPolicy]:
    try:
        return POLICIES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown spot policy {name!r}{hint(str(name), POLICIES)}; known: {', '.join(POLICIES)}"
        ) from None
