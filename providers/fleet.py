"""One Provider over several: each cloud is served by exactly one member.

The controller speaks to one provider. With real clouds enabled (BROKER_CLOUDS),
the fleet sends AWS requests to the AWS adapter, GCP ones to the GCP adapter, and
everything else (on-prem pools, clouds not enabled) to the sandbox. Instance ids
carry their member's name (`aws:us-east-1/i-0abc`), so describe and terminate
reach the right member even after a restart, whichever clouds and pools the next
session enables (the runtime always speaks through a fleet; an id without a member's
name is the default member's, as ids were before).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from providers.base import launch_to_end_hours
from providers.capabilities import (
    Billing,
    Capacity,
    CheckpointStores,
    Gangs,
    PlayedReclaims,
    PoolShares,
)
from providers.errors import NotFound, ProviderError

if TYPE_CHECKING:
    from pricing.table import OfferTable
    from providers.base import Instance, InterruptionNotice, LaunchRequest, Provider

SEPARATOR = ":"


class Fleet(Capacity, PoolShares, Billing, CheckpointStores, Gangs, PlayedReclaims):
    """A `Provider` whose members each serve some clouds (see the module docstring).

    `routes` maps a cloud name to the member serving it; member names must differ.
    `default` serves every cloud not in `routes` (None: such requests are invalid).
    """

    name = "fleet"

    def __init__(self, routes: Mapping[str, Provider], default: Provider | None = None) -> None:
        self.routes = dict(routes)
        self.default = default
        self.members: dict[str, Provider] = {}
        for member in (*self.routes.values(), *([default] if default else [])):
            known = self.members.setdefault(member.name, member)
            if known is not member:
                raise ValueError(f"two fleet members are named {member.name!r}")

    # --- routing ----------------------------------------------------------------------

    def member_for(self, cloud: str) -> Provider:
        """The member that launches on `cloud`."""
        member = self.routes.get(cloud, self.default)
        if member is None:
            from providers.errors import InvalidRequest

            raise InvalidRequest(self.name, f"no provider serves cloud {cloud!r} here")
        return member

    def _serves(self, member: Provider) -> tuple[set[str], bool]:
        """(the clouds routed to `member`, whether it also serves every other cloud)."""
        clouds = {cloud for cloud, routed in self.routes.items() if routed is member}
        return clouds, member is self.default

    def _split(self, instance_id: str) -> tuple[Provider, str]:
        name, sep, own_id = instance_id.partition(SEPARATOR)
        if not sep:
            # An id recorded before the broker always spoke through a fleet: the
            # sandbox's (the default member's) own id.
            if self.default is None:
                raise NotFound(self.name, f"instance {instance_id!r} is not a fleet id")
            return self.default, instance_id
        member = self.members.get(name)
        if member is None:
            # Launched by a member not enabled now: its fate is unknown, not "gone".
            raise ProviderError(
                self.name,
                f"instance {instance_id} belongs to {name!r}, which is not enabled here "
                "(see BROKER_CLOUDS)",
            )
        return member, own_id

    @staticmethod
    def _tagged(member: Provider, instance: Instance) -> Instance:
        """`instance` with fleet ids: its own and its gang members' node ids."""
        prefix = f"{member.name}{SEPARATOR}"
        members = tuple(
            dataclasses.replace(m, node_id=prefix + m.node_id) for m in instance.members
        )
        return dataclasses.replace(instance, id=prefix + instance.id, members=members)

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """Each member's offers for the clouds it serves, as one table."""
        import numpy as np

        from pricing.table import concat

        parts = []
        for member in self.members.values():
            table = member.offers()
            clouds, others = self._serves(member)
            cloud = table.text("cloud")
            routed_elsewhere = [c for c in self.routes if self.routes[c] is not member]
            keep = np.isin(cloud, list(clouds))
            if others:
                keep |= ~np.isin(cloud, routed_elsewhere)
            parts.append(table.take(np.flatnonzero(keep)))
        return concat(parts)

    def launch(self, request: LaunchRequest) -> Instance:
        member = self.member_for(request.cloud)
        if request.resume_from and not isinstance(member, CheckpointStores):
            # A cloud resumes from the durable checkpoint, never from a sandbox path.
            request = dataclasses.replace(request, resume_from=request.checkpoint_uri)
        return self._tagged(member, member.launch(request))

    def describe(self, instance_id: str) -> Instance:
        member, own_id = self._split(instance_id)
        return self._tagged(member, member.describe(own_id))

    def terminate(self, instance_id: str) -> bool:
        member, own_id = self._split(instance_id)
        return member.terminate(own_id)

    def list_instances(self) -> list[Instance]:
        return [
            self._tagged(member, instance)
            for member in self.members.values()
            for instance in member.list_instances()
        ]

    def interruptions(self) -> list[InterruptionNotice]:
        return [
            dataclasses.replace(notice, instance_id=f"{member.name}{SEPARATOR}{notice.instance_id}")
            for member in self.members.values()
            for notice in member.interruptions()
        ]

    def object_store(self) -> Any:
        if self.default is not None:
            return self.default.object_store()
        raise NotImplementedError("the fleet has no default member for checkpoints")

    # --- capabilities (providers.capabilities), for the members that have them ------------

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Free nodes per (cloud, region) where a member knows them (the sandbox)."""
        free: dict[tuple[str, str], int] = {}
        for member in self.members.values():
            if not isinstance(member, Capacity):
                continue
            clouds, others = self._serves(member)
            for (cloud, region), nodes in member.free_nodes().items():
                if cloud in clouds or (others and cloud not in self.routes):
                    free[(cloud, region)] = nodes
        return free

    def free_gpus(self) -> dict[tuple[str, str], int]:
        """Free GPUs per (cloud, pool) where a member sells shares of a node (on-prem)."""
        free: dict[tuple[str, str], int] = {}
        for member in self.members.values():
            if not isinstance(member, PoolShares):
                continue
            clouds, others = self._serves(member)
            for (cloud, pool), gpus in member.free_gpus().items():
                if cloud in clouds or (others and cloud not in self.routes):
                    free[(cloud, pool)] = gpus
        return free

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """The gang limit of the member serving `cloud`: 1 where it runs no gangs."""
        member = self.routes.get(cloud, self.default)
        if member is None:
            return 0
        if not isinstance(member, Gangs):
            return 1
        return member.max_gang_nodes(cloud, region, instance_type)

    def checkpoint_store(self, job_id: str, cloud: str, region: str) -> str | None:
        """The checkpoint store of (cloud, region) when the member serving that cloud
        keeps one (the sandbox); None for a cloud, whose jobs read the manifest's URI."""
        member = self.routes.get(cloud, self.default)
        if not isinstance(member, CheckpointStores):
            return None
        return member.checkpoint_store(job_id, cloud, region)

    def last_checkpoint_at(self, job_id: str, cloud: str, region: str) -> datetime | None:
        """When the member serving `cloud` last saw the job checkpoint there, if it can tell."""
        member = self.routes.get(cloud, self.default)
        if not isinstance(member, CheckpointStores):
            return None
        return member.last_checkpoint_at(job_id, cloud, region)

    def billed_hours(self, instance: Instance) -> float:
        """The member's billing when it has its own (the sandbox's time scale), else the
        time between launch and end."""
        member, own_id = self._split(instance.id)
        if isinstance(member, Billing):
            return float(member.billed_hours(dataclasses.replace(instance, id=own_id)))
        return launch_to_end_hours(instance)

    def crunch_spot(self, cloud: str) -> None:
        """A played spot crunch on the member serving `cloud`; InvalidRequest when that
        member is a real cloud."""
        member = self.member_for(cloud)
        if not isinstance(member, PlayedReclaims):
            from providers.errors import InvalidRequest

            raise InvalidRequest(self.name, f"{member.name} cannot play a spot crunch")
        member.crunch_spot(cloud)

    def time_scale(self, cloud: str, pool: str = "") -> float:
        """The scale of the member serving `cloud` (1 for a real cloud)."""
        member = self.routes.get(cloud, self.default)
        return float(member.time_scale(cloud, pool)) if isinstance(member, Billing) else 1.0

    def interrupt(self, instance_id: str, kind: str = "spot-reclaim") -> InterruptionNotice | None:
        """A played reclaim on the member that owns the instance; InvalidRequest when that
        member is a real cloud (it reclaims by itself)."""
        member, own_id = self._split(instance_id)
        if not isinstance(member, PlayedReclaims):
            from providers.errors import InvalidRequest

            raise InvalidRequest(self.name, f"{member.name} instances cannot be reclaimed by hand")
        notice = member.interrupt(own_id, kind)
        if notice is None:
            return None  # (a gang's notice names the gang, also when one node was reclaimed)
        return dataclasses.replace(
            notice, instance_id=f"{member.name}{SEPARATOR}{notice.instance_id}"
        )
