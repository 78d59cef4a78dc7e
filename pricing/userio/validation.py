"""A pydantic `ValidationError` as located errors, with a "did you mean" where one helps.

Every edge model (manifest, pools, overlays, queue policy) is validated from a
`YamlDocument`'s data; `validation_errors` turns what pydantic says into
`UserInputError`s at the file's lines and columns. pydantic itself is only seen
through the error and the model class given, so importing this module is cheap.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pricing.userio.errors import UserInputError
from pricing.userio.suggest import did_you_mean, suggestion

if TYPE_CHECKING:
    import pydantic

    from pricing.userio.yaml_reader import YamlDocument


def validation_errors(
    doc: YamlDocument, exc: pydantic.ValidationError, model: type[pydantic.BaseModel]
) -> list[UserInputError]:
    """Located errors, sorted by position, for `exc` raised validating `doc.data` as `model`.

    `model` is the root model: the known field names and allowed values at each
    level are read from it, for the "did you mean" of an unknown key
    (`extra_forbidden`) or of a value outside a Literal or an Enum. A missing
    field whose name is what a misspelt key in the same mapping should have
    been is not reported twice: the misspelt key's error says it. A field that
    takes one value or a list, given one value, is named without an index.
    """
    raw = exc.errors(include_url=False)
    suggested: set[tuple[str | int, ...]] = set()  # fields a misspelt key was matched to
    errors: list[UserInputError] = []
    for err in raw:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            names = _field_names(_annotation_at(model, loc[:-1]))
            close = did_you_mean(loc[-1], names, limit=1)
            suggested.update((*loc[:-1], name) for name in close)
            message = "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
            if not close and names:
                message += f" (known fields: {', '.join(names)})"
            errors.append(doc.error(loc, message, key=True))
    for err in raw:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" or (err["type"] == "missing" and loc in suggested):
            continue
        errors.append(doc.error(doc.as_written(loc), _message(err, _annotation_at(model, loc))))
    return sorted(errors, key=lambda e: (e.line, e.column))


def _message(err: dict[str, Any], annotation: object) -> str:
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        return "field required"
    if kind in ("value_error", "assertion_error") and "error" in err.get("ctx", {}):
        return str(err["ctx"]["error"])
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping of key: value, got {_kind_of(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {_kind_of(value)}"
    if kind in ("literal_error", "enum"):
        choices = _choices(annotation)
        allowed = ", ".join(choices) if choices else err.get("ctx", {}).get("expected", "")
        return f"{value!r} is not one of {allowed}{suggestion(value, choices)}"
    message = err["msg"]
    if not isinstance(value, dict | list):
        message += f" (got {value!r})"
    return message[:1].lower() + message[1:]


def _kind_of(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), repr(value))


def _strip_optional(annotation: object) -> object:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _annotation_at(model: object, loc: Sequence[str | int]) -> object:
    """The type expected at `loc` under `model`, or None when it cannot be told."""
    current: object = model
    for part in loc:
        current = _strip_optional(current)
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if isinstance(part, int) and origin in (list, tuple, set, frozenset, Sequence) and args:
            current = args[0]
        elif isinstance(part, str) and hasattr(current, "model_fields"):
            fields = current.model_fields  # type: ignore[attr-defined]
            info = fields.get(part) or next(
                (f for f in fields.values() if getattr(f, "alias", None) == part), None
            )
            if info is None:
                return None
            current = info.annotation
        elif origin in (dict, typing.Mapping) and len(args) == 2:
            current = args[1]
        else:
            return None
    return _strip_optional(current)


def _field_names(annotation: object) -> list[str]:
    fields = getattr(annotation, "model_fields", None)
    if not isinstance(fields, dict):
        return []
    return [getattr(info, "alias", None) or name for name, info in fields.items()]


def _choices(annotation: object) -> list[str]:
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    return []
