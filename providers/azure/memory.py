"""What one Azure provider object remembers of its VMs, because ARM will not say it again.

Azure forgets a deleted VM (a 404), and with eviction policy Delete an evicted one too;
it does not say who stopped a VM. So the object keeps the VMs it launched, the ones its
own terminate ended and deleted, every final state as first seen (with its time), and
the eviction notices not reported yet. Thread-safe: one lock guards it all.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from providers.azure.errors import NAME
from providers.base import Clock, Instance, InstanceState, InterruptionNotice
from providers.cloud import ReportedOnce
from providers.errors import NotFound


class Memory:
    """The memory described in the module docstring; `clock` stamps the ends it sees."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._launched: dict[str, Instance] = {}  # launched by this object
        self._terminated: set[str] = set()  # ended by this object's terminate
        self._deleted: set[str] = set()  # VM deleted by this object
        self._ended: dict[str, Instance] = {}  # final states, as first seen
        self._notices: dict[str, InterruptionNotice] = {}  # found, not yet reported
        self._reported = ReportedOnce()

    def launched(self, instance: Instance) -> Instance:
        """Note an instance this object launched: if Azure forgets it unasked, it was evicted."""
        with self._lock:
            self._launched.setdefault(instance.id, instance)
        return instance

    def ended(self, instance_id: str) -> Instance | None:
        """The final state first seen for `instance_id`, or None while it has not ended."""
        with self._lock:
            return self._ended.get(instance_id)

    def ended_by_us(self, instance_id: str) -> bool:
        """Did this object's terminate end it (so a stopped spot VM was not evicted)?"""
        with self._lock:
            return instance_id in self._terminated

    def known(self) -> list[str]:
        """Every id this object launched or saw end."""
        with self._lock:
            return [*self._ended, *self._launched]

    def end(self, instance: Instance, detail: str) -> Instance:
        """Record the first sight of an ended instance (and a notice when interrupted);
        the instance as first seen ended."""
        with self._lock:
            if instance.id in self._ended:
                return self._ended[instance.id]
            now = self.clock.now()
            instance = replace(instance, ended_at=now)
            self._ended[instance.id] = instance
            if instance.state == "interrupted" and instance.id not in self._reported:
                self._notices[instance.id] = InterruptionNotice(
                    instance.id, NAME, "spot-reclaim", now, detail=f"spot eviction ({detail})"
                )
        return instance

    def gone(self, instance_id: str) -> Instance:
        """An instance Azure no longer has: what this object remembers, else NotFound."""
        with self._lock:
            if instance_id in self._ended:
                return self._ended[instance_id]
            known = self._launched.get(instance_id)
            ours = instance_id in self._terminated
        if known is None:
            raise NotFound(NAME, f"no VM {instance_id}")
        state: InstanceState = (
            "interrupted" if known.market == "spot" and not ours else "terminated"
        )
        return self.end(replace(known, state=state), detail="the VM no longer exists")

    def terminating(self, instance_id: str, live: bool) -> bool:
        """Note that this object's terminate is ending `instance_id` (when `live`);
        True when its VM still has to be deleted."""
        with self._lock:
            if live:
                self._terminated.add(instance_id)
            return instance_id not in self._deleted

    def delete_failed(self, instance_id: str) -> None:
        """The delete of a terminate failed: the VM was not ended by this object after all."""
        with self._lock:
            self._terminated.discard(instance_id)

    def deleted(self, instance_id: str) -> None:
        """Azure accepted this object's delete of the VM."""
        with self._lock:
            self._deleted.add(instance_id)

    def terminated(self, instance: Instance) -> None:
        """`instance` ended now by this object's terminate."""
        ended = replace(instance, state="terminated", ended_at=self.clock.now())
        with self._lock:
            self._ended[instance.id] = ended

    def notices(self) -> list[InterruptionNotice]:
        """The eviction notices found and not reported yet, each returned once."""
        with self._lock:
            found = list(self._notices.values())
            self._notices.clear()
        return self._reported.fresh(found)
