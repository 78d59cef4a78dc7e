"""A SkyPilot task's `resources` as the `resources` and `placement` of a broker manifest.

SkyPilot gives one set of resources, or candidates (`any_of`, `ordered`) that
override the fields around them. The broker's manifest has one accelerator list
in order of preference and allow-lists of clouds and regions: each candidate's
GPUs, cloud and region join those lists, and a reader is told when that allows
combinations the task did not (`aws/us-west-2` with `H100`, `gcp` with `A100`
becomes both GPUs on both clouds). Part of `broker.manifest.skypilot`; pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pricing.gpus import UnknownGpu, parse_gpu_request
from pricing.regions import REGION_COUNTRY
from pricing.userio.suggest import suggestion

if TYPE_CHECKING:
    from broker.manifest.skypilot import TaskReader

BROKER_CLOUDS = ("aws", "gcp", "azure")
PLACE_KEYS = ("infra", "cloud", "region", "zone")
_AMOUNT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(\+?)")
_MEMORY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]b?|b)?\s*(\+?)", re.IGNORECASE)
_UNITS = {"b": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}  # powers of 1024, as SkyPilot
_LIST_ORDER = "the broker ranks these GPUs by expected cost; their order only breaks ties"
_NOT_MAPPED = {
    "instance_type": "the broker chooses the instance type: state the GPUs, cpus and memory",
    "disk_size": "the manifest has no disk size",
    "disk_tier": "the manifest has no disk tier",
    "network_tier": "state a fast interconnect with resources.interconnect",
    "ports": "the broker opens no ports",
    "labels": "the broker tags instances with the job and attempt ids only",
    "autostop": "instances stop when the job ends",
    "accelerator_args": "TPUs are not in the broker's GPU table",
    "max_hourly_cost": "set placement.max_price_per_hour (USD per hour for all nodes)",
    "image_id": "only docker:IMAGE is imported (as run.image)",
}


@dataclass(frozen=True)
class _Candidate:
    """One set of resources: the fields around any_of/ordered, overridden by one item."""

    fields: dict[str, tuple[tuple[str | int, ...], Any]]  # key -> (field path, value)

    def get(self, key: str) -> tuple[tuple[str | int, ...], Any] | None:
        return self.fields.get(key)


def convert_resources(reader: TaskReader, resources: object, nodes: int) -> dict[str, Any]:
    """`{"resources": ..., "placement": ..., "image": ...}` parts of the manifest (each
    left out when empty) from the task's `resources`."""
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        reader.error(("resources",), f"expected a mapping of resources, got {resources!r}")
        return {}
    candidates = _candidates(reader, resources)
    out: dict[str, Any] = {}
    per_candidate = _accelerators(reader, candidates)
    gpus = _merged(reader, per_candidate)
    section: dict[str, Any] = {}
    if gpus:
        section["accelerators"] = gpus[0] if len(gpus) == 1 else gpus
    for key in ("cpus", "memory"):
        value = _same_in_all(reader, candidates, key)
        if value is not None:
            section[key] = (_cpus if key == "cpus" else _memory)(reader, *value)
    if nodes != 1:
        section["nodes"] = nodes
    if section:
        out["resources"] = section
    lists = [key for key in ("any_of", "ordered") if key in resources]
    placement = _placement(reader, candidates, per_candidate, ("resources", *lists[:1]))
    if placement:
        out["placement"] = placement
    image = _same_in_all(reader, candidates, "image_id")
    if image is not None:
        path, value = image
        if isinstance(value, str) and value.startswith("docker:") and value[7:].strip():
            out["image"] = value[7:].strip()
        else:
            reader.warn(path, f"not imported: {_NOT_MAPPED['image_id']} (got {value!r})")
    priority = _same_in_all(reader, candidates, "priority")
    if priority is not None:
        path, value = priority
        if isinstance(value, int) and not isinstance(value, bool):
            out["priority"] = value
        else:
            reader.error(path, f"expected an integer priority, got {value!r}")
    return out


def _candidates(reader: TaskReader, resources: dict[str, Any]) -> list[_Candidate]:
    """The candidates of `resources`: itself, or each any_of/ordered item over it."""
    base = {}
    for key, value in resources.items():
        path = ("resources", key)
        if key in ("any_of", "ordered"):
            continue
        if key == "gpus":  # SkyPilot's alias
            key = "accelerators"
        base[key] = (path, value)
        _check_known(reader, key, path)
    lists = [key for key in ("any_of", "ordered") if key in resources]
    if len(lists) == 2:
        reader.error(("resources", "ordered"), "give any_of or ordered, not both")
    if not lists:
        return [_Candidate(base)]
    kind = lists[0]
    items = resources[kind]
    if not isinstance(items, list) or not items:
        reader.error(("resources", kind), f"expected a list of resources, got {items!r}")
        return [_Candidate(base)]
    if kind == "ordered" and len(items) > 1:
        reader.warn(
            ("resources", kind),
            "the broker ranks the candidates by expected cost; their order only breaks ties",
        )
    candidates = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            reader.error(("resources", kind, i), f"expected a mapping of resources, got {item!r}")
            continue
        fields = dict(base)
        # An item's infra replaces the place around it; its cloud, region or zone replace
        # the infra around it (and those fields of the same name).
        if "infra" in item:
            fields = {k: v for k, v in fields.items() if k not in PLACE_KEYS}
        elif any(key in item for key in PLACE_KEYS):
            fields.pop("infra", None)
        for key, value in item.items():
            path = ("resources", kind, i, key)
            key = "accelerators" if key == "gpus" else key
            if key in _ELSEWHERE:
                reader.warn(path, f"not imported: give {key} once, outside {kind}")
                continue
            fields[key] = (path, value)
            _check_known(reader, key, path)
        candidates.append(_Candidate(fields))
    return candidates or [_Candidate(base)]


_MAPPED = {*PLACE_KEYS, "accelerators", "cpus", "memory", "use_spot", "image_id", "priority"}
_ELSEWHERE = {"job_recovery", "spot_recovery"}  # read by the task's converter


def _check_known(reader: TaskReader, key: str, path: tuple[str | int, ...]) -> None:
    if key in _MAPPED or key in _ELSEWHERE:
        return
    if key in _NOT_MAPPED:
        reader.warn(path, f"not imported: {_NOT_MAPPED[key]}")
    else:
        known = [*_MAPPED, *_ELSEWHERE, *_NOT_MAPPED, "any_of", "ordered"]
        reader.warn(path, f"not imported: not a SkyPilot resources field{suggestion(key, known)}")


def _same_in_all(
    reader: TaskReader, candidates: list[_Candidate], key: str
) -> tuple[tuple[str | int, ...], Any] | None:
    """The candidates' one value of `key` (the first's, with a warning when they differ)."""
    found = [c.get(key) for c in candidates]
    given = [f for f in found if f is not None]
    if not given:
        return None
    first = given[0]
    for other in found:
        if other is None or other[1] != first[1]:
            where = other[0] if other is not None else first[0]
            reader.warn(
                where,
                f"{key} differs between candidates: the broker takes {first[1]!r} for all",
            )
            break
    return first


def _accelerators(reader: TaskReader, candidates: list[_Candidate]) -> list[list[str]]:
    """Each candidate's GPUs as the manifest writes them (A100:8), canonical; a field the
    candidates share is read (and complained about) once."""
    read: dict[tuple[str | int, ...], list[str]] = {}
    for candidate in candidates:
        found = candidate.get("accelerators")
        if found is None or found[0] in read:
            continue
        asks = read[found[0]] = []
        for path, text, at_key in _gpu_texts(reader, *found):
            try:
                gpu, count = parse_gpu_request(text)
            except UnknownGpu as exc:
                reader.error(path, str(exc), key=at_key)
                continue
            asks.append(f"{gpu}:{count:g}")
    return [read.get(found[0], []) if (found := c.get("accelerators")) else [] for c in candidates]


def _merged(reader: TaskReader, per_candidate: list[list[str]]) -> list[str]:
    """The candidates' GPUs in one list, in order of appearance, each GPU once."""
    out: dict[str, str] = {}
    for asks in per_candidate:
        for written in asks:
            gpu = written.rsplit(":", 1)[0]
            if gpu in out and out[gpu] != written:
                reader.warn(
                    ("resources",), f"{gpu} is asked with two counts: the broker takes {out[gpu]}"
                )
            out.setdefault(gpu, written)
    if out and not all(per_candidate):
        reader.warn(
            ("resources",),
            "some candidates ask for no GPU: the imported job asks for one of the listed GPUs",
        )
    return list(out.values())


def _gpu_texts(
    reader: TaskReader, path: tuple[str | int, ...], value: object
) -> list[tuple[tuple[str | int, ...], str, bool]]:
    """(field path, "NAME[:COUNT]", whether it is a mapping's key) for each GPU of
    SkyPilot's string, list and mapping forms."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "[{" and text[-1:] in "]}":  # a set or list written as a string
            names = [n for part in text[1:-1].split(",") if (n := part.strip().strip("'\""))]
            if text[0] == "[" and len(names) > 1:
                reader.warn(path, _LIST_ORDER)
            return [(path, name, False) for name in names]
        return [(path, text, False)]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        if len(value) > 1:
            reader.warn(path, _LIST_ORDER)
        return [((*path, i), item.strip(), False) for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = []
        for name, count in value.items():
            if count is None:  # {A100:1, V100:1} in YAML is keys "A100:1", "V100:1"
                out.append(((*path, name), str(name), True))
            elif isinstance(count, int | float) and not isinstance(count, bool):
                out.append(((*path, name), f"{name}:{count}", True))
            else:
                reader.error((*path, name), f"expected a GPU count, got {count!r}")
        return out
    reader.error(path, f"expected GPU:COUNT, a list or a mapping of them, got {value!r}")
    return []


def _cpus(reader: TaskReader, path: tuple[str | int, ...], value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (match := _AMOUNT.fullmatch(value.strip())):
        number = float(match[1])
        if number > 0:
            return f"{_figure(number)}+" if match[2] else _number(number)
    reader.error(path, f"{value!r} is not a vCPU count: write N or N+ (e.g. 4+)")
    return None


def _memory(reader: TaskReader, path: tuple[str | int, ...], value: object) -> object:
    """SkyPilot's memory (GB by default, or with a unit) as the manifest's GiB amount."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (match := _MEMORY.fullmatch(value.strip())):
        unit = (match[2] or "g")[0].lower()
        gib = float(match[1]) * 1024.0 ** (_UNITS[unit] - 3)
        if gib > 0:
            return f"{_figure(gib)}+" if match[3] else _number(gib)
    reader.error(path, f"{value!r} is not a memory size: write N, N+ or e.g. 64GB (GiB)")
    return None


def _figure(number: float) -> str:
    return format(number, ".12g")


def _number(number: float) -> int | float:
    return int(number) if number.is_integer() else number


def _placement(
    reader: TaskReader,
    candidates: list[_Candidate],
    gpus: list[list[str]],
    where: tuple[str | int, ...],
) -> dict[str, Any]:
    """`placement` from each candidate's place and spot choice."""
    places = [_place(reader, c) for c in candidates]
    placement: dict[str, Any] = {}
    clouds = [cloud for cloud, _ in places]
    if all(clouds):
        placement["clouds"] = list(dict.fromkeys(clouds))
    regions = [region for _, region in places]
    if all(regions):
        placement["regions"] = list(dict.fromkeys(regions))
    pairs = {(gpu, place) for asks, place in zip(gpus, places, strict=True) for gpu in asks}
    every = {gpu for asks in gpus for gpu in asks}
    if pairs != {(gpu, place) for gpu in every for place in places}:
        reader.warn(
            where,
            "the candidates pair GPUs with places; the broker allows every listed GPU in "
            "every listed cloud and region",
        )
    spots = [c.get("use_spot") for c in candidates]
    for found in spots:
        if found is not None and not isinstance(found[1], bool):
            reader.error(found[0], f"expected true or false, got {found[1]!r}")
    chosen = {bool(found and found[1] is True) for found in spots}
    if chosen == {True}:
        placement["spot"] = "only"
    elif chosen == {True, False}:
        placement["spot"] = "prefer"
        reader.warn(where, "some candidates use spot: the broker prefers spot for all")
    return placement


def _place(reader: TaskReader, candidate: _Candidate) -> tuple[str | None, str | None]:
    """(cloud, region) of one candidate, from infra or cloud/region/zone; None: any."""
    infra = candidate.get("infra")
    given = [candidate.get(key) for key in ("cloud", "region", "zone")]
    if infra is not None and any(given):
        path = next(found[0] for found in given if found is not None)
        reader.error(path, "give infra or cloud/region/zone, not both")
    if infra is not None:
        path, value = infra
        if not isinstance(value, str):
            reader.error(path, f"expected cloud[/region[/zone]], got {value!r}")
            return None, None
        parts = [None if part in ("", "*") else part for part in value.strip().split("/")]
        if parts and parts[0] is not None and parts[0].lower() in ("k8s", "kubernetes"):
            parts = [parts[0]]  # the rest is a Kubernetes context, not a region
        cloud, region, zone = (parts + [None, None, None])[:3]
        paths = (path, path, path)
    else:
        cloud, region, zone = (None if f is None else str(f[1]) for f in given)
        paths = tuple(f[0] if f is not None else ("resources",) for f in given)
    cloud = cloud.lower() if cloud else None
    if cloud is not None and cloud not in BROKER_CLOUDS:
        reader.warn(
            paths[0],
            f"not imported: {cloud} is not a cloud the broker places on "
            f"({', '.join(BROKER_CLOUDS)}, onprem): this candidate may run on any cloud",
        )
        return None, None
    if zone is not None:
        region = region or _zone_region(cloud, zone)
        also = f" (placed in its region {region})" if region else ""
        reader.warn(paths[2], f"not imported: the broker places by region, not zone {zone}{also}")
    if cloud is not None and region is not None and (cloud, region) not in REGION_COUNTRY:
        known = [r for c, r in REGION_COUNTRY if c == cloud]
        reader.error(paths[1], f"unknown {cloud} region {region!r}{suggestion(region, known)}")
    return cloud, region


def _zone_region(cloud: str | None, zone: str) -> str | None:
    """The region of an AWS (us-east-1a) or GCP (us-central1-a) zone name."""
    if cloud == "aws" and re.fullmatch(r"[a-z]+-[a-z]+-\d+[a-z]", zone):
        return zone[:-1]
    if cloud == "gcp" and re.fullmatch(r"[a-z]+-[a-z]+\d+-[a-z]", zone):
        return zone.rsplit("-", 1)[0]
    return None
