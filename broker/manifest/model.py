"""The pydantic model of one `broker/v1` job manifest document, and its JobSpec.

pydantic is imported at the top of this module and of the two it is built from
(`broker.manifest.values`, the values written as text; `broker.manifest.sections`,
the document's sections): import it only when a manifest is read
(`broker.manifest.load` does so inside its functions), so that `broker --help` stays
instant. Every check that concerns one document lives in these modules, as a
validator on the field it is about, so that `pricing.userio.validation.validation_errors` can
locate its error; checks across documents (a team's job names) are in `load.py`.

The field descriptions are the help an editor shows from `broker schema`;
docs/manifest.md is the reference for people.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from broker import spec
from broker.manifest.load import API_VERSION
from broker.manifest.sections import (
    BudgetSection,
    CheckpointSection,
    DataInputSection,
    PlacementSection,
    RecoverySection,
    ResourcesSection,
    RunSection,
    RuntimeSection,
    SectionNames,
    Strict,
)
from broker.manifest.values import Label


class JobManifest(Strict):
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
    resources: ResourcesSection = Field(
        default_factory=ResourcesSection, description=ResourcesSection.__doc__
    )
    placement: PlacementSection = Field(
        default_factory=PlacementSection, description=PlacementSection.__doc__
    )
    run: RunSection = Field(description=RunSection.__doc__)
    runtime: RuntimeSection = Field(
        default_factory=RuntimeSection, description=RuntimeSection.__doc__
    )
    checkpoint: CheckpointSection | None = Field(None, description=CheckpointSection.__doc__)
    data: list[DataInputSection] = Field(
        default_factory=list, description="Inputs the job reads once at start."
    )
    budget: BudgetSection = Field(default_factory=BudgetSection, description=BudgetSection.__doc__)
    recovery: RecoverySection = Field(
        default_factory=RecoverySection, description=RecoverySection.__doc__
    )

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
                command=run.command or "",
                image=run.image,
                env=tuple(sorted(run.env.items())),
                workdir=run.workdir,
                setup=run.setup or "",
            ),
            runtime=self.runtime.to_spec(),
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


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one manifest document, sections under their plain names."""
    schema = JobManifest.model_json_schema(schema_generator=SectionNames)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
