"""The on-prem pool inventory: a user's YAML file of GPU pools, read into frozen dataclasses.

Usually `~/.config/broker/pools.yaml`; the CLI resolves the path (`--pools PATH`,
pricing.userio.settings) and passes it here.
Full reference and example: docs/pools.md and examples/pools.yaml.

    pools:
      - name: lab-a100                 # unique; letters, digits, '.', '_', '-'
        location: {region: onprem-us-east, country: US}
        gpu: A100-80GB                 # canonical name or alias (pricing.gpus)
        gpus_per_node: 8
        vcpus_per_node: 128
        memory_gib_per_node: 1024
        nvlink_domain: 8               # GPUs per NVLink domain; 0 = none (default)
        fabric: infiniband             # infiniband | roce | ethernet (default)
        cost_per_gpu_hour: 1.10        # amortised USD, > 0
        nodes: [gpu-a01, gpu-a02]      # node host names ...
        # count: 4                     # ... or a count: nodes <name>-0 .. <name>-3
        executor: {kind: local}        # local (default) | ssh | slurm; other keys kept

Rules beyond the types: exactly one of `nodes` and `count`; node names unique
across the file; pool names unique; one country per region; an NVLink domain
divides the node (2, 4, 8 on an 8-GPU node) or spans whole nodes (72 over
4-GPU nodes). Several `---` documents are read as one list of pools.

Every mistake raises `pricing.userio.errors.UserInputError` naming file, line,
column and field, with a "did you mean" for misspelt keys, GPU names and
values; all mistakes found in one pass are reported together.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pricing.userio.errors import UserInputError
from pricing.userio.yaml_reader import YamlDocument, load_yaml_documents

FABRICS: tuple[str, ...] = ("infiniband", "roce", "ethernet")
EXECUTOR_KINDS: tuple[str, ...] = ("local", "ssh", "slurm")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One machine of a pool."""

    name: str
    pool: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Executor:
    """How work reaches a pool's nodes. Only `kind` is checked here; the executor reads the rest."""

    kind: str  # local | ssh | slurm
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class Pool:
    """A set of identical GPU nodes in one place, with one amortised price."""

    name: str
    region: str
    country: str  # ISO 3166-1 alpha-2, upper case
    gpu: str  # canonical name (pricing.gpus)
    gpus_per_node: int
    vcpus_per_node: int
    memory_gib_per_node: float
    nvlink_domain: int  # GPUs per NVLink domain; 0 = none
    fabric: str  # infiniband | roce | ethernet
    cost_per_gpu_hour: float  # USD
    nodes: tuple[PoolNode, ...]
    executor: Executor = Executor("local")
    source: str = "onprem"  # "onprem:<path>" when read from a file
    as_of: str = ""  # ISO date the prices were written (file mtime); "" = unknown

    @property
    def total_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    @property
    def price_per_node_hour(self) -> float:
        return self.cost_per_gpu_hour * self.gpus_per_node


def load_pools(path: Path | str, *, missing_ok: bool = False) -> list[Pool]:
    """Read and validate a pools file; raise UserInputError naming file, line, column, field.

    With `missing_ok`, a file that does not exist gives no pools (for the default path).
    """
    path = Path(path).expanduser()
    if missing_ok and not path.exists():
        return []
    documents = load_yaml_documents(path)
    source = f"onprem:{path.resolve()}"
    as_of = date.fromtimestamp(path.stat().st_mtime).isoformat()
    errors: list[UserInputError] = []
    parsed: list[tuple[YamlDocument, int, Any]] = []  # (document, index in it, model)
    for doc in documents:
        if doc.data is None:
            continue
        models = _validate(doc, errors)
        parsed.extend((doc, i, model) for i, model in enumerate(models))
    _cross_check(parsed, errors)
    if errors:
        raise UserInputError.collect(errors)
    return [_to_pool(model, source, as_of) for _, _, model in parsed]


def pool_countries(pools: list[Pool]) -> dict[str, str]:
    """Region -> country of the pools, for data-residency filters; ValueError on a conflict."""
    countries: dict[str, str] = {}
    for pool in pools:
        known = countries.setdefault(pool.region, pool.country)
        if known != pool.country:
            raise ValueError(f"region {pool.region!r} is in both {known} and {pool.country}")
    return countries


def _validate(doc: YamlDocument, errors: list[UserInputError]) -> list[Any]:
    from pydantic import ValidationError

    from pricing.userio.validation import validation_errors

    models = _models()
    try:
        return list(models.model_validate(doc.data).pools)
    except ValidationError as exc:
        errors.extend(validation_errors(doc, exc, models))
        return []


def _cross_check(parsed: list[tuple[YamlDocument, int, Any]], errors: list[UserInputError]) -> None:
    """Checks across pools and documents: unique names, unique nodes, one country per region."""
    pool_lines: dict[str, int] = {}
    node_owner: dict[str, str] = {}
    region_country: dict[str, tuple[str, int]] = {}
    for doc, i, model in parsed:
        at = ("pools", i)
        if model.name in pool_lines:
            first = pool_lines[model.name]
            errors.append(
                doc.error(
                    (*at, "name"), f"duplicate pool name {model.name!r} (first at line {first})"
                )
            )
        else:
            pool_lines[model.name] = doc.locate((*at, "name"))[0]
        for j, node in enumerate(model.nodes or ()):
            owner = node_owner.setdefault(node, model.name)
            if owner != model.name or node in model.nodes[:j]:
                where = "earlier in this pool" if owner == model.name else f"in pool {owner!r}"
                errors.append(
                    doc.error((*at, "nodes", j), f"node {node!r} is already listed {where}")
                )
        region = model.location.region
        country, line = region_country.setdefault(
            region, (model.location.country, doc.locate((*at, "location", "country"))[0])
        )
        if country != model.location.country:
            errors.append(
                doc.error(
                    (*at, "location", "country"),
                    f"region {region!r} is in {country} (line {line}): one region, one country",
                )
            )


def _to_pool(model: Any, source: str, as_of: str) -> Pool:
    names = model.nodes or [f"{model.name}-{k}" for k in range(model.count)]
    return Pool(
        name=model.name,
        region=model.location.region,
        country=model.location.country,
        gpu=model.gpu,
        gpus_per_node=model.gpus_per_node,
        vcpus_per_node=model.vcpus_per_node,
        memory_gib_per_node=float(model.memory_gib_per_node),
        nvlink_domain=model.nvlink_domain,
        fabric=model.fabric,
        cost_per_gpu_hour=float(model.cost_per_gpu_hour),
        nodes=tuple(PoolNode(name, model.name, model.gpus_per_node) for name in names),
        executor=Executor(model.executor.kind, dict(model.executor.model_extra or {})),
        source=source,
        as_of=as_of,
    )


def _check_name(value: str, what: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} must start with a letter or digit and hold only letters, "
            "digits, '.', '_' or '-' (at most 63)"
        )
    return value


@functools.cache
def _models() -> Any:
    """The pydantic models of the file, built on first use (pydantic is slow to import)."""
    from typing import Literal

    from pydantic import (
        BaseModel,
        ConfigDict,
        Field,
        ValidationInfo,
        field_validator,
        model_validator,
    )

    from pricing.gpus import canonical_gpu

    class _Model(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    class Location(_Model):
        region: str
        country: str

        @field_validator("region")
        @classmethod
        def _region(cls, value: str) -> str:
            return _check_name(value, "region")

        @field_validator("country", mode="before")
        @classmethod
        def _country(cls, value: object) -> object:
            if isinstance(value, bool):  # the Norway problem: YAML reads NO as false
                raise ValueError(
                    'YAML read an unquoted country code as true/false: quote it ("NO")'
                )
            if isinstance(value, str):
                if not re.fullmatch(r"[A-Za-z]{2}", value):
                    raise ValueError(f"country {value!r} must be a two-letter ISO code such as US")
                return value.upper()
            return value

    class ExecutorModel(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True, frozen=True)
        kind: Literal["local", "ssh", "slurm"]

    class PoolModel(_Model):
        name: str
        location: Location
        gpu: str
        gpus_per_node: int = Field(ge=1)
        vcpus_per_node: int = Field(ge=1)
        memory_gib_per_node: float = Field(gt=0)
        nvlink_domain: int = Field(0, ge=0)
        fabric: Literal["infiniband", "roce", "ethernet"] = "ethernet"
        cost_per_gpu_hour: float = Field(gt=0)
        nodes: list[str] | None = Field(None, min_length=1)
        count: int | None = Field(None, ge=1)
        executor: ExecutorModel = ExecutorModel(kind="local")

        @field_validator("name")
        @classmethod
        def _name(cls, value: str) -> str:
            return _check_name(value, "pool name")

        @field_validator("gpu")
        @classmethod
        def _gpu(cls, value: str) -> str:
            return canonical_gpu(value)

        @field_validator("nodes")
        @classmethod
        def _nodes(cls, value: list[str] | None) -> list[str] | None:
            for name in value or ():
                _check_name(name, "node name")
            return value

        @field_validator("nvlink_domain")
        @classmethod
        def _nvlink(cls, domain: int, info: ValidationInfo) -> int:
            per_node = info.data.get("gpus_per_node")
            if (
                domain
                and per_node
                and (per_node % domain if domain <= per_node else domain % per_node)
            ):
                raise ValueError(
                    f"nvlink_domain {domain} must divide gpus_per_node {per_node} "
                    "or be a multiple of it (a domain across whole nodes)"
                )
            return domain

        @model_validator(mode="after")
        def _shape(self) -> PoolModel:
            if (self.nodes is None) == (self.count is None):
                raise ValueError("give exactly one of nodes: [host names] or count: N")
            return self

    class PoolsFile(_Model):
        pools: list[PoolModel]

    return PoolsFile
