"""What ARM says about a VM, as a broker Instance.

Plain functions of the VM model and its instance view (no client): the power and
provisioning status codes decide the state; a stopped or deallocated spot VM that this
object did not end was evicted ("interrupted").
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from providers.azure.errors import NAME
from providers.base import Instance, InstanceState

_STOPPED = ("deallocated", "deallocating", "stopped", "stopping")


def status_codes(view: Any) -> list[str]:
    """The lowercase status codes of an instance view ("powerstate/running", ...)."""
    statuses = view.statuses if view is not None else None
    return [str(s.code or "").lower() for s in statuses or ()]


def is_spot(vm: Any) -> bool:
    """Is the VM's priority Spot (the SDK gives an enum member or its text)?"""
    priority = vm.priority.value if isinstance(vm.priority, Enum) else vm.priority
    return str(priority or "") == "Spot"


def vm_state(
    spot: bool, provisioning: str, codes: Sequence[str], ended_by_us: bool
) -> InstanceState:
    """The broker's state of a VM: its provisioning state and instance-view codes;
    `ended_by_us`: this object's terminate stopped it (not an eviction)."""
    power = next((c.partition("/")[2] for c in codes if c.startswith("powerstate/")), "")
    provisioned = next(
        (c.partition("/")[2] for c in codes if c.startswith("provisioningstate/")),
        provisioning.lower(),
    )
    if provisioning.lower() == "deleting" or provisioned.startswith("deleting"):
        return "terminated"
    if power == "running":
        return "running"
    if power in _STOPPED:
        return "interrupted" if spot and not ended_by_us else "terminated"
    if provisioned.startswith("failed"):
        return "terminated"
    return "pending"  # creating, updating, starting


def instance_of(instance_id: str, vm: Any, codes: Sequence[str], ended_by_us: bool) -> Instance:
    """The Instance of a VM read from ARM (its end not stamped yet: the provider does)."""
    spot = is_spot(vm)
    return Instance(
        id=instance_id,
        provider=NAME,
        cloud=NAME,
        region=vm.location or "",
        zone=(vm.zones or [""])[0],
        instance_type=vm.hardware_profile.vm_size if vm.hardware_profile else "",
        market="spot" if spot else "on-demand",
        state=vm_state(spot, str(vm.provisioning_state or ""), codes, ended_by_us),
        tags=tuple(sorted((vm.tags or {}).items())),
        launched_at=vm.time_created,
    )
