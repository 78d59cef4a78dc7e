"""Read the queue policy file (`policy.yaml`) into a `Policy`.

Usually `~/.config/broker/policy.yaml`; the caller resolves the path (`--policy
PATH`) and passes it here. Reference and example: docs/policy.md and
examples/policy.yaml.

    queues: {default: 1, research: 2, batch: 0.5}   # weights, >= 0
    fair_share: {half_life_hours: 168}               # > 0
    preemption: {enabled: true, protect_minutes: 30}
    backfill: true
    teams:
      nlp: {share: 2, max_gpus: 32, max_gpus_by_model: {H100: 16}, monthly_budget: 20000}

Every mistake raises `pricing.userio.errors.UserInputError` naming file, line, column
and field, with a "did you mean" for misspelt keys and GPU names (canonicalised
with pricing.gpus); all mistakes found are reported together.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from broker.queue.policy import Policy, TeamPolicy
from pricing.userio.errors import UserInputError
from pricing.userio.yaml_reader import YamlDocument, load_yaml_documents


def load_policy(path: Path | str | None, *, missing_ok: bool = False) -> Policy:
    """The policy in `path`; `Policy()` for None, an empty file, or (with missing_ok) no file."""
    if path is None:
        return Policy()
    path = Path(path).expanduser()
    if missing_ok and not path.exists():
        return Policy()
    documents = [doc for doc in load_yaml_documents(path) if doc.data is not None]
    if not documents:
        return Policy()
    if len(documents) > 1:
        raise documents[1].error((), "a policy file holds one YAML document; remove this one")
    doc = documents[0]
    model = _validate(doc)
    errors: list[UserInputError] = []
    teams = {name: _team(doc, name, team, errors) for name, team in model.teams.items()}
    if errors:
        raise UserInputError.collect(sorted(errors, key=lambda e: (e.line, e.column)))
    return Policy(
        queues=dict(model.queues),
        teams=teams,
        fair_share_half_life_hours=model.fair_share.half_life_hours,
        preemption=model.preemption.enabled,
        preemption_protect_minutes=model.preemption.protect_minutes,
        backfill=model.backfill,
    )


def _validate(doc: YamlDocument) -> Any:
    from pydantic import ValidationError

    from pricing.userio.validation import validation_errors

    models = _models()
    try:
        return models.model_validate(doc.data)
    except ValidationError as exc:
        raise UserInputError.collect(validation_errors(doc, exc, models)) from None


def _team(doc: YamlDocument, name: str, team: Any, errors: list[UserInputError]) -> TeamPolicy:
    """The team's rules, its GPU names canonical; unknown or repeated GPUs go to `errors`."""
    from pricing.gpus import UnknownGpu, canonical_gpu

    by_model: dict[str, float] = {}
    written: dict[str, str] = {}
    for gpu, limit in team.max_gpus_by_model.items():
        at = ("teams", name, "max_gpus_by_model", gpu)
        try:
            canonical = canonical_gpu(gpu)
        except UnknownGpu as exc:
            errors.append(doc.error(at, str(exc), key=True))
            continue
        if canonical in by_model:
            first = written[canonical]
            errors.append(
                doc.error(at, f"{gpu!r} is {canonical}, already limited as {first!r}", key=True)
            )
            continue
        by_model[canonical], written[canonical] = limit, gpu
    return TeamPolicy(
        share=team.share,
        max_gpus=team.max_gpus,
        max_gpus_by_model=by_model,
        monthly_budget=team.monthly_budget,
    )


@functools.cache
def _models() -> Any:
    """The pydantic models of the file, built on first use (pydantic is slow to import)."""
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field

    from pricing.userio import bounds

    NonNegative = Annotated[float, Field(ge=0, le=bounds.MAX_MONEY)]
    Weight = Annotated[float, Field(ge=0, le=bounds.MAX_PRIORITY)]
    Gpus = Annotated[float, Field(ge=0, le=bounds.MAX_NODES * bounds.MAX_GPUS_PER_NODE)]

    class _Model(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    class Team(_Model):
        share: float = Field(1.0, gt=0, le=bounds.MAX_PRIORITY)
        max_gpus: Gpus | None = None
        max_gpus_by_model: dict[str, Gpus] = {}
        monthly_budget: NonNegative | None = None

    class FairShare(_Model):
        half_life_hours: float = Field(24.0 * 7, gt=0, le=bounds.MAX_HOURS)

    class Preemption(_Model):
        enabled: bool = True
        protect_minutes: float = Field(30.0, ge=0, le=bounds.MAX_HOURS * 60)

    class PolicyFile(_Model):
        queues: dict[str, Weight] = {"default": 1.0}
        fair_share: FairShare = FairShare()
        preemption: Preemption = Preemption()
        backfill: bool = True
        teams: dict[str, Team] = {}
        ci: dict[str, Any] | None = None  # rules of `broker ci`, read by broker.ci.policy

    return PolicyFile
