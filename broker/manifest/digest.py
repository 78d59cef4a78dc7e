"""A manifest document's identity and its schema: the sha256 of its canonical JSON
(keys sorted, no spaces, UTF-8), which tells an unchanged re-submit from a changed
one whatever its comments, layout or key order, and the JSON Schema of a document."""

from __future__ import annotations

import hashlib
import json
from datetime import date
from typing import Any


def manifest_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of one manifest document, with help on every field."""
    from broker.manifest.model import json_schema

    return json_schema()


def manifest_digest(data: Any) -> str:
    """sha256 hex of a document's canonical JSON: sorted keys, no spaces, UTF-8."""
    return json_digest(canonical_json(data))


def canonical_json(data: Any) -> str:
    """A document's canonical JSON (what its digest is of)."""
    return _CANONICAL_JSON.encode(data)


def json_digest(text: str) -> str:
    """sha256 hex of canonical JSON text in hand."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json_default(value: object) -> str:
    if isinstance(value, date):  # and datetime: YAML reads unquoted timestamps
        return value.isoformat()
    raise TypeError(f"cannot digest {type(value).__name__}")


_CANONICAL_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
)
