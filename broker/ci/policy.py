"""The rules a change must pass in `broker ci`, and which ones it breaks.

Rules come from flags or from the `ci:` section of the policy file (flags win):

    ci:
      max_increase: 10%          # or USD: 250
      max_job_cost: 500          # USD, any new or changed job
      allowed_regions: [us-*, europe-west4]
      allowed_clouds: [aws, gcp]
      require_checkpoint_for_spot: true

Only what the change touches is judged: new and changed jobs, and the total
difference. A decrease never breaks a rule.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from broker.ci.diff import CostDiff
from broker.estimate import JobEstimate
from pricing.userio.errors import UserInputError

_LIMIT = re.compile(
    r"^\s*\$?\s*(\d{1,3}(?:,\d{3})+(?:\.\d*)?|\d+(?:\.\d*)?|\.\d+)\s*(%|usd)?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class Limit:
    """An increase limit: USD, or a percentage of the expected cost at base."""

    value: float
    percent: bool = False

    def __str__(self) -> str:
        if self.percent:
            return f"{self.value:.2f}".rstrip("0").rstrip(".") + "%"
        return money(self.value)


def parse_limit(text: str | float) -> Limit:
    """`250`, `$1,250.50`, `250 USD` (dollars) or `10%`; ValueError for anything else."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not (math.isfinite(text) and text >= 0):
            raise ValueError(f"a limit is a number >= 0, got {text!r}")
        return Limit(float(text))
    match = _LIMIT.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a limit such as 250 (USD) or 10%")
    return Limit(float(match.group(1).replace(",", "")), percent=match.group(2) == "%")


@dataclass(frozen=True)
class Rules:
    """What a change must satisfy; None and () mean "no such rule"."""

    max_increase: Limit | None = None
    max_job_cost: float | None = None  # USD
    allowed_regions: tuple[str, ...] = ()  # globs
    allowed_clouds: tuple[str, ...] = ()  # globs
    require_checkpoint_for_spot: bool = True

    def over(self, other: dict[str, Any]) -> Rules:
        """These rules with the values of `other` that are set (not None) taking their place."""
        return replace(self, **{k: v for k, v in other.items() if v is not None})

    def describe(self) -> list[str]:
        """One short phrase per rule in force, for the summary."""
        said = []
        if self.max_increase is not None:
            said.append(f"max increase {self.max_increase}")
        if self.max_job_cost is not None:
            said.append(f"max job cost {money(self.max_job_cost)}")
        if self.allowed_regions:
            said.append("regions " + ", ".join(self.allowed_regions))
        if self.allowed_clouds:
            said.append("clouds " + ", ".join(self.allowed_clouds))
        if self.require_checkpoint_for_spot:
            said.append("spot jobs checkpoint")
        return said


@dataclass(frozen=True)
class Violation:
    """A broken rule: its flag name and what broke it."""

    rule: str
    message: str


def money(value: float) -> str:
    return f"${value:,.2f}"


def check(diff: CostDiff, rules: Rules) -> list[Violation]:
    """Every rule the change breaks, the total first, then job by job (in table order)."""
    broken = []
    if rules.max_increase is not None and diff.difference > 0:
        broken.extend(_increase(diff, rules.max_increase))
    for change in diff.changes:
        if change.after is not None:
            broken.extend(_job(change.after, rules))
    return broken


def _job(job: JobEstimate, rules: Rules) -> Iterator[Violation]:
    """The rules a new or changed job breaks."""
    name = f"{job.spec.team}/{job.spec.name} ({job.path}:{job.line})"
    p = job.placement
    if p is not None:
        if rules.max_job_cost is not None and p.expected_cost > rules.max_job_cost:
            yield Violation(
                "max-job-cost",
                f"{name} is expected to cost {money(p.expected_cost)}, "
                f"over {money(rules.max_job_cost)}",
            )
        if rules.allowed_clouds and not _matches(p.cloud, rules.allowed_clouds):
            allowed = ", ".join(rules.allowed_clouds)
            yield Violation("allowed-clouds", f"{name} is placed on {p.cloud}, not in {allowed}")
        if rules.allowed_regions and not _matches(p.region, rules.allowed_regions):
            allowed = ", ".join(rules.allowed_regions)
            yield Violation(
                "allowed-regions", f"{name} is placed in {p.cloud}/{p.region}, not in {allowed}"
            )
    spot = job.spec.requirements.spot
    if rules.require_checkpoint_for_spot and spot != "never" and job.spec.checkpoint is None:
        yield Violation(
            "require-checkpoint-for-spot",
            f"{name} may run on spot (spot: {spot}) but has no checkpoint: an interruption "
            "would lose its work",
        )


def _increase(diff: CostDiff, limit: Limit) -> list[Violation]:
    if limit.percent:
        if diff.percent <= limit.value:
            return []
        of = (
            f"{diff.percent:.1f}% of {money(diff.all_before)}"
            if math.isfinite(diff.percent)
            else "from nothing at base"
        )
        said = f"+{money(diff.difference)} ({of}), over {limit}"
    else:
        if diff.difference <= limit.value:
            return []
        said = f"+{money(diff.difference)}, over {limit}"
    return [Violation("max-increase", f"the expected cost rises by {said}")]


def _matches(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatchcase(value, glob) for glob in globs)


def load_rules(path: Path | None) -> Rules:
    """The `ci:` section of the policy file at `path` (Rules() when absent).

    Mistakes raise UserInputError naming file, line, column and field.
    """
    if path is None or not path.exists():
        return Rules()
    from pydantic import ValidationError

    from pricing.userio.validation import validation_errors
    from pricing.userio.yaml_reader import load_yaml_documents

    documents = [doc for doc in load_yaml_documents(path) if doc.data is not None]
    if not documents or not isinstance(documents[0].data, dict):
        return Rules()  # the queue policy loader reports a file that is not a mapping
    doc = documents[0]
    model = _models()
    try:
        section = model.model_validate(doc.data).ci
    except ValidationError as exc:
        raise UserInputError.collect(validation_errors(doc, exc, model)) from None
    if section is None:
        return Rules()
    values = {f.name: getattr(section, f.name) for f in fields(Rules)}
    for name in ("allowed_regions", "allowed_clouds"):
        values[name] = tuple(values[name]) if values[name] is not None else None
    return Rules().over(values)


def cloud_glob(value: str) -> str:
    """`value` if it matches some cloud (a typo would fail every placement); else ValueError."""
    from pricing.schema import CLOUDS
    from pricing.userio.suggest import suggestion

    if not any(fnmatchcase(cloud, value) for cloud in CLOUDS):
        raise ValueError(
            f"{value!r} matches no cloud ({', '.join(CLOUDS)}){suggestion(value, CLOUDS)}"
        )
    return value


@functools.cache
def _models() -> Any:
    """The pydantic model of the policy file's `ci:` section (pydantic is slow to import)."""
    from typing import Annotated

    from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

    from pricing.userio.bounds import MAX_MONEY

    class _Model(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    class CiSection(_Model):
        max_increase: Annotated[Limit, PlainValidator(parse_limit)] | None = None
        max_job_cost: Annotated[float, Field(ge=0, le=MAX_MONEY)] | None = None
        allowed_regions: list[Annotated[str, Field(min_length=1)]] | None = None
        allowed_clouds: list[Annotated[str, AfterValidator(cloud_glob)]] | None = None
        require_checkpoint_for_spot: bool | None = None

    class PolicyFile(BaseModel):  # the rest of the file is the queue policy's (broker.queue)
        model_config = ConfigDict(extra="ignore", frozen=True)
        ci: CiSection | None = None

    return PolicyFile
