"""What the project can launch where on GCE: machine and accelerator types per zone, and the
regional quotas, read in a few calls and applied to the catalog's rows.

- A machine type missing from a zone (aggregated machineTypes), or the GPU of an N1 offer
  missing from it (aggregated acceleratorTypes), makes the row `Unavailable`. A row without
  a zone (the bundled catalog's) is unavailable only when no zone of its region has it.
- Regional quotas (regions.get: metric, limit, usage) become `Headroom`: GPUs per model
  (NVIDIA_A100_GPUS, and PREEMPTIBLE_NVIDIA_A100_GPUS for spot when the project has
  any), vCPUs per family (A2_CPUS, ... or CPUS; PREEMPTIBLE_CPUS for spot).

`Unavailable` and `Headroom` name an instance type, not its GPU, and GCE sells one N1
type with several GPUs (n1-standard-8 with a V100 or a T4): `restrict` applies them one
accelerator at a time so that a missing V100 does not hide the T4 row.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers.cloud import Headroom, Unavailable, restrict_offers

if TYPE_CHECKING:
    from pricing.table import OfferTable

CLOUD = "gcp"
# Machine families whose GPUs are attached (guestAccelerators), and those that carry theirs.
ATTACHABLE_FAMILIES = frozenset({"n1"})
GPU_FAMILIES = frozenset({"a2", "a3", "a4", "g2", "g4"})
# Canonical GPU name (pricing.gpus) -> GCE accelerator type and quota metric.
GPU_TYPES: Mapping[str, tuple[str, str]] = {
    "B200": ("nvidia-b200", "NVIDIA_B200_GPUS"),
    "H200": ("nvidia-h200-141gb", "NVIDIA_H200_GPUS"),
    "H100": ("nvidia-h100-80gb", "NVIDIA_H100_GPUS"),
    "A100-80GB": ("nvidia-a100-80gb", "NVIDIA_A100_80GB_GPUS"),
    "A100": ("nvidia-tesla-a100", "NVIDIA_A100_GPUS"),
    "L4": ("nvidia-l4", "NVIDIA_L4_GPUS"),
    "V100": ("nvidia-tesla-v100", "NVIDIA_V100_GPUS"),
    "T4": ("nvidia-tesla-t4", "NVIDIA_T4_GPUS"),
    "P100": ("nvidia-tesla-p100", "NVIDIA_P100_GPUS"),
    "P4": ("nvidia-tesla-p4", "NVIDIA_P4_GPUS"),
}
# Machine types whose H100s count against another quota than the model's.
GPU_QUOTA_BY_TYPE: Mapping[str, str] = {"a3-megagpu-8g": "NVIDIA_H100_MEGA_GPUS"}
_NAME = re.compile(r"[a-z0-9-]+")


def family(instance_type: str) -> str:
    """ "a2" for "a2-highgpu-1g"."""
    return instance_type.split("-", 1)[0]


def region_of(zone: str) -> str:
    """ "us-central1" for "us-central1-a"."""
    return zone.rsplit("-", 1)[0]


def attached_gpu(instance_type: str, accelerator: str) -> str | None:
    """The GCE accelerator type to attach to `instance_type` for a catalog GPU name, or None
    when the machine type carries its own (or there is none). KeyError: no such GPU on GCE."""
    if not accelerator or family(instance_type) not in ATTACHABLE_FAMILIES:
        return None
    return GPU_TYPES[accelerator][0]


@dataclass(frozen=True)
class CapacityView:
    """What `fetch` read: machine types and accelerator types per zone, quotas per region."""

    machine_types: Mapping[str, frozenset[str]]  # zone -> machine type names
    accelerators: Mapping[str, frozenset[str]]  # zone -> accelerator type names
    quotas: Mapping[str, Mapping[str, tuple[float, float]]]  # region -> metric -> limit, usage

    def zones(self, region: str, instance_type: str, gpu: str | None = None) -> list[str]:
        """The zones of `region` offering `instance_type` (and GPU type `gpu`), sorted."""
        return sorted(
            zone
            for zone, names in self.machine_types.items()
            if region_of(zone) == region
            and instance_type in names
            and (gpu is None or gpu in self.accelerators.get(zone, ()))
        )

    def why_not(self, region: str, zone: str, instance_type: str, gpu: str | None) -> str:
        """Why the row cannot launch, or "" when it can."""
        where = zone or f"any zone of {region}"
        zones = [zone] if zone else [z for z in self.machine_types if region_of(z) == region]
        if not any(instance_type in self.machine_types.get(z, ()) for z in zones):
            return f"machine type {instance_type} is not offered in {where}"
        if gpu is not None and not self.zones(region, instance_type, gpu):
            return f"{instance_type} with {gpu} is not offered in {where}"
        if gpu is not None and zone and gpu not in self.accelerators.get(zone, ()):
            return f"accelerator {gpu} is not offered in {zone}"
        return ""


def fetch(
    clients: Mapping[str, Any],
    project: str,
    regions: Sequence[str] | None,
    instance_types: Iterable[str],
    gpus: Iterable[str],
    call: Callable[[Callable[[], Any], str], Any],
    timeout: float,
    quotas: bool = True,
) -> CapacityView:
    """Read the view for `instance_types` and GPU types `gpus` in `regions` (empty: all):
    two aggregated lists filtered server-side, and one regions.get per region (unless
    `quotas` is False). `clients`: compute_v1 clients by name; `call(fn, action)` runs
    one SDK call."""
    from google.cloud import compute_v1

    where = f' (zone eq "({"|".join(regions)})-.*")' if regions else ""

    def by_zone(client: Any, request: Any, field: str) -> dict[str, frozenset[str]]:
        def read() -> dict[str, frozenset[str]]:
            pager = client.aggregated_list(request=request, retry=None, timeout=timeout)
            return {
                scope.rsplit("/", 1)[-1]: frozenset(item.name for item in getattr(listed, field))
                for scope, listed in pager
                if scope.startswith("zones/")
            }

        return call(read, f"list {field}")

    def names_filter(names: Iterable[str]) -> str | None:
        wanted = sorted({n for n in names if _NAME.fullmatch(n)})
        return f'(name eq "({"|".join(wanted)})"){where}' if wanted else None

    machine_types: dict[str, frozenset[str]] = {}
    accelerators: dict[str, frozenset[str]] = {}
    if expression := names_filter(instance_types):
        request = compute_v1.AggregatedListMachineTypesRequest(project=project, filter=expression)
        machine_types = by_zone(clients["machine_types"], request, "machine_types")
    if expression := names_filter(gpus):
        request = compute_v1.AggregatedListAcceleratorTypesRequest(
            project=project, filter=expression
        )
        accelerators = by_zone(clients["accelerator_types"], request, "accelerator_types")
    limits = {}
    for region in sorted(set(regions or map(region_of, machine_types))) if quotas else ():
        found = call(
            lambda region=region: clients["regions"].get(
                project=project, region=region, retry=None, timeout=timeout
            ),
            f"get region {region}",
        )
        limits[region] = {q.metric: (q.limit, q.usage) for q in found.quotas}
    return CapacityView(machine_types, accelerators, limits)


def headroom(
    view: CapacityView, region: str, accelerator: str, instance_types: Iterable[str]
) -> list[Headroom]:
    """The quotas that rows of `region` with GPU `accelerator` ("" for none) and these
    instance types draw on: one rule per market, or one for both when spot has no
    preemptible quota of its own."""
    quotas = view.quotas.get(region, {})
    types = sorted(set(instance_types))
    rules: list[Headroom] = []

    def add(metric: str, spot: str, unit: str, applies: Callable[[str], bool]) -> None:
        if metric not in quotas:
            return
        if quotas.get(spot, (0.0, 0.0))[0] > 0:  # granted preemptible quota: spot uses it
            markets = (("on-demand", metric), ("spot", spot))
        else:
            markets = (("", metric),)
        for market, name in markets:
            limit, usage = quotas[name]
            rules.append(Headroom(region, market, name, max(0.0, limit - usage), unit, applies))

    for metric in sorted({cpu_metric(t, quotas) for t in types}):
        add(metric, "PREEMPTIBLE_CPUS", "vcpus", lambda t, m=metric: cpu_metric(t, quotas) == m)
    if accelerator in GPU_TYPES:
        for metric in sorted({gpu_metric(t, accelerator) for t in types}):
            applies = lambda t, m=metric: gpu_metric(t, accelerator) == m  # noqa: E731
            add(metric, f"PREEMPTIBLE_{metric}", "gpus", applies)
    return rules


def cpu_metric(instance_type: str, quotas: Mapping[str, object]) -> str:
    """The regional vCPU quota a machine type counts against: its family's (A2_CPUS,
    N2_CPUS, ...) when the region lists one, else CPUS."""
    own = f"{family(instance_type).upper()}_CPUS"
    return own if own in quotas else "CPUS"


def gpu_metric(instance_type: str, accelerator: str) -> str:
    """The regional GPU quota an offer counts against (NVIDIA_A100_GPUS, ...)."""
    return GPU_QUOTA_BY_TYPE.get(instance_type) or GPU_TYPES[accelerator][1]


def needs(table: OfferTable) -> tuple[set[str], set[str], list[str]]:
    """The machine types, GPU types to attach and regions that `table`'s rows need."""
    types = table.text("instance_type").tolist()
    gpus = set()
    for instance_type, accelerator in zip(types, table.text("accelerator").tolist(), strict=True):
        with contextlib.suppress(KeyError):
            gpus.add(attached_gpu(instance_type, accelerator))
    return set(types), gpus - {None}, sorted(set(table.text("region").tolist()))


def restrict(table: OfferTable, view: CapacityView) -> tuple[OfferTable, list[Unavailable]]:
    """`table` (GCP rows) as the project can buy it, and every reason a row is not sold:
    applied one (accelerator, zonal or not) group at a time, see the module docstring."""
    import numpy as np

    from pricing.table import concat

    accelerator, zone = table.text("accelerator"), table.text("zone")
    region, instance_type = table.text("region"), table.text("instance_type")
    groups: dict[tuple[str, bool], list[int]] = {}
    for row, key in enumerate(zip(accelerator.tolist(), (zone != "").tolist(), strict=True)):
        groups.setdefault(key, []).append(row)
    parts, order, reasons = [], [], []
    for (gpu_name, _zonal), rows in sorted(groups.items()):
        part = table.take(np.asarray(rows))
        missing = []
        for place in sorted({(region[r], zone[r], instance_type[r]) for r in rows}):
            try:
                gpu = attached_gpu(place[2], gpu_name)
            except KeyError:
                missing.append(Unavailable(CLOUD, *place, "", f"no GCE accelerator {gpu_name}"))
                continue
            if why := view.why_not(place[0], place[1], place[2], gpu):
                missing.append(Unavailable(CLOUD, *place, "", why))
        types = {instance_type[r] for r in rows}
        rules = [
            rule
            for where in sorted({region[r] for r in rows})
            for rule in headroom(view, where, gpu_name, types)
        ]
        part, found = restrict_offers(part, CLOUD, missing, rules)
        parts.append(part)
        order.extend(rows)
        reasons.extend(found)
    if not parts:
        return table, []
    return concat(parts).take(np.argsort(np.asarray(order), kind="stable")), reasons
