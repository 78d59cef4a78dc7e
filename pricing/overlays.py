"""Price overlays: negotiated discounts and contract prices applied to the offers table.

A user's YAML file (usually `~/.config/broker/overlays.yaml`; the CLI resolves
the path and passes it here) lists rules; several `---` documents are read as one list:

    overlays:
      - cloud: aws                  # required: aws | gcp | azure | onprem
        discount: 15%               # percentage off ("-15%" means the same)
        market: on-demand           # on-demand (default) | spot | both
      - cloud: gcp
        instance_type: a2-highgpu-8g
        region: "us-*"              # optional glob
        price_on_demand: 20.00      # absolute USD per instance-hour

Matching: `cloud` must equal the offer's; `region`, `zone` and `instance_type`
are optional shell globs (`*`, `?`, `[...]`), matched case-insensitively
against the whole value; `accelerator` is an optional GPU name or alias.
A rule without optional matchers applies to the whole cloud.

Action: either a `discount` (with `market` saying which prices it cuts) or
absolute prices (`price_on_demand`, `price_spot`, or both), never both in one
rule. A discount must be written with a `%` (0% to under 100%), so that 15 and
0.15 cannot be confused. An absolute price is per instance, so it needs a
literal `instance_type` (no glob).

Semantics, decided once:
- Rules apply in file order, each to the prices left by those before it:
  two matching discounts of 10% compound to 19%; an absolute price sets the
  price, and a later discount then cuts that price.
- Only existing prices change. A discount never turns a missing price (NaN)
  into a number, and neither does an absolute price: an offer not sold on a
  market stays unsold there (an overlay cannot invent a spot market).
- Money is not rounded: price x ((100 - percent) / 100), to cents or otherwise.
  The factor is computed first so that it is at most 1 and a discount can
  never raise a price, not even by the last bit of a float.
- Rows whose price changed get "+overlay:<file name>" appended to `source`,
  once per file, so a report can tell a negotiated price from a list price.
Apply overlays once, to a freshly loaded catalog: applying twice discounts twice.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pricing.schema import CLOUDS
from pricing.userio.errors import UserInputError
from pricing.userio.yaml_reader import load_yaml_documents

if TYPE_CHECKING:
    from pricing.table import OfferTable

MARKETS: tuple[str, ...] = ("on-demand", "spot", "both")
_PERCENT = re.compile(r"\s*-?\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True, slots=True)
class Overlay:
    """One rule: which offers (cloud plus optional globs) and what to do to their prices."""

    cloud: str
    region: str | None = None  # glob; None = any
    zone: str | None = None  # glob; None = any
    instance_type: str | None = None  # glob; None = any
    accelerator: str | None = None  # canonical GPU name; None = any
    discount_percent: float | None = None  # 15.0 = 15% off
    market: str = "on-demand"  # which prices the discount cuts: on-demand | spot | both
    price_on_demand: float | None = None  # absolute USD per instance-hour
    price_spot: float | None = None
    file: str = ""  # name of the file the rule came from, for the source tag
    line: int = 0  # where in that file, for messages

    def columns(self) -> tuple[str, ...]:
        """The price columns this rule touches."""
        if self.discount_percent is None:
            return tuple(
                c for c in ("price_on_demand", "price_spot") if getattr(self, c) is not None
            )
        return {
            "on-demand": ("price_on_demand",),
            "spot": ("price_spot",),
            "both": ("price_on_demand", "price_spot"),
        }[self.market]


def load_overlays(path: Path | str, *, missing_ok: bool = False) -> list[Overlay]:
    """Read and validate an overlays file; raise UserInputError naming file, line, column, field.

    With `missing_ok`, a file that does not exist gives no overlays (for the default path).
    """
    from pydantic import ValidationError

    from pricing.userio.validation import validation_errors

    path = Path(path).expanduser()
    if missing_ok and not path.exists():
        return []
    model = _models()
    errors: list[UserInputError] = []
    overlays: list[Overlay] = []
    for doc in load_yaml_documents(path):
        if doc.data is None:
            continue
        try:
            rules = model.model_validate(doc.data).overlays
        except ValidationError as exc:
            errors.extend(validation_errors(doc, exc, model))
            continue
        for i, rule in enumerate(rules):
            fields = rule.model_dump(exclude={"discount", "market"})
            overlays.append(
                Overlay(
                    **fields,
                    discount_percent=rule.discount,
                    market=rule.market or "on-demand",
                    file=path.name,
                    line=doc.locate(("overlays", i))[0],
                )
            )
    if errors:
        raise UserInputError.collect(errors)
    return overlays


def overlay_masks(offers: OfferTable, overlays: Sequence[Overlay]) -> list[Any]:
    """For each overlay, a boolean numpy array of the offers it matches (prices aside).

    Each glob is tested once per distinct value of its column, then spread over
    the rows through the column's codes.
    """
    import numpy as np

    masks = []
    for overlay in overlays:
        mask = _value_mask(offers, "cloud", lambda v, o=overlay: v == o.cloud)
        for column in ("region", "zone", "instance_type"):
            pattern = getattr(overlay, column)
            if pattern is not None:
                mask &= _value_mask(offers, column, lambda v, p=pattern: _glob_match(v, p))
        if overlay.accelerator is not None:
            wanted = overlay.accelerator.lower()
            mask &= _value_mask(offers, "accelerator", lambda v, w=wanted: v.lower() == w)
        masks.append(np.asarray(mask, dtype=bool))
    return masks


def match_counts(offers: OfferTable, overlays: Sequence[Overlay]) -> list[int]:
    """How many offers each overlay matches, so that the CLI can warn about dead rules."""
    return [int(mask.sum()) for mask in overlay_masks(offers, overlays)]


def apply_overlays(offers: OfferTable, overlays: Sequence[Overlay]) -> OfferTable:
    """A copy of `offers` with the overlays applied in order (see the module docstring)."""
    import numpy as np

    from pricing.table import OfferTable

    numbers = {name: values.copy() for name, values in offers.numbers.items()}
    changed_by_file: dict[str, Any] = {}
    for overlay, mask in zip(overlays, overlay_masks(offers, overlays), strict=True):
        for column in overlay.columns():
            before = numbers[column]
            rows = mask & ~np.isnan(before)
            if not rows.any():
                continue
            updated = before.copy()
            if overlay.discount_percent is not None:
                updated[rows] = before[rows] * ((100.0 - overlay.discount_percent) / 100.0)
            else:
                updated[rows] = getattr(overlay, column)
            numbers[column] = updated
            changed = (updated != before) & rows  # NaN rows are excluded by `rows`
            seen = changed_by_file.get(overlay.file)
            changed_by_file[overlay.file] = changed if seen is None else (seen | changed)
    source = offers.text("source")
    tagged = False
    for file, changed in changed_by_file.items():
        if changed.any():
            tag = f"+overlay:{file}" if file else "+overlay"
            source = source.copy()
            source[changed] = source[changed] + tag
            tagged = True
    codes, categories = dict(offers.codes), dict(offers.categories)
    if tagged:
        uniques, inverse = np.unique(source.astype(str), return_inverse=True)
        categories["source"] = uniques.astype(object)
        codes["source"] = inverse.astype(np.int32)
    return OfferTable(numbers, codes, categories)


def _value_mask(offers: OfferTable, column: str, keep: Any) -> Any:
    import numpy as np

    per_value = np.array([bool(keep(v)) for v in offers.categories[column]], dtype=bool)
    return per_value[offers.codes[column]] if len(per_value) else np.zeros(len(offers), bool)


def _glob_match(value: str, pattern: str) -> bool:
    """Case-insensitive whole-value glob."""
    from fnmatch import fnmatchcase

    return fnmatchcase(value.lower(), pattern.lower())


def _parse_discount(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a discount is a percentage such as '15%', not {value!r}")
    if not isinstance(value, str):
        raise ValueError(
            f"write the discount with a percent sign ('{value}%'), so that 15 and 0.15 "
            "cannot be confused"
        )
    if value.strip().startswith("+"):
        raise ValueError(f"a discount lowers prices: write '15%' or '-15%', not {value!r}")
    match = _PERCENT.fullmatch(value)
    if match is None:
        raise ValueError(f"a discount is a percentage such as '15%', not {value!r}")
    percent = float(match.group(1))
    if not 0 <= percent < 100:
        raise ValueError(f"a discount must be at least 0% and under 100%, not {value!r}")
    return percent


@functools.cache
def _models() -> Any:
    """The pydantic models of the file, built on first use (pydantic is slow to import)."""
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

    from pricing.gpus import canonical_gpu
    from pricing.userio.bounds import MAX_PRICE_PER_HOUR

    class Rule(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
        cloud: Literal[CLOUDS]  # type: ignore[valid-type]
        region: str | None = Field(None, min_length=1)
        zone: str | None = Field(None, min_length=1)
        instance_type: str | None = Field(None, min_length=1)
        accelerator: str | None = None
        discount: float | None = None
        market: Literal["on-demand", "spot", "both"] | None = None
        price_on_demand: float | None = Field(None, gt=0, le=MAX_PRICE_PER_HOUR)
        price_spot: float | None = Field(None, gt=0, le=MAX_PRICE_PER_HOUR)

        @field_validator("discount", mode="before")
        @classmethod
        def _discount(cls, value: object) -> float | None:
            return _parse_discount(value)

        @field_validator("accelerator")
        @classmethod
        def _accelerator(cls, value: str | None) -> str | None:
            return None if value is None else canonical_gpu(value)

        @model_validator(mode="after")
        def _action(self) -> Rule:
            absolute = self.price_on_demand is not None or self.price_spot is not None
            if self.discount is None and not absolute:
                raise ValueError("give a discount or a price_on_demand / price_spot")
            if self.discount is not None and absolute:
                raise ValueError("give either a discount or absolute prices, not both")
            if self.market is not None and self.discount is None:
                raise ValueError("market goes with a discount; an absolute price names its market")
            if absolute and (self.instance_type is None or _GLOB_CHARS.search(self.instance_type)):
                raise ValueError("an absolute price is per instance: name one instance_type")
            return self

    class OverlaysFile(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
        overlays: list[Rule]

    return OverlaysFile
