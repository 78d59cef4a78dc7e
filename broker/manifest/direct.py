"""A manifest document's JobSpec built without pydantic, when the document is plainly valid.

Why: importing pydantic costs ~0.1 s of CPU and building the manifest model ~0.05 s
more, about half of a cold `broker plan job.yaml` (no spec cache yet). Most documents
are valid, and for a valid one nothing of pydantic is needed but the rules, which live
in `broker.manifest.checks` for both paths. So `direct_spec` reads the document as
the model (`broker.manifest.model.JobManifest`, strict, unknown keys forbidden) would,
and returns its spec; at the first thing it is not sure of (a mistake, a type it does
not read the way the model does) it returns None, and the model validates the document
and locates the error. It never reports an error of its own, so the messages users read
are pydantic's, and a document it declines costs only a second look.

tests/broker/test_manifest_direct.py holds the two paths equal: on generated documents,
valid and not, `direct_spec` gives the model's spec or None, never another spec, and
each section's fields, defaults and bounds are the model's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from broker import spec
from broker.manifest import checks
from broker.manifest.workdir import resolve_workdir
from pricing.schema import CLOUDS
from pricing.userio import bounds

T = TypeVar("T")
API_VERSION = "broker/v1"
_EXACT_FLOAT = 2**53  # larger integers: left to the model (how it rounds them is its own)

# Each section's keys, as the model declares them (a test compares them with the model).
FIELDS: dict[str, frozenset[str]] = {
    "job": frozenset(
        "apiVersion name team queue priority resources placement run runtime checkpoint "
        "data budget recovery".split()
    ),
    "resources": frozenset("accelerators cpus memory nodes interconnect".split()),
    "placement": frozenset(
        "clouds exclude_clouds regions countries spot max_price_per_hour".split()
    ),
    "run": frozenset("image command env workdir setup".split()),
    "runtime": frozenset("estimate_hours deadline".split()),
    "checkpoint": frozenset("uri interval_minutes size_gb location".split()),
    "data": frozenset("uri size_gb location".split()),
    "budget": frozenset("max_cost".split()),
    "recovery": frozenset("max_restarts_on_error recover_on_exit_codes".split()),
}
INTERCONNECTS = ("nvlink", "infiniband", "efa")
SPOT = ("never", "prefer", "only")
_MISSING = object()


class _Unsure(Exception):
    """The document is not plainly valid: the model decides."""


def direct_spec(data: object, base: Path) -> spec.JobSpec | None:
    """The JobSpec of a document the model accepts (`base`: the manifest's folder, for
    `run.workdir`), or None when the model must look at it (see module docstring)."""
    try:
        return _job(data, base)
    except (_Unsure, ValueError):  # checks raise ValueError: the model says it, located
        return None


def _job(data: object, base: Path) -> spec.JobSpec:
    job = _section(data, "job")
    if job.get("apiVersion", _MISSING) != API_VERSION or type(job["apiVersion"]) is not str:
        raise _Unsure
    res = _section(job.get("resources", {}), "resources")
    checkpoint = job.get("checkpoint")
    return spec.JobSpec(
        name=_label(job.get("name", _MISSING)),
        team=_label(job.get("team", _MISSING)),
        queue=_label(job.get("queue", "default")),
        priority=_integer(job.get("priority", 0), -(2**31), 2**31 - 1),
        requirements=_requirements(res, _section(job.get("placement", {}), "placement")),
        run=_run(_section(job.get("run", _MISSING), "run"), base),
        runtime=_runtime(_section(job.get("runtime", {}), "runtime")),
        checkpoint=None if checkpoint is None else _checkpoint(_section(checkpoint, "checkpoint")),
        data=tuple(_data_input(_section(item, "data")) for item in _list(job.get("data", []))),
        budget=_budget(_section(job.get("budget", {}), "budget")),
        **_recovery(_section(job.get("recovery", {}), "recovery")),
    )


def _requirements(res: dict[str, Any], where: dict[str, Any]) -> spec.Requirements:
    accelerators = res.get("accelerators")
    if accelerators is not None:
        asks = [checks.gpu_ask(ask) for ask in _list(checks.one_or_many(accelerators))]
        accelerators = checks.distinct_gpus(asks)
    clouds = _optional(where.get("clouds"), _clouds)
    excluded = _optional(where.get("exclude_clouds"), _clouds)
    checks.clouds_allowed(clouds)
    checks.clouds_excluded(excluded, clouds)
    interconnect = res.get("interconnect")
    if interconnect is not None:
        _choice(interconnect, INTERCONNECTS)
    return spec.Requirements(
        accelerators=tuple(accelerators or ()),
        cpus=_optional(res.get("cpus"), checks.amount),
        memory_gib=_optional(res.get("memory"), checks.amount),
        nodes=_integer(res.get("nodes", 1), 1, bounds.MAX_NODES),
        interconnect=interconnect,
        clouds=tuple(clouds or ()),
        exclude_clouds=tuple(excluded or ()),
        regions=tuple(checks.region_glob(_text(r)) for r in _list(where.get("regions", []))),
        countries=tuple(checks.country(c) for c in _list(where.get("countries", []))),
        spot=_choice(checks.spot_not_bool(where.get("spot", "never")), SPOT),
        max_price_per_hour=_optional(
            where.get("max_price_per_hour"), lambda v: _number(v, gt=0, le=bounds.MAX_MONEY)
        ),
    )


def _run(run: dict[str, Any], base: Path) -> spec.RunSpec:
    image, command, setup = (_optional(run.get(k), _text) for k in ("image", "command", "setup"))
    env = run.get("env", {})
    if type(env) is not dict:
        raise _Unsure
    env = {_text(name, 0): checks.env_value(value) for name, value in env.items()}
    checks.env_names(env)
    workdir = _optional(run.get("workdir"), _text)
    checks.something_to_run(command, image, setup)
    return spec.RunSpec(
        command=command or "",
        image=image,
        env=tuple(sorted(env.items())),
        workdir=None if workdir is None else resolve_workdir(workdir, base),
        setup=setup or "",
    )


def _runtime(runtime: dict[str, Any]) -> spec.RuntimeEstimate:
    written = runtime.get("estimate_hours", checks.AUTO)
    auto = isinstance(written, str) and checks.estimate_hours(written) is None
    hours = bounds.MAX_HOURS if auto else _number(written, gt=0, le=bounds.MAX_HOURS)
    due = checks.deadline(runtime["deadline"]) if "deadline" in runtime else None
    checks.plannable(hours, due)
    if auto:  # learned from history (broker.learned_runtime), the default until then
        return spec.RuntimeEstimate(deadline=due, auto=True, source=spec.NO_HISTORY)
    return spec.RuntimeEstimate(hours, due)


def _checkpoint(ckpt: dict[str, Any]) -> spec.Checkpoint:
    return spec.Checkpoint(
        _uri(ckpt.get("uri", _MISSING)),
        _number(ckpt.get("interval_minutes", 30.0), gt=0, le=bounds.MAX_HOURS * 60),
        _number(ckpt.get("size_gb", 0.0), ge=0, le=bounds.MAX_SIZE_GB),
        _optional(ckpt.get("location"), checks.place),
    )


def _data_input(item: dict[str, Any]) -> spec.DataInput:
    return spec.DataInput(
        _uri(item.get("uri", _MISSING)),
        _number(item.get("size_gb", _MISSING), ge=0, le=bounds.MAX_SIZE_GB),
        _optional(item.get("location"), checks.place),
    )


def _budget(budget: dict[str, Any]) -> spec.Budget:
    limit = budget.get("max_cost")
    return spec.Budget(_optional(limit, lambda v: _number(v, gt=0, le=bounds.MAX_MONEY)))


def _recovery(recovery: dict[str, Any]) -> dict[str, Any]:
    codes = _list(recovery.get("recover_on_exit_codes", []))
    return {
        "max_restarts_on_error": _integer(
            recovery.get("max_restarts_on_error", 0), 0, bounds.MAX_COUNT
        ),
        "recover_on_exit_codes": tuple(_integer(code, 1, 255) for code in codes),
    }


# --- the value types, read as the model's strict mode reads them ---------------------


def _section(value: object, name: str) -> dict[str, Any]:
    """A mapping of the section's own keys (unknown keys are the model's to report)."""
    if type(value) is not dict or not value.keys() <= FIELDS[name]:
        raise _Unsure
    return value


def _list(value: object) -> list[Any]:
    if type(value) is not list:
        raise _Unsure
    return value


def _text(value: object, min_length: int = 1) -> str:
    if type(value) is not str or len(value) < min_length:
        raise _Unsure
    return value


def _label(value: object) -> str:
    return checks.label(_text(value, 0))


def _uri(value: object) -> str:
    return checks.uri(_text(value, 0))


def _choice(value: object, choices: tuple[str, ...]) -> str:
    if type(value) is not str or value not in choices:
        raise _Unsure
    return value


def _clouds(value: object) -> list[str]:
    return [_choice(cloud, CLOUDS) for cloud in _list(value)]


def _integer(value: object, ge: int, le: int) -> int:
    if type(value) is not int or not ge <= value <= le:
        raise _Unsure
    return value


def _number(value: object, *, le: float, gt: float | None = None, ge: float | None = None) -> float:
    """A float field: a finite int or float (never a bool) within the bounds, as a float."""
    if type(value) is int and abs(value) <= _EXACT_FLOAT:
        value = float(value)
    if type(value) is not float or not math.isfinite(value) or value > le:
        raise _Unsure
    if (gt is not None and not value > gt) or (ge is not None and not value >= ge):
        raise _Unsure
    return value


def _optional(value: object, parse: Callable[[Any], T]) -> T | None:
    return None if value is None else parse(value)
