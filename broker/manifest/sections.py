"""The sections of a manifest document (`resources`, `placement`, `run`, ...) as pydantic models.

Each class is named for its section (`PlacementSection`, `RuntimeSection`), to tell it from
the core types it is read into (`broker.spec`, `broker.planner.decision.Placement`).
Editors know the sections by their plain names: the schema's titles and definitions
drop the `Section` suffix (`section_title`, `SectionNames`), so `broker schema` names
them `Placement`, `Runtime`, ... pydantic is imported at the top: import this only
when a manifest is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import GenerateJsonSchema

from broker.manifest import checks
from broker.manifest.values import (
    Accelerators,
    AmountText,
    Cloud,
    Country,
    Deadline,
    EnvValue,
    EstimateHours,
    ExitCode,
    PlaceText,
    RegionGlob,
    Uri,
)
from broker.manifest.workdir import MANIFEST_DIR, resolve_workdir
from pricing.userio import bounds

if TYPE_CHECKING:
    from broker.spec import RuntimeEstimate

SUFFIX = "Section"


def section_title(cls: type) -> str:
    """A section's name in the JSON Schema: its class name without `Section`."""
    return cls.__name__.removesuffix(SUFFIX)


class SectionNames(GenerateJsonSchema):
    """The JSON Schema generator that keys each section's definition by its plain name."""

    def normalize_name(self, name: str) -> str:
        return super().normalize_name(name).removesuffix(SUFFIX)


class Strict(BaseModel):
    """Every part of a manifest: unknown keys and loose types are errors; values frozen."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        allow_inf_nan=False,
        model_title_generator=section_title,
    )


class ResourcesSection(Strict):
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
    nodes: int = Field(
        1, ge=1, le=bounds.MAX_NODES, description="Number of nodes, all alike (default 1)."
    )
    interconnect: Literal["nvlink", "infiniband", "efa"] | None = Field(
        None,
        description="Required fast interconnect: nvlink (between the GPUs of a node), "
        "infiniband or efa (between nodes).",
    )


class PlacementSection(Strict):
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
        None,
        gt=0,
        le=bounds.MAX_MONEY,
        description="Highest USD per hour for the whole job (all nodes).",
    )

    @field_validator("clouds")
    @classmethod
    def _clouds(cls, clouds: list[str] | None) -> list[str] | None:
        return checks.clouds_allowed(clouds)

    @field_validator("exclude_clouds")
    @classmethod
    def _exclude(cls, excluded: list[str] | None, info: ValidationInfo) -> list[str] | None:
        return checks.clouds_excluded(excluded, info.data.get("clouds"))

    @field_validator("spot", mode="before")
    @classmethod
    def _spot(cls, value: object) -> object:
        return checks.spot_not_bool(value)


class RunSection(Strict):
    """What to run: a container image, a command, or both; a setup before; a folder to run in."""

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
    workdir: str | None = Field(
        None,
        min_length=1,
        description="Folder to run in, relative to the manifest file (. for its own folder): "
        "delivered to each node before setup; command runs in it. It must exist.",
    )
    setup: str | None = Field(
        None,
        min_length=1,
        description="Shell command run once before command (install dependencies), in workdir.",
    )

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, written: str | None, info: ValidationInfo) -> str | None:
        if written is None:
            return None
        context = info.context or {}
        return resolve_workdir(written, context.get(MANIFEST_DIR) or Path.cwd())

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return checks.env_names(env)

    @model_validator(mode="after")
    def _something(self) -> RunSection:
        checks.something_to_run(self.command, self.image, self.setup)
        return self


class RuntimeSection(Strict):
    """How long the job takes and when it must be done."""

    estimate_hours: EstimateHours = Field(
        None,
        description="Expected hours on the first-choice GPU, or auto (the default): "
        "learned from the team's finished runs of this job (else of jobs on the same "
        "GPUs), 1 with no history.",
    )
    deadline: Deadline = Field(
        None,
        description="When the job must be done: a duration after submission (90m, 36h, 2d, "
        "1d12h) or an RFC 3339 time with a timezone (2026-07-01T18:00:00Z).",
    )

    @model_validator(mode="after")
    def _plannable(self) -> RuntimeSection:
        hours = bounds.MAX_HOURS if self.estimate_hours is None else self.estimate_hours
        checks.plannable(hours, self.deadline)
        return self

    def to_spec(self) -> RuntimeEstimate:
        """The section as the spec's value: an `auto` estimate is the default until
        `broker.learned_runtime` learns it from history."""
        from broker.spec import NO_HISTORY, RuntimeEstimate

        if self.estimate_hours is None:
            return RuntimeEstimate(deadline=self.deadline, auto=True, source=NO_HISTORY)
        return RuntimeEstimate(float(self.estimate_hours), self.deadline)


class CheckpointSection(Strict):
    """Where and how often the job saves its state; needed to survive spot interruptions."""

    uri: Uri = Field(description="Checkpoint folder: s3://, gs://, az:// or file:///.")
    interval_minutes: float = Field(
        30.0, gt=0, le=bounds.MAX_HOURS * 60, description="Minutes between checkpoints."
    )
    size_gb: float = Field(
        0.0, ge=0, le=bounds.MAX_SIZE_GB, description="Size of one checkpoint in GB (for egress)."
    )
    location: PlaceText | None = Field(
        None, description="Where the bucket lives, as cloud:region (aws:us-east-1)."
    )


class DataInputSection(Strict):
    """An input the job reads once at start."""

    uri: Uri = Field(description="Where the input is: s3://, gs://, az:// or file:///.")
    size_gb: float = Field(
        ge=0, le=bounds.MAX_SIZE_GB, description="Size in GB (for egress and staging time)."
    )
    location: PlaceText | None = Field(
        None, description="Where the data lives, as cloud:region (aws:us-east-1)."
    )


class BudgetSection(Strict):
    """Spending limits."""

    max_cost: float | None = Field(
        None, gt=0, le=bounds.MAX_MONEY, description="Highest USD for the whole job."
    )


class RecoverySection(Strict):
    """What to do when the job fails (interruptions are always recovered)."""

    max_restarts_on_error: int = Field(
        0, ge=0, le=bounds.MAX_COUNT, description="Restarts after the job itself fails (default 0)."
    )
    recover_on_exit_codes: list[ExitCode] = Field(
        default_factory=list, description="Exit codes treated as recoverable (e.g. 137)."
    )
