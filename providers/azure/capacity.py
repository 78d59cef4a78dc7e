"""What this subscription can launch on Azure: restricted SKUs and vCPU quota headroom.

Two calls per region. Resource SKUs (`$filter=location eq '<region>'`) say which
sizes the region sells, which are restricted for this subscription (`restrictions`:
type Location or Zone, reasonCode NotAvailableForSubscription or QuotaId) and each
size's quota family (`family`, e.g. standardNCADSA100v4Family). Usages give
`currentValue`/`limit` per family, the regional total `cores`, and `lowPriorityCores`,
the one regional quota every Spot VM counts against. Both become the plain
`Unavailable` and `Headroom` items that `providers.cloud.restrict_offers` applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from providers.cloud import Headroom, Unavailable

CLOUD = "azure"
TOTAL_CORES = "cores"
SPOT_CORES = "lowPriorityCores"


@dataclass(frozen=True)
class CapacityView:
    """Restrictions and quota headroom for a set of regions (one look at the cloud)."""

    unavailable: tuple[Unavailable, ...] = ()
    headroom: tuple[Headroom, ...] = ()


def _text(value: Any) -> str:
    """An SDK enum or string as its wire text."""
    return str(getattr(value, "value", value) or "")


def sku_restrictions(
    region: str, skus: Iterable[Any], wanted: Mapping[str, set[str]]
) -> tuple[list[Unavailable], dict[str, str]]:
    """Unavailable items for the sizes in `wanted` (size -> zones the catalog lists, ""
    for region-wide rows), and every size's quota family.

    A zone restriction only removes the catalog rows of that zone; a region-wide row
    goes only when every zone the size is offered in is restricted (Azure places a
    non-zonal VM in any zone that still has it).
    """
    out: list[Unavailable] = []
    families: dict[str, str] = {}
    seen: set[str] = set()
    for sku in skus:
        if _text(sku.resource_type) != "virtualMachines" or not sku.name:
            continue
        name = sku.name
        families[name] = sku.family or ""
        if name not in wanted:
            continue
        seen.add(name)
        offered = {z for info in sku.location_info or () for z in info.zones or ()}
        closed: dict[str, str] = {}  # restricted zone -> reason
        for rule in sku.restrictions or ():
            reason = f"SKU restricted for this subscription: {_text(rule.reason_code) or 'unknown'}"
            if _text(rule.type) == "Location":
                out.append(Unavailable(CLOUD, region, "", name, "", reason))
            elif _text(rule.type) == "Zone":
                zones = getattr(rule.restriction_info, "zones", None) or ()
                closed.update((zone, reason) for zone in zones)
        out += [
            Unavailable(CLOUD, region, zone, name, "", f"{closed[zone]} (zone {zone})")
            for zone in sorted(set(closed) & wanted[name])
        ]
        if offered and offered <= set(closed) and "" in wanted[name]:
            reason = next(iter(closed.values()))
            out.append(Unavailable(CLOUD, region, "", name, "", f"{reason} (every zone)"))
    for name in sorted(set(wanted) - seen):
        out.append(Unavailable(CLOUD, region, "", name, "", f"not offered in {region}"))
    return out, families


def quota_headroom(
    region: str, usages: Iterable[Any], families: Mapping[str, str]
) -> list[Headroom]:
    """Headroom in vCPUs: each size's family quota and the regional total (on-demand),
    and the regional low-priority quota (spot)."""
    by_family: dict[str, set[str]] = {}
    for size, family in families.items():
        by_family.setdefault(family.lower(), set()).add(size)
    out: list[Headroom] = []
    for usage in usages:
        name = _text(getattr(usage.name, "value", None))
        free = max(0.0, float(usage.limit or 0) - float(usage.current_value or 0))
        if name.lower() == TOTAL_CORES.lower():
            out.append(Headroom(region, "on-demand", name, free, "vcpus", lambda _t: True))
        elif name.lower() == SPOT_CORES.lower():
            out.append(Headroom(region, "spot", name, free, "vcpus", lambda _t: True))
        elif name.lower() in by_family:
            sizes = frozenset(by_family[name.lower()])
            out.append(Headroom(region, "on-demand", name, free, "vcpus", sizes.__contains__))
    return out


def capacity_view(client: Any, wanted: Mapping[str, Mapping[str, set[str]]]) -> CapacityView:
    """Restrictions and headroom for `wanted` (region -> size -> catalog zones), read
    through `client` (a ComputeManagementClient; errors propagate to the caller)."""
    unavailable: list[Unavailable] = []
    headroom: list[Headroom] = []
    for region in sorted(wanted):
        skus = client.resource_skus.list(filter=f"location eq '{region}'")
        items, families = sku_restrictions(region, skus, wanted[region])
        unavailable += items
        headroom += quota_headroom(region, client.usage.list(region), families)
    return CapacityView(tuple(unavailable), tuple(headroom))
