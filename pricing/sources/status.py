"""The refresh status file beside a catalog: when each source last succeeded.

`offers.status.json` (see `pricing.catalog.status_path`) holds, per source name,
the last attempt and its outcome, the last success, the rows it gave then, the
endpoint it read and notes. A refresh rewrites it atomically after the catalog;
`broker pricing status` reads it together with the catalog's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pricing.sources.interruption import RATE_TAG
from pricing.userio.atomic import atomic_write
from pricing.userio.redact import redact_data

FORMAT = 1


@dataclass
class Outcome:
    """How one source did in one refresh."""

    name: str
    cloud: str
    state: str  # "ok" | "failed" | "skipped"
    reason: str = ""
    rows: int = 0
    seconds: float = 0.0
    endpoint: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def read_status(path: Path) -> dict[str, dict[str, Any]]:
    """source name -> its entry ({} when the file is absent or unreadable)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    sources = document.get("sources") if isinstance(document, dict) else None
    return sources if isinstance(sources, dict) else {}


def record(path: Path, outcomes: Iterable[Outcome], when: str, catalog: Path) -> None:
    """Merge this refresh's outcomes into the status file (atomically), redacted
    (`pricing.userio.redact`): an error page may have quoted a credential."""
    sources = read_status(path)
    for outcome in outcomes:
        entry = sources.get(outcome.name, {})
        entry.update(asdict(outcome))
        entry["last_attempt"] = when
        if outcome.ok:
            entry["last_success"] = when
            entry["rows_at_last_success"] = outcome.rows
        entry.setdefault("last_success", None)
        sources[outcome.name] = entry
    document = {"format": FORMAT, "catalog": str(catalog), "sources": redact_data(sources)}
    atomic_write(path, lambda handle: json.dump(document, handle, indent=2, sort_keys=True))


def rows_by_source(sources: Iterable[str], as_of: Iterable[str]) -> dict[str, tuple[int, str]]:
    """Rows per price source (the `source` column without "+rate:"/"+overlay:" parts)
    and the oldest as-of among them."""
    found: dict[str, tuple[int, str]] = {}
    for source, date in zip(sources, as_of, strict=True):
        name = price_source(source)
        count, oldest = found.get(name, (0, date))
        found[name] = (count + 1, min(oldest, date) if oldest and date else oldest or date)
    return found


def price_source(source: str) -> str:
    """Where an offer's prices come from: `source` before any "+rate:" or "+overlay:"."""
    head = source.split(RATE_TAG, 1)[0]
    return head.split("+overlay:", 1)[0]
