"""The values of a manifest written as text in YAML, each parsed into its spec type.

Each `Annotated` type pairs a parser of `broker.manifest.checks` (raising ValueError
with the message a user reads, located by `pricing.userio.validation.validation_errors`
at the field that holds the value) with the JSON Schema an editor shows for it.
pydantic is imported at the top: import this only when a manifest is read.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainValidator,
    WithJsonSchema,
)

from broker import spec
from broker.manifest import checks
from broker.manifest.checks import LABEL
from pricing.regions import Place
from pricing.schema import CLOUDS
from pricing.userio import bounds

Cloud = Literal[CLOUDS]  # type: ignore[valid-type]  # ("aws", "gcp", "azure", "onprem")


def _text(examples: list[str], **schema: object) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", **schema, "examples": examples})


Label = Annotated[
    str,
    AfterValidator(checks.label),
    _text(["llama-ft"], pattern=f"^{LABEL.pattern}$", maxLength=63),
]
AmountText = Annotated[
    spec.Amount,
    PlainValidator(checks.amount),
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
GpuAskText = Annotated[spec.GpuAsk, PlainValidator(checks.gpu_ask), _text(["A100:8", "H100:8"])]
Accelerators = Annotated[
    list[GpuAskText],
    BeforeValidator(checks.one_or_many),
    AfterValidator(checks.distinct_gpus),
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
    PlainValidator(checks.place),
    _text(["aws:us-east-1", "gcp:europe-west4"], pattern=r"^[a-z]+:\S+$"),
]
Deadline = Annotated[
    timedelta | datetime | None,
    PlainValidator(checks.deadline),
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
Country = Annotated[
    str, PlainValidator(checks.country), _text(["US", "DE"], pattern="^[A-Za-z]{2}$")
]
RegionGlob = Annotated[str, AfterValidator(checks.region_glob), _text(["us-east-1", "europe-*"])]
Uri = Annotated[
    str,
    AfterValidator(checks.uri),
    _text(["s3://bucket/path/"], pattern=r"^(s3|gs|az|file)://"),
]
EnvValue = Annotated[str, PlainValidator(checks.env_value), WithJsonSchema({"type": "string"})]
ExitCode = Annotated[int, Field(ge=1, le=255)]
EstimateHours = Annotated[
    float | None,
    PlainValidator(checks.estimate_hours),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": bounds.MAX_HOURS},
                {"const": checks.AUTO},
            ],
            "examples": [12, 1.5, checks.AUTO],
        }
    ),
]
