"""The pydantic models of a pools file and the checks that need the GPU facts.

Built on first use (pydantic is slow to import). `onprem.inventory` validates each
document against `models()`, then checks here what one field alone cannot say: the
executor mapping against its kind (`onprem.executors.options`) and the MIG layouts
against the pool's GPU (`pricing.gpus`), each error located at the key it is about.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from onprem.executors.options import OPTIONS, ExecutorOptions, OptionError
from pricing.userio.errors import UserInputError
from pricing.userio.suggest import suggestion
from pricing.userio.yaml_reader import YamlDocument

if TYPE_CHECKING:
    import pydantic

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}")


def check_name(value: str, what: str) -> str:
    if not NAME.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} must start with a letter or digit and hold only letters, "
            "digits, '.', '_' or '-' (at most 63)"
        )
    return value


def executor_options(
    doc: YamlDocument,
    at: tuple[str | int, ...],
    kind: str,
    given: Mapping[str, Any],
    errors: list[UserInputError],
) -> ExecutorOptions | None:
    """The executor mapping `given` (all keys but `kind`) as its kind's options, or None
    with located errors appended to `errors`."""
    from pydantic import ValidationError

    cls = OPTIONS[kind]
    names = [f.name for f in dataclasses.fields(cls)]
    try:
        values = _options_model(kind).model_validate(dict(given)).model_dump(exclude_unset=True)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = (*at, *err["loc"])
            if err["type"] == "extra_forbidden":
                message = f"unknown {kind} executor option{suggestion(err['loc'][-1], names)}"
                message += f" (it takes: {', '.join(names)})"
                errors.append(doc.error(loc, message, key=True))
            elif err["type"] == "missing":
                errors.append(doc.error(at, f"the {kind} executor needs {err['loc'][0]!r}"))
            else:
                message = err["msg"][:1].lower() + err["msg"][1:]
                errors.append(doc.error(loc, f"{message} (got {err.get('input')!r})"))
        return None
    try:
        return cls(**values)
    except OptionError as exc:
        errors.append(doc.error((*at, exc.field), str(exc)))
        return None


def mig_errors(
    doc: YamlDocument, at: tuple[str | int, ...], gpu: str, layout: Mapping[str, int]
) -> list[UserInputError]:
    """What is wrong with a per-GPU MIG layout (profile -> slices on each GPU) for `gpu`:
    unknown profiles, more of one than fit, more compute or memory slices than a GPU has."""
    from pricing.gpus import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, mig_profiles

    profiles = {p.name: p for p in mig_profiles(gpu)}
    if not profiles:
        return [doc.error(at, f"{gpu} cannot be partitioned with MIG")]
    errors, compute, memory = [], 0, 0
    for name, count in layout.items():
        profile = profiles.get(name)
        if profile is None:
            known = ", ".join(profiles)
            message = f"{gpu} has no MIG profile {name!r}{suggestion(name, profiles)}"
            errors.append(doc.error((*at, name), f"{message} (it has {known})", key=True))
        elif count > profile.per_gpu:
            errors.append(
                doc.error((*at, name), f"at most {profile.per_gpu} x {name} fit on one {gpu}")
            )
        else:
            compute += profile.compute * count
            memory += profile.memory_slices * count
    if not errors and (compute > MIG_COMPUTE_SLICES or memory > MIG_MEMORY_SLICES):
        errors.append(
            doc.error(
                at,
                f"this layout needs {compute} compute and {memory} memory slices; one {gpu} "
                f"has {MIG_COMPUTE_SLICES} and {MIG_MEMORY_SLICES} (one layout is per GPU)",
            )
        )
    return errors


@functools.cache
def _options_model(kind: str) -> type[pydantic.BaseModel]:
    """A strict pydantic model with the fields of the options dataclass of `kind`."""
    from pydantic import ConfigDict, create_model

    cls = OPTIONS[kind]
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) is tuple:  # YAML gives lists
            hint = list[typing.get_args(hint)[0]]  # type: ignore[misc]
        if hint is float:
            hint = float | int
        default = ... if f.default is dataclasses.MISSING else f.default
        fields[f.name] = (hint, default)
    config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
    return create_model(f"{cls.__name__}Model", __config__=config, **fields)


@functools.cache
def models() -> Any:
    """The root model of a pools file (one document)."""
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
    from pricing.userio import bounds

    class _Model(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    class Location(_Model):
        region: str
        country: str

        @field_validator("region")
        @classmethod
        def _region(cls, value: str) -> str:
            return check_name(value, "region")

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

    Layout = dict[str, int]

    class NodeModel(_Model):
        name: str
        switch: str = ""
        address: str = ""
        port: int = Field(0, ge=0, le=65535)
        mig: Layout | None = None

        @field_validator("name", "switch")
        @classmethod
        def _names(cls, value: str, info: ValidationInfo) -> str:
            return check_name(value, f"node {info.field_name}") if value else value

        @field_validator("address")
        @classmethod
        def _address(cls, value: str) -> str:
            if value and not HOST.fullmatch(value):
                raise ValueError(f"address {value!r} is not a host name or IP address")
            return value

        @field_validator("mig")
        @classmethod
        def _counts(cls, value: Layout | None) -> Layout | None:
            return _positive_counts(value)

    class PoolModel(_Model):
        name: str
        location: Location
        gpu: str
        gpus_per_node: int = Field(ge=1, le=bounds.MAX_GPUS_PER_NODE)
        vcpus_per_node: int = Field(ge=1, le=bounds.MAX_VCPUS)
        memory_gib_per_node: float = Field(gt=0, le=bounds.MAX_MEMORY_GIB)
        nvlink_domain: int = Field(0, ge=0, le=bounds.MAX_NODES * bounds.MAX_GPUS_PER_NODE)
        fabric: Literal["infiniband", "roce", "ethernet"] = "ethernet"
        cost_per_gpu_hour: float = Field(gt=0, le=bounds.MAX_PRICE_PER_HOUR)
        nodes: list[NodeModel] | None = Field(None, min_length=1, max_length=bounds.MAX_NODES)
        count: int | None = Field(None, ge=1, le=bounds.MAX_NODES)
        mig: Layout | None = None
        executor: ExecutorModel = ExecutorModel(kind="local")

        @field_validator("name")
        @classmethod
        def _name(cls, value: str) -> str:
            return check_name(value, "pool name")

        @field_validator("gpu")
        @classmethod
        def _gpu(cls, value: str) -> str:
            return canonical_gpu(value)

        @field_validator("nodes", mode="before")
        @classmethod
        def _short_nodes(cls, value: object) -> object:
            if isinstance(value, list):  # a bare host name is {name: host}
                return [{"name": v} if isinstance(v, str) else v for v in value]
            return value

        @field_validator("mig")
        @classmethod
        def _counts(cls, value: Layout | None) -> Layout | None:
            return _positive_counts(value)

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


def _positive_counts(layout: Mapping[str, int] | None) -> Mapping[str, int] | None:
    for profile, count in (layout or {}).items():
        if count < 1:
            raise ValueError(f"{profile}: a MIG layout counts slices per GPU, 1 or more")
    return layout
