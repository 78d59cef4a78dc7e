"""What this AWS account can launch, per region: the capacity view behind `offers()`.

Three reads per region, turned into the shared `Unavailable` and `Headroom` items that
`providers.cloud.restrict_offers` applies to the catalog:

- `DescribeInstanceTypes` (filtered to the catalog's types): vCPUs and `GpuInfo` of each
  type, and which types the region knows at all.
- `DescribeInstanceTypeOfferings` by availability zone: a catalog row for a zone that
  does not sell its type is unavailable there; a type sold in no zone, in the region.
- Service Quotas (`GetServiceQuota`, vCPUs) for the EC2 families a GPU broker launches,
  minus the vCPUs of the account's pending and running instances of those families in
  the region (every instance counts, not only the broker's: quotas are account-wide).

Quotas are best effort: a quota the service does not know, or an account without
`servicequotas:GetServiceQuota`, leaves the capacity unknown (NaN), never fails offers().
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from providers.cloud import Headroom, Unavailable
from providers.errors import CredentialsError, NotFound, ProviderError

log = logging.getLogger(__name__)

NAME = "aws"
ACTIVE = ("pending", "running")
FILTER_CHUNK = 100  # values per EC2 filter (AWS takes up to 200)


class Caller(Protocol):
    """How the view reaches AWS: the provider's calls (mapped errors, backoff)."""

    def call(self, service: str, region: str, operation: str, **params: Any) -> dict: ...

    def pages(
        self, service: str, region: str, operation: str, key: str, **params: Any
    ) -> list[dict]: ...


@dataclass(frozen=True)
class Families:
    """Does a quota count this instance type? (by the letters before its generation)."""

    names: frozenset[str]

    def __call__(self, instance_type: str) -> bool:
        return family(instance_type) in self.names


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    market: str
    families: Families


STANDARD = Families(frozenset({"a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z"}))
G_AND_VT = Families(frozenset({"g", "gr", "vt"}))
P = Families(frozenset({"p"}))
QUOTAS: tuple[Quota, ...] = (
    Quota(
        "L-1216C47A",
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        "on-demand",
        STANDARD,
    ),
    Quota(
        "L-34B43A08",
        "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
        "spot",
        STANDARD,
    ),
    Quota("L-417A185B", "Running On-Demand P instances", "on-demand", P),
    Quota("L-7212CCBC", "All P Spot Instance Requests", "spot", P),
    Quota("L-DB2E81BA", "Running On-Demand G and VT instances", "on-demand", G_AND_VT),
    Quota("L-3819A6DF", "All G and VT Spot Instance Requests", "spot", G_AND_VT),
)
_FAMILY = re.compile(r"[a-z]+")


def family(instance_type: str) -> str:
    """ "g" for g4dn.xlarge, "p" for p4d.24xlarge, "vt" for vt1.3xlarge ("" if none)."""
    found = _FAMILY.match(instance_type.lower())
    return found.group(0) if found else ""


@dataclass(frozen=True)
class TypeInfo:
    """One instance type as DescribeInstanceTypes tells it."""

    vcpus: int
    gpus: int = 0
    gpu_name: str = ""
    gpu_memory_mib: int = 0


@dataclass(frozen=True)
class CapacityView:
    """The account's view of the catalog's rows: what to restrict, and the type facts."""

    unavailable: tuple[Unavailable, ...] = ()
    headroom: tuple[Headroom, ...] = ()
    types: Mapping[tuple[str, str], TypeInfo] = field(default_factory=dict)  # (region, type)


def read_capacity(
    caller: Caller,
    wanted: Mapping[str, Collection[tuple[str, str]]],
    each: Callable[[Callable[[str], CapacityView], list[str]], Iterable[CapacityView]] = map,
) -> CapacityView:
    """The view for `wanted`: region -> the catalog's (instance type, zone) rows there
    (zone "" for a region-wide row). `each(work, regions)` runs `work` per region (the
    provider runs regions side by side)."""

    def one(region: str) -> CapacityView:
        rows = wanted[region]
        try:
            return read_region(caller, region, rows)
        except CredentialsError as exc:
            if exc.code != "OptInRequired":
                raise
            reason = "the region is not enabled for this account"
            return CapacityView(tuple(_whole_region(region, rows, reason)))

    parts = list(each(one, sorted(wanted)))
    types: dict[tuple[str, str], TypeInfo] = {}
    for part in parts:
        types.update(part.types)
    return CapacityView(
        tuple(item for part in parts for item in part.unavailable),
        tuple(item for part in parts for item in part.headroom),
        types,
    )


def read_region(caller: Caller, region: str, rows: Collection[tuple[str, str]]) -> CapacityView:
    """The view of one region (several API calls)."""
    wanted = sorted({instance_type for instance_type, _ in rows})
    info = instance_types(caller, region, wanted)
    offered = offered_zones(caller, region, wanted)
    unavailable = zone_gaps(region, rows, offered)
    values = quota_values(caller, region)
    headroom: list[Headroom] = []
    if values:
        usage = running_vcpus(caller, region, info)
        headroom = quota_headroom(region, values, usage)
    types = {(region, name): item for name, item in info.items()}
    return CapacityView(tuple(unavailable), tuple(headroom), types)


def instance_types(caller: Caller, region: str, names: Iterable[str]) -> dict[str, TypeInfo]:
    """TypeInfo of each of `names` the region knows (unknown names are left out)."""
    found: dict[str, TypeInfo] = {}
    for chunk in _chunks(sorted(set(names))):
        for item in caller.pages(
            "ec2",
            region,
            "describe_instance_types",
            "InstanceTypes",
            Filters=[{"Name": "instance-type", "Values": chunk}],
        ):
            gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
            found[item["InstanceType"]] = TypeInfo(
                vcpus=int((item.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
                gpus=sum(int(g.get("Count") or 0) for g in gpus),
                gpu_name=str(gpus[0].get("Name", "")) if gpus else "",
                gpu_memory_mib=int((item.get("GpuInfo") or {}).get("TotalGpuMemoryInMiB") or 0),
            )
    return found


def offered_zones(caller: Caller, region: str, names: Iterable[str]) -> dict[str, set[str]]:
    """The availability zones of `region` that sell each of `names`."""
    zones: dict[str, set[str]] = {name: set() for name in names}
    for chunk in _chunks(sorted(zones)):
        for item in caller.pages(
            "ec2",
            region,
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": chunk}],
        ):
            zones.setdefault(item["InstanceType"], set()).add(item["Location"])
    return zones


def zone_gaps(
    region: str, rows: Iterable[tuple[str, str]], offered: Mapping[str, Collection[str]]
) -> list[Unavailable]:
    """Unavailable items for rows whose type is not sold where the row says: in the row's
    zone, or (region-wide rows, and types sold nowhere) in any zone of the region."""
    items = set()
    for instance_type, zone in rows:
        zones = offered.get(instance_type) or ()
        if not zones:
            reason = f"{instance_type} is not offered in {region}"
            items.add(Unavailable(NAME, region, "", instance_type, "", reason))
        elif zone and zone not in zones:
            reason = f"{instance_type} is not offered in {zone}"
            items.add(Unavailable(NAME, region, zone, instance_type, "", reason))
    return sorted(items, key=lambda u: (u.region, u.zone, u.instance_type))


def quota_values(caller: Caller, region: str) -> dict[str, float]:
    """The applied value of each quota of QUOTAS in `region` that the service answers."""
    values: dict[str, float] = {}
    for quota in QUOTAS:
        try:
            answer = caller.call(
                "service-quotas",
                region,
                "get_service_quota",
                ServiceCode="ec2",
                QuotaCode=quota.code,
            )
        except NotFound:
            continue
        except ProviderError as exc:  # denied, unreachable: the headroom stays unknown
            log.warning("aws %s: no EC2 quotas (%s)", region, exc)
            return {}
        value = (answer.get("Quota") or {}).get("Value")
        if value is not None:
            values[quota.code] = float(value)
    return values


def running_vcpus(
    caller: Caller, region: str, info: dict[str, TypeInfo]
) -> dict[tuple[str, str], float]:
    """vCPUs of the account's pending and running instances in `region`, per
    (family, market). `info` is completed with the types it lacked."""
    instances = [
        item
        for reservation in caller.pages(
            "ec2",
            region,
            "describe_instances",
            "Reservations",
            Filters=[{"Name": "instance-state-name", "Values": list(ACTIVE)}],
        )
        for item in reservation.get("Instances", ())
    ]
    missing = {item["InstanceType"] for item in instances} - set(info)
    if missing:
        info.update(instance_types(caller, region, missing))
    usage: dict[tuple[str, str], float] = {}
    for item in instances:
        if item.get("State", {}).get("Name") not in ACTIVE:
            continue
        market = "spot" if item.get("InstanceLifecycle") == "spot" else "on-demand"
        key = (family(item["InstanceType"]), market)
        usage[key] = usage.get(key, 0.0) + _vcpus(item, info)
    return usage


def quota_headroom(
    region: str, values: Mapping[str, float], usage: Mapping[tuple[str, str], float]
) -> list[Headroom]:
    """Headroom per known quota: its value minus the vCPUs its families use (never < 0)."""
    out = []
    for quota in QUOTAS:
        if quota.code not in values:
            continue
        used = sum(
            vcpus
            for (name, market), vcpus in usage.items()
            if market == quota.market and name in quota.families.names
        )
        free = max(0.0, values[quota.code] - used)
        label = f"{quota.code} ({quota.name})"
        out.append(Headroom(region, quota.market, label, free, "vcpus", quota.families))
    return out


def _vcpus(item: Mapping[str, Any], info: Mapping[str, TypeInfo]) -> float:
    options = item.get("CpuOptions") or {}
    if options.get("CoreCount"):
        return float(options["CoreCount"] * (options.get("ThreadsPerCore") or 1))
    known = info.get(item["InstanceType"])
    return float(known.vcpus) if known else 0.0


def _whole_region(region: str, rows: Iterable[tuple[str, str]], reason: str) -> list[Unavailable]:
    names = sorted({instance_type for instance_type, _ in rows})
    return [Unavailable(NAME, region, "", name, "", reason) for name in names]


def _chunks(names: list[str]) -> list[list[str]]:
    return [names[i : i + FILTER_CHUNK] for i in range(0, len(names), FILTER_CHUNK)]
