"""JobSpec <-> plain JSON: the one encoding of a validated manifest.

The state store keeps each job version's spec in this form (`job_versions.spec_json`)
and gives it back decoded, and the spec cache (`broker.manifest.spec_cache`) saves
validated documents in it, so nothing re-parses a manifest's YAML after loading.
`decode(encode(spec)) == spec` for every spec; fields added to the spec later are
optional here (a state file written before them still decodes).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from broker.spec import (
    MANIFEST,
    Amount,
    Budget,
    Checkpoint,
    DataInput,
    GpuAsk,
    JobSpec,
    Requirements,
    RunSpec,
    RuntimeEstimate,
)
from pricing.regions import Place


def encode(spec: JobSpec) -> dict[str, Any]:
    """JobSpec as plain JSON (tuples as lists, deadlines tagged)."""
    from dataclasses import asdict

    data = asdict(spec)
    deadline = spec.runtime.deadline
    if isinstance(deadline, timedelta):
        data["runtime"]["deadline"] = {
            "days": deadline.days,
            "seconds": deadline.seconds,
            "microseconds": deadline.microseconds,
        }
    elif isinstance(deadline, datetime):
        data["runtime"]["deadline"] = {"at": deadline.isoformat()}
    if spec.checkpoint is not None:
        for planned in ("moves_with_job", "saved"):  # set at planning time, never stored
            data["checkpoint"].pop(planned)
    if spec.checkpoint is not None and spec.checkpoint.location is not None:
        data["checkpoint"]["location"] = _place_json(spec.checkpoint.location)
    for item, entry in zip(spec.data, data["data"], strict=True):
        if item.location is not None:
            entry["location"] = _place_json(item.location)
    return data


def _place_json(place: Place) -> dict[str, str]:
    """`{cloud, region}`, with the zone and country only when set: a manifest gives
    neither, so every spec encodes as it did when its Place had only those two."""
    data = {"cloud": place.cloud, "region": place.region}
    if place.zone:
        data["zone"] = place.zone
    if place.country:
        data["country"] = place.country
    return data


# The parts of an encoded spec that are decoded on their own: manifests written from one
# template share most of them, and the spec cache decodes each distinct part once a load.
PARTS = ("requirements", "run", "runtime", "checkpoint", "data", "budget")


# An encoded spec's fields that name the job rather than say what it runs: two specs
# equal but for them share a `spec_key`.
NAMING = ("name", "team")


def spec_key(data: dict[str, Any]) -> str:
    """The digest of an encoded spec without its `NAMING` fields: jobs written from one
    template share it, so a reader decodes one spec per key (`job_versions.spec_key`)."""
    import hashlib

    from broker.state.model import json_text

    rest = {name: value for name, value in data.items() if name not in NAMING}
    return hashlib.sha256(json_text(rest).encode()).hexdigest()[:32]


def decode(data: dict[str, Any]) -> JobSpec:
    """The exact inverse of `encode`."""
    return assemble(data, {name: decode_part(name, data[name]) for name in PARTS})


def assemble(data: dict[str, Any], parts: dict[str, Any]) -> JobSpec:
    """The JobSpec of an encoded spec's own fields (`data`; its `PARTS` are not read)
    and of its parts, decoded (`decode_part`)."""
    return JobSpec(
        name=data["name"],
        team=data["team"],
        queue=data["queue"],
        priority=data["priority"],
        max_restarts_on_error=data["max_restarts_on_error"],
        recover_on_exit_codes=tuple(data["recover_on_exit_codes"]),
        **parts,
    )


def decode_part(name: str, value: Any) -> Any:
    """One of the `PARTS` of an encoded spec, decoded (a KeyError for another name)."""
    return _PART_DECODERS[name](value)


def _requirements(r: dict[str, Any]) -> Requirements:
    return Requirements(
        accelerators=tuple([GpuAsk(a["gpu"], a["count"]) for a in r["accelerators"]]),
        cpus=_amount(r["cpus"]),
        memory_gib=_amount(r["memory_gib"]),
        nodes=r["nodes"],
        interconnect=r["interconnect"],
        clouds=tuple(r["clouds"]),
        exclude_clouds=tuple(r["exclude_clouds"]),
        regions=tuple(r["regions"]),
        countries=tuple(r["countries"]),
        spot=r["spot"],
        max_price_per_hour=r["max_price_per_hour"],
    )


def _run(run: dict[str, Any]) -> RunSpec:
    return RunSpec(
        run["command"],
        run["image"],
        tuple([(k, v) for k, v in run["env"]]),
        workdir=run.get("workdir"),  # absent in specs encoded before it existed
        setup=run.get("setup", ""),
        workdir_archive=run.get("workdir_archive", ""),
    )


def _runtime(runtime: dict[str, Any]) -> RuntimeEstimate:
    return RuntimeEstimate(
        runtime["estimate_hours"],
        _deadline(runtime["deadline"]),
        auto=runtime.get("auto", False),  # absent in specs encoded before it existed
        source=runtime.get("source", MANIFEST),
    )


def _checkpoint(ckpt: dict[str, Any] | None) -> Checkpoint | None:
    if ckpt is None:
        return None
    return Checkpoint(
        ckpt["uri"], ckpt["interval_minutes"], ckpt["size_gb"], _place(ckpt["location"])
    )


def _data(data: list[dict[str, Any]]) -> tuple[DataInput, ...]:
    return tuple([DataInput(d["uri"], d["size_gb"], _place(d["location"])) for d in data])


def _budget(budget: dict[str, Any]) -> Budget:
    return Budget(budget["max_cost"])


_PART_DECODERS = {
    "requirements": _requirements,
    "run": _run,
    "runtime": _runtime,
    "checkpoint": _checkpoint,
    "data": _data,
    "budget": _budget,
}


def _amount(value: dict | None) -> Amount | None:
    return None if value is None else Amount(value["value"], value["at_least"])


def _place(value: dict | None) -> Place | None:
    if value is None:
        return None
    return Place(value["cloud"], value["region"], value.get("zone", ""), value.get("country", ""))


def _deadline(value: dict | None) -> timedelta | datetime | None:
    if value is None:
        return None
    if "days" in value:
        return timedelta(
            days=value["days"], seconds=value["seconds"], microseconds=value["microseconds"]
        )
    return datetime.fromisoformat(value["at"])
