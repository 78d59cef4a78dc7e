"""Putting the pieces together: state store + provider + controller for a state file.

The embedded default provider is the local sandbox: it sells the offers in force
(catalog + on-prem pools) and runs each job as a local process, so the whole
product works on a machine with no cloud account. Its working directory sits
next to the state file, so one `--state` path is one self-contained broker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.clock import Clock, SystemClock

if TYPE_CHECKING:
    from broker.controller import Controller
    from broker.offers import OffersInForce
    from broker.queue import Policy
    from broker.state import StateStore
    from broker.state.leases import Holder
    from broker.state.location import StateLocation
    from providers.base import Provider


@dataclass
class BrokerSession:
    """An open state store, its provider and a controller over both."""

    store: StateStore
    provider: Provider
    controller: Controller
    workdir: Path
    closers: tuple[Callable[[], None], ...] = ()  # what else to close (SSH connections)

    def close(self) -> None:
        self.store.close()
        for close in self.closers:
            close()


def sandbox_workdir(state_path: StateLocation) -> Path:
    """The sandbox's folder beside the state file (a database's: `local_anchor`)."""
    from broker.state.location import local_anchor

    anchor = local_anchor(state_path)
    return anchor.parent / f"{anchor.stem}-sandbox"


def open_runtime(
    state_path: StateLocation,
    view: OffersInForce,
    *,
    time_scale: float = 1.0,
    capacity: int = 4,
    clock: Clock | None = None,
    policy: Policy | None = None,
    clouds: Sequence[str] = (),
    store: StateStore | None = None,
    launching: bool = True,
    holder: Holder | None = None,
) -> BrokerSession:
    """Open the store at `state_path` (or take `store`, opened there) and the providers
    over the offers in force.

    The sandbox serves every cloud region (`capacity` nodes each; `time_scale`: billed
    seconds per wall second, 1 as it passes; the demo bills a wall second as an hour:
    3600); `clouds` are launched for real through their adapters; the on-prem pools of
    the offers' pools file run through their executors (local, SSH, Slurm:
    `onprem.provider.OnPremProvider`, its local pools billed at the same `time_scale`).
    A Fleet routes each request by cloud. Only `launching` sessions make the sandbox
    folder beside the state file: reading the queue or cancelling a job leaves the
    folder as it is (or absent). `holder`: whose leases the controller takes
    (broker.state.leases; default a fresh id for this process).
    """
    from broker.controller import Controller
    from broker.scheduling import pool_gpus_of
    from broker.state import StateStore
    from pricing.query import OfferIndex
    from providers.sandbox import SandboxProvider

    clock = clock or SystemClock()
    table = view.index.offers
    workdir = sandbox_workdir(state_path)
    sandbox = SandboxProvider(
        table,
        workdir,
        clock,
        capacity=_clouds(table, capacity),
        time_scale=time_scale,
        make_workdir=launching,
    )
    routes = _cloud_routes(clouds, table, clock)
    closers = []
    onprem = _onprem(view, clock, workdir / "onprem", time_scale)
    if onprem is not None:
        routes["onprem"] = onprem
        closers.append(onprem.close)
    from providers.fleet import Fleet

    # Always a fleet, even with the sandbox alone: the instance ids it records carry
    # their member's name, so a later session with other clouds or pools finds them.
    provider: Provider = Fleet(routes, default=sandbox)
    store = store or StateStore.open(state_path, clock)
    countries = view.index.extra_countries

    def index_of(live) -> OfferIndex:
        return OfferIndex(live.offers(), extra_countries=countries)

    controller = Controller(store, provider, clock, index_of, policy, pool_gpus_of(view.index))
    if holder is not None:
        controller.holder = holder
        store.hold_as(holder)
    return BrokerSession(store, provider, controller, workdir, tuple(closers))


def _cloud_routes(clouds: Sequence[str], table, clock: Clock) -> dict[str, Provider]:
    """A real adapter for each of `clouds` (built lazily: no cloud call happens until the
    controller needs one)."""
    from providers.registry import load_provider

    return {cloud: load_provider(cloud, catalog=table, clock=clock) for cloud in clouds}


def _onprem(view: OffersInForce, clock: Clock, workdir: Path, time_scale: float):
    """The provider of the offers' on-prem pools, or None without a pools file."""
    if view.pools_path is None:
        return None
    from onprem.inventory import load_pools
    from onprem.provider import OnPremProvider

    pools = load_pools(view.pools_path)
    if not pools:
        return None
    return OnPremProvider(pools, clock=clock, workdir=workdir, local_time_scale=time_scale)


def _clouds(table, capacity: int) -> dict[tuple[str, str], int]:
    names, codes = table.categories, table.codes
    pairs = set(zip(codes["cloud"].tolist(), codes["region"].tolist(), strict=True))
    return {
        (str(names["cloud"][c]), str(names["region"][r])): capacity
        for c, r in pairs
        if names["cloud"][c] != "onprem"
    }
