"""The pydantic model of one `broker/v1` job manifest document, and its JobSpec.

pydantic is imported at the top of this module: import it only when a
manifest is read (`broker.manifest.load` does so inside its functions), so
that `broker --help` stays instant. Every check that concerns one document
lives here, as a validator on the field it is about, so that
`pricing.userio.validation.validation_errors` can locate its error; checks across
documents (a team's job names) are in `load.py`.

The field descriptions are the help an editor shows from `broker schema`;
docs/manifest.md is the reference for people.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from broker import spec
from broker.manifest.load import API_VERSION
from pricing.gpus import parse_gpu_request
from pricing.regions import REGION_COUNTRY, Place
from pricing.schema import CLOUDS
from pricing.userio.suggest import suggestion

SCHEMES: tuple[str, ...] = ("s3", "gs", "az", "file")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_AMOUNT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(\+?)")
_DURATION = re.compile(r"(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m)?", re.IGNORECASE)
_REGION_GLOB = re.compile(r"[A-Za-z0-9._*?!\[\]-]+")
_ONPREM_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = re.compile(r"\s")

Cloud = Literal[CLOUDS]  # type: ignore[valid-type]  # ("aws", "gcp", "azure", "onprem")


# --- values written as text in YAML, each parsed into its spec type ---------------------------


def _label(value: str) -> str:
    if not _LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit (at most 63)"
        )
    return value


def _amount(value: object) -> spec.Amount:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number, at_least = float(value), False
    elif isinstance(value, str) and (match := _AMOUNT.fullmatch(value.strip())):
        number, at_least = float(match[1]), bool(match[2])
    else:
        raise ValueError(
            f"{value!r} is not an amount: write N for exactly N, or N+ for at least N (e.g. 8+)"
        )
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"must be more than 0 (got {value!r})")
    return spec.Amount(number, at_least)


def _one_or_many(value: object) -> object:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return value
    raise ValueError(
        f"expected a GPU such as A100:8, or a list of them in order of preference, got {value!r}"
    )


def _gpu_ask(value: object) -> spec.GpuAsk:
    if not isinstance(value, str):
        raise ValueError(f"expected GPU:COUNT such as A100:8, got {value!r}")
    name, count = parse_gpu_request(value.strip())  # UnknownGpu is a ValueError
    if not math.isfinite(count):
        raise ValueError(f"GPU count must be a finite number in {value!r}")
    return spec.GpuAsk(name, count)


def _distinct_gpus(asks: list[spec.GpuAsk]) -> list[spec.GpuAsk]:
    if not asks:
        raise ValueError("list at least one GPU, or leave accelerators out for a CPU-only job")
    seen: set[str] = set()
    for ask in asks:
        if ask.gpu in seen:
            raise ValueError(
                f"{ask.gpu} is listed twice: give each GPU once, in order of preference"
            )
        seen.add(ask.gpu)
    return asks


def _place(value: object) -> Place:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"expected cloud:region such as aws:us-east-1, got {value!r}")
    cloud, _, region = (part.strip() for part in value.partition(":"))
    if cloud not in CLOUDS:
        raise ValueError(
            f"unknown cloud {cloud!r} in {value!r}: one of {', '.join(CLOUDS)}"
            f"{suggestion(cloud, CLOUDS)}"
        )
    if not region:
        raise ValueError(f"{value!r} names no region: expected cloud:region such as aws:us-east-1")
    if cloud == "onprem":
        if not _ONPREM_REGION.fullmatch(region):
            raise ValueError(f"{region!r} is not an on-prem region name (see your pools.yaml)")
    elif (cloud, region) not in REGION_COUNTRY:
        known = [r for c, r in REGION_COUNTRY if c == cloud]
        raise ValueError(f"unknown {cloud} region {region!r}{suggestion(region, known)}")
    return Place(cloud, region)


def _deadline(value: object) -> timedelta | datetime | None:
    if value is None:
        return None
    examples = (
        "a duration such as 90m, 36h, 2d or 1d12h, or an RFC 3339 time such as 2026-07-01T18:00:00Z"
    )
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        raise ValueError(f"{value} is a date without a time: write e.g. {value}T18:00:00Z")
    elif isinstance(value, str):
        text = value.strip()
        match = _DURATION.fullmatch(text)
        if text and match:
            days, hours, minutes = (int(group or 0) for group in match.groups())
            delta = timedelta(days=days, hours=hours, minutes=minutes)
            if delta <= timedelta(0):
                raise ValueError(f"deadline {value!r} must be after submission")
            return delta
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{value!r} is not a deadline: write {examples}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value!r} has no unit: write {examples}")
    else:
        raise ValueError(f"{value!r} is not a deadline: write {examples}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        written = value if isinstance(value, str) else moment.isoformat()
        raise ValueError(f"{written!r} has no timezone: add Z for UTC or an offset such as +02:00")
    return moment.astimezone(UTC)


def _country(value: object) -> str:
    if isinstance(value, bool):  # the Norway problem: YAML 1.1 reads NO as false
        raise ValueError('YAML read an unquoted country code as true/false: quote it ("NO")')
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z]{2}", value.strip()):
        raise ValueError(f"{value!r} is not a two-letter ISO 3166 country code such as US or DE")
    code = value.strip().upper()
    if code == "UK":
        raise ValueError("the ISO 3166 code of the United Kingdom is GB, not UK")
    if code == "EU":
        raise ValueError("EU is not a country: list its countries, e.g. [DE, FR, NL]")
    return code


def _region_glob(value: str) -> str:
    if not _REGION_GLOB.fullmatch(value):
        also = " (choose clouds with placement.clouds)" if ":" in value else ""
        raise ValueError(
            f"{value!r} is not a region name or glob such as us-east-1 or 'europe-*'{also}"
        )
    return value


def _uri(value: str) -> str:
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in SCHEMES or _SPACE.search(value):
        hint = suggestion(scheme, SCHEMES) if sep else ""
        raise ValueError(
            f"{value!r} is not a storage URI: use s3://bucket/path, gs://bucket/path, "
            f"az://container/path or file:///path{hint}"
        )
    if scheme == "file" and not rest.startswith("/"):
        raise ValueError(f"{value!r}: a file:// URI takes an absolute path, e.g. file:///data/ckpt")
    if scheme != "file" and not rest.split("/", 1)[0]:
        raise ValueError(f"{value!r} names no bucket, e.g. {scheme}://bucket/path")
    return value


def _env_value(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"environment values are strings: quote it (YAML read {value!r})")
    return value


def _text(examples: list[str], **schema: object) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", **schema, "examples": examples})


Label = Annotated[
    str,
    AfterValidator(_label),
    _text(["llama-ft"], pattern=f"^{_LABEL.pattern}$", maxLength=63),
]
AmountText = Annotated[
    spec.Amount,
    PlainValidator(_amount),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*\+?\s*$"},
            ],
            "examples": ["8+", 16],
        }
    ),
]
GpuAskText = Annotated[spec.GpuAsk, PlainValidator(_gpu_ask), _text(["A100:8", "H100:8"])]
Accelerators = Annotated[
    list[GpuAskText],
    BeforeValidator(_one_or_many),
    AfterValidator(_distinct_gpus),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
            "examples": ["A100:8", ["H100:8", "A100-80GB:8", "A100:8"]],
        }
    ),
]
PlaceText = Annotated[
    Place,
    PlainValidator(_place),
    _text(["aws:us-east-1", "gcp:europe-west4"], pattern=r"^[a-z]+:\S+$"),
]
Deadline = Annotated[
    timedelta | datetime | None,
    PlainValidator(_deadline),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^\s*(\d+\s*d)?\s*(\d+\s*h)?\s*(\d+\s*m)?\s*$"},
                {"type": "string", "format": "date-time"},
                {"type": "null"},
            ],
            "examples": ["36h", "1d12h", "2026-07-01T18:00:00Z"],
        }
    ),
]
Country = Annotated[str, PlainValidator(_country), _text(["US", "DE"], pattern="^[A-Za-z]{2}$")]
RegionGlob = Annotated[str, AfterValidator(_region_glob), _text(["us-east-1", "europe-*"])]
Uri = Annotated[
    str,
    AfterValidator(_uri),
    _text(["s3://bucket/path/"], pattern=r"^(s3|gs|az|file)://"),
]
EnvValue = Annotated[str, PlainValidator(_env_value), WithJsonSchema({"type": "string"})]
ExitCode = Annotated[int, Field(ge=1, le=255)]


# --- the document -----------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Resources(_Model):
    """What each node of the job needs. Leave it out for a one-node CPU job with no minimum."""

    accelerators: Accelerators | None = Field(
        None,
        description="GPU:COUNT per node (A100:8), or a list of acceptable alternatives in order "
        "of preference, which breaks ties in cost ([H100:8, A100-80GB:8]). GPU names are "
        "canonical names or aliases (broker offers --summary lists them). Leave out for a "
        "CPU-only job.",
    )
    cpus: AmountText | None = Field(
        None, description='vCPUs per node: N for exactly N, "N+" for at least N (8+).'
    )
    memory: AmountText | None = Field(
        None, description='Host memory per node in GiB: N for exactly N, "N+" for at least N.'
    )
    nodes: int = Field(1, ge=1, description="Number of nodes, all alike (default 1).")
    interconnect: Literal["nvlink", "infiniband", "efa"] | None = Field(
        None,
        description="Required fast interconnect: nvlink (between the GPUs of a node), "
        "infiniband or efa (between nodes).",
    )


class Placement(_Model):
    """Where the job may run and at what price."""

    clouds: list[Cloud] | None = Field(
        None, description="Allow-list of clouds (aws, gcp, azure, onprem); default all."
    )
    exclude_clouds: list[Cloud] | None = Field(
        None, description="Deny-list of clouds; not together with clouds."
    )
    regions: list[RegionGlob] = Field(
        default_factory=list,
        description="Allowed regions: names or shell globs (quote a glob: 'us-*'); default all.",
    )
    countries: list[Country] = Field(
        default_factory=list,
        description='Data residency: ISO 3166 two-letter codes (US, DE; quote "NO"); the '
        "job runs only in regions of these countries. Default: anywhere.",
    )
    spot: Literal["never", "prefer", "only"] = Field(
        "never",
        description="Spot (preemptible) capacity: never (default), prefer (spot when it is "
        "cheaper, interruptions included) or only.",
    )
    max_price_per_hour: float | None = Field(
        None, gt=0, description="Highest USD per hour for the whole job (all nodes)."
    )

    @field_validator("clouds")
    @classmethod
    def _clouds(cls, clouds: list[str] | None) -> list[str] | None:
        if clouds is not None and not clouds:
            raise ValueError("an empty allow-list allows nothing: leave clouds out to allow all")
        return clouds

    @field_validator("exclude_clouds")
    @classmethod
    def _exclude(cls, excluded: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if excluded is not None and info.data.get("clouds") is not None:
            raise ValueError("give either clouds (an allow-list) or exclude_clouds, not both")
        if excluded is not None and set(CLOUDS) <= set(excluded):
            raise ValueError("every cloud is excluded: nothing is left to run on")
        return excluded

    @field_validator("spot", mode="before")
    @classmethod
    def _spot(cls, value: object) -> object:
        if isinstance(value, bool):  # `spot: no` is false in YAML 1.1
            raise ValueError(
                f"YAML read an unquoted yes/no/true/false as {value}: write never, prefer or only"
            )
        return value


class Run(_Model):
    """What to run: a container image, a command, or both."""

    image: str | None = Field(
        None, min_length=1, description="Container image; its entrypoint runs without command."
    )
    command: str | None = Field(
        None,
        min_length=1,
        description="Shell command. $BROKER_RESUME_FROM holds the checkpoint to resume from.",
    )
    env: dict[str, EnvValue] = Field(
        default_factory=dict, description='Environment variables (quote numbers: "3").'
    )

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name.startswith("BROKER_"):
                raise ValueError(f"{name}: names starting with BROKER_ are set by the broker")
        return env

    @model_validator(mode="after")
    def _something(self) -> Run:
        if self.command is None and self.image is None:
            raise ValueError("give a command, an image (its entrypoint runs), or both")
        return self


class Runtime(_Model):
    """How long the job takes and when it must be done."""

    estimate_hours: float = Field(
        1.0, gt=0, description="Expected hours on the first-choice GPU (default 1)."
    )
    deadline: Deadline = Field(
        None,
        description="When the job must be done: a duration after submission (90m, 36h, 2d, "
        "1d12h) or an RFC 3339 time with a timezone (2026-07-01T18:00:00Z).",
    )


class Checkpoint(_Model):
    """Where and how often the job saves its state; needed to survive spot interruptions."""

    uri: Uri = Field(description="Checkpoint folder: s3://, gs://, az:// or file:///.")
    interval_minutes: float = Field(30.0, gt=0, description="Minutes between checkpoints.")
    size_gb: float = Field(0.0, ge=0, description="Size of one checkpoint in GB (for egress).")
    location: PlaceText | None = Field(
        None, description="Where the bucket lives, as cloud:region (aws:us-east-1)."
    )


class DataInput(_Model):
    """An input the job reads once at start."""

    uri: Uri = Field(description="Where the input is: s3://, gs://, az:// or file:///.")
    size_gb: float = Field(ge=0, description="Size in GB (for egress and staging time).")
    location: PlaceText | None = Field(
        None, description="Where the data lives, as cloud:region (aws:us-east-1)."
    )


class Budget(_Model):
    """Spending limits."""

    max_cost: float | None = Field(None, gt=0, description="Highest USD for the whole job.")


class Recovery(_Model):
    """What to do when the job fails (interruptions are always recovered)."""

    max_restarts_on_error: int = Field(
        0, ge=0, description="Restarts after the job itself fails (default 0)."
    )
    recover_on_exit_codes: list[ExitCode] = Field(
        default_factory=list, description="Exit codes treated as recoverable (e.g. 137)."
    )


class JobManifest(_Model):
    """A job for the broker: what it needs, where it may run, what to run, and its limits."""

    model_config = ConfigDict(title="broker job manifest (broker/v1)")

    apiVersion: Literal[API_VERSION] = Field(description="Manifest format version: broker/v1.")
    name: Label = Field(
        description="Job name, unique in its team: lower-case letters, digits and '-', "
        "starting and ending with a letter or digit, at most 63."
    )
    team: Label = Field(description="Team that owns the job and pays for it (same syntax).")
    queue: Label = Field("default", description="Queue the job waits in (default: default).")
    priority: int = Field(
        0,
        ge=-(2**31),
        le=2**31 - 1,
        description="Higher runs first within the queue (default 0).",
    )
    resources: Resources = Field(default_factory=Resources, description=Resources.__doc__)
    placement: Placement = Field(default_factory=Placement, description=Placement.__doc__)
    run: Run = Field(description=Run.__doc__)
    runtime: Runtime = Field(default_factory=Runtime, description=Runtime.__doc__)
    checkpoint: Checkpoint | None = Field(None, description=Checkpoint.__doc__)
    data: list[DataInput] = Field(
        default_factory=list, description="Inputs the job reads once at start."
    )
    budget: Budget = Field(default_factory=Budget, description=Budget.__doc__)
    recovery: Recovery = Field(default_factory=Recovery, description=Recovery.__doc__)

    def to_spec(self) -> spec.JobSpec:
        """The validated document as frozen plain data."""
        res, where, run = self.resources, self.placement, self.run
        checkpoint = self.checkpoint
        return spec.JobSpec(
            name=self.name,
            team=self.team,
            queue=self.queue,
            priority=self.priority,
            requirements=spec.Requirements(
                accelerators=tuple(res.accelerators or ()),
                cpus=res.cpus,
                memory_gib=res.memory,
                nodes=res.nodes,
                interconnect=res.interconnect,
                clouds=tuple(where.clouds or ()),
                exclude_clouds=tuple(where.exclude_clouds or ()),
                regions=tuple(where.regions),
                countries=tuple(where.countries),
                spot=where.spot,
                max_price_per_hour=_float(where.max_price_per_hour),
            ),
            run=spec.RunSpec(
                command=run.command or "", image=run.image, env=tuple(sorted(run.env.items()))
            ),
            runtime=spec.RuntimeEstimate(float(self.runtime.estimate_hours), self.runtime.deadline),
            checkpoint=None
            if checkpoint is None
            else spec.Checkpoint(
                checkpoint.uri,
                float(checkpoint.interval_minutes),
                float(checkpoint.size_gb),
                checkpoint.location,
            ),
            data=tuple(spec.DataInput(d.uri, float(d.size_gb), d.location) for d in self.data),
            budget=spec.Budget(_float(self.budget.max_cost)),
            max_restarts_on_error=self.recovery.max_restarts_on_error,
            recover_on_exit_codes=tuple(self.recovery.recover_on_exit_codes),
        )


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
