"""Putting the pieces together: state store + provider + controller for a state file.

The embedded default provider is the local sandbox: it sells the offers in force
(catalog + on-prem pools) and runs each job as a local process, so the whole
product works on a machine with no cloud account. Its working directory sits
next to the state file, so one `--state` path is one self-contained broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.clock import Clock, SystemClock

if TYPE_CHECKING:
    from broker.controller import Controller
    from broker.offers import OffersInForce
    from broker.queue import Policy
    from broker.state import StateStore
    from providers.base import Provider


@dataclass
class BrokerSession:
    """An open state store, its provider and a controller over both."""

    store: StateStore
    provider: Provider
    controller: Controller
    workdir: Path

    def close(self) -> None:
        self.store.close()


def sandbox_workdir(state_path: Path) -> Path:
    return state_path.parent / f"{state_path.stem}-sandbox"


def open_runtime(
    state_path: Path,
    view: OffersInForce,
    *,
    time_scale: float = 3600.0,
    capacity: int = 4,
    clock: Clock | None = None,
    policy: Policy | None = None,
    clouds: Sequence[str] = (),
    store: StateStore | None = None,
    launching: bool = True,
) -> BrokerSession:
    """Open the store at `state_path` (or take `store`, opened there) and a sandbox
    provider over the offers in force.

    On-prem pools get as many sandbox slots as they have nodes; every cloud region
    gets `capacity` nodes. `time_scale` 3600 bills a wall second as an hour.
    `clouds` are launched for real through their adapters (a Fleet routes by cloud);
    the sandbox keeps serving on-prem pools and every other cloud. Only `launching`
    sessions make the sandbox folder beside the state file: reading the queue or
    cancelling a job leaves the folder as it is (or absent).
    """
    from broker.controller import Controller
    from broker.scheduling import pool_gpus_of
    from broker.state import StateStore
    from pricing.query import OfferIndex
    from providers.sandbox import SandboxProvider

    clock = clock or SystemClock()
    table = view.index.offers
    slots = _onprem_slots(table)  # on-prem regions: as many slots as their pools' nodes
    workdir = sandbox_workdir(state_path)
    provider = SandboxProvider(
        table,
        workdir,
        clock,
        capacity={**_clouds(table, capacity), **slots},
        time_scale=time_scale,
        make_workdir=launching,
    )
    if clouds:
        provider = _fleet(clouds, provider, table, clock)
    store = store or StateStore.open(state_path, clock)
    countries = view.index.extra_countries

    def index_of(live) -> OfferIndex:
        return OfferIndex(live.offers(), extra_countries=countries)

    controller = Controller(store, provider, clock, index_of, policy, pool_gpus_of(view.index))
    return BrokerSession(store, provider, controller, workdir)


def _fleet(clouds: Sequence[str], sandbox: Provider, table, clock: Clock) -> Provider:
    """The sandbox plus a real adapter for each of `clouds` (built lazily: no cloud call
    happens until the controller needs one)."""
    from providers.fleet import Fleet
    from providers.registry import load_provider

    routes = {cloud: load_provider(cloud, catalog=table, clock=clock) for cloud in clouds}
    return Fleet(routes, default=sandbox)


def _onprem_slots(table) -> dict[tuple[str, str], int]:
    """Sandbox slots per on-prem region: the free nodes of its pools (one per row
    without a known capacity)."""
    import numpy as np

    names, codes, numbers = table.categories, table.codes, table.numbers
    onprem = np.flatnonzero(names["cloud"] == "onprem")
    rows = np.flatnonzero(np.isin(codes["cloud"], onprem))
    slots: dict[tuple[str, str], int] = {}
    for region, free in zip(
        names["region"][codes["region"][rows]].tolist(),
        numbers["capacity"][rows].tolist(),
        strict=True,
    ):
        slots[("onprem", region)] = slots.get(("onprem", region), 0) + (
            int(free) if free == free else 1
        )
    return slots


def _clouds(table, capacity: int) -> dict[tuple[str, str], int]:
    names, codes = table.categories, table.codes
    pairs = set(zip(codes["cloud"].tolist(), codes["region"].tolist(), strict=True))
    return {
        (str(names["cloud"][c]), str(names["region"][r])): capacity
        for c, r in pairs
        if names["cloud"][c] != "onprem"
    }
