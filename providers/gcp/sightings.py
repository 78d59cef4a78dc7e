"""What one GCP provider object has seen of its VMs, and the Instances it makes of them.

GCE forgets a deleted VM, does not always say when a VM ended, and tells a preemption
only through its operations: the provider keeps the last Instance seen per id, the ids
GCE recorded a preemption for, and the first time it saw each VM ended, so describe()
still answers (and answers the same) once GCE has let go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from providers.base import ACTIVE_STATES, ENDED_STATES, Clock, Instance, InstanceState
from providers.errors import NotFound
from providers.gcp.api import Compute
from providers.gcp.capacity import region_of
from providers.gcp.operations import PREEMPTED
from providers.gcp.vm import NAME, STATES, instance_state, is_spot, parse_time, tags_of, zone_of


class Sightings:
    """The memory described in the module docstring; GCE is asked through `gce`."""

    def __init__(self, gce: Compute, clock: Clock) -> None:
        self.gce = gce
        self.clock = clock
        self.known: dict[str, Instance] = {}  # last seen, per id (launched or described)
        self.preempted: set[str] = set()  # ids GCE recorded a preemption for
        self._ended_at: dict[str, datetime] = {}

    def remember(self, instance: Instance) -> Instance:
        """Note `instance` as the last sight of its id; returns it."""
        self.known[instance.id] = instance
        return instance

    def preemptions(self) -> dict[str, Any]:
        """id -> the compute.instances.preempted operation GCE recorded for it (noted)."""
        found = self.gce.preemptions()
        self.preempted.update(found)
        return found

    def instance(self, vm: Any, preempted: Iterable[str] | None = None) -> Instance:
        """The Instance of a compute_v1.Instance. An ended spot VM is interrupted when GCE
        preempted it: by what this object knows, its status message, `preempted` (the
        ids of a preemptions() read) or, without that, the VM's own operations."""
        zone = zone_of(vm)
        key, spot = f"{zone}/{vm.name}", is_spot(vm)
        was_preempted = False
        if spot and STATES.get(vm.status) == "terminated":
            was_preempted = (
                key in self.preempted
                or "preempt" in vm.status_message.lower()
                or (
                    key in preempted
                    if preempted is not None
                    else PREEMPTED in self.gce.history(zone, vm.name)
                )
            )
            if was_preempted:
                self.preempted.add(key)
        state = instance_state(vm.status, spot, was_preempted)
        ended = (
            None
            if state in ACTIVE_STATES
            else parse_time(vm.last_stop_timestamp) or self.end_of(key)
        )
        return Instance(
            id=key,
            provider=NAME,
            cloud=NAME,
            region=region_of(zone),
            zone=zone,
            instance_type=vm.machine_type.rsplit("/", 1)[-1],
            market="spot" if spot else "on-demand",
            state=state,
            tags=tags_of(vm),
            launched_at=parse_time(vm.creation_timestamp),
            ended_at=ended,
        )

    def vanished(self, instance_id: str, zone: str, name: str) -> Instance:
        """A VM GCE no longer knows: how it ended, or NotFound when it never existed."""
        known = self.known.get(instance_id)
        if known is not None and known.state in ENDED_STATES:
            return known
        history = self.gce.history(zone, name)
        if PREEMPTED in history:
            self.preempted.add(instance_id)
            state: InstanceState = "interrupted"
        elif "delete" in history or known is not None:
            state = "terminated"
        else:
            raise NotFound(NAME, f"no instance {instance_id}")
        market = "spot" if state == "interrupted" else ""  # only spot VMs are preempted
        base = known or Instance(instance_id, NAME, NAME, region_of(zone), zone, "", market, state)
        return self.remember(replace(base, state=state, ended_at=self.end_of(instance_id)))

    def end_of(self, key: str) -> datetime:
        """When this object first saw `key` ended (GCE does not always say)."""
        return self._ended_at.setdefault(key, self.clock.now())
