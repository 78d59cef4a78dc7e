"""The rows of `broker pricing status`: each price source of a catalog, when it last
succeeded, how old its prices are and how many offers it gave."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from broker.cli.formats import count
from broker.cli.render import Column

STATUS_COLUMNS = (
    Column("source", "source"),
    Column("cloud", "cloud"),
    Column("state", "last attempt"),
    Column("last_success", "last success"),
    Column("age", "age"),
    Column("rows", "offers", count),
    Column("oldest_as_of", "oldest as of"),
    Column("stale", "stale"),
    Column("reason", "reason"),
)


def status_rows(offers: Any, status_file: Path, now: datetime, freshness_days: int) -> list[dict]:
    """One row per live source (from the status file) and per other price source in the
    catalog (the snapshot's pages, an import), with rows and ages."""
    from pricing.sources.interruption import ADVISOR, RATE_TAG
    from pricing.sources.refresh import SOURCES
    from pricing.sources.status import read_status, rows_by_source

    entries = read_status(status_file)
    sources = offers.text("source").tolist()
    counts = rows_by_source(sources, offers.text("as_of").tolist())
    advisor_rows = sum(1 for s in sources if f"{RATE_TAG}{ADVISOR}" in s)
    rows = []
    for name, info in SOURCES.items():
        entry = entries.get(name, {})
        if not entry and name not in counts:
            continue
        rows_now, oldest = counts.get(name, (advisor_rows if not info.markets else 0, ""))
        last = parse_time(entry.get("last_success"))
        age_days = (now - last).total_seconds() / 86400 if last else None
        rows.append(
            {
                "source": name,
                "cloud": info.cloud,
                "state": entry.get("state", "never"),
                "last_success": entry.get("last_success") or "never",
                "age": _age_text(age_days),
                "rows": rows_now,
                "oldest_as_of": oldest,
                "stale": _stale(oldest, now, freshness_days),
                "reason": entry.get("reason", "") if entry.get("state") != "ok" else "",
            }
        )
    clouds = dict(zip(sources, offers.text("cloud").tolist(), strict=True))
    for name, (rows_now, oldest) in sorted(counts.items()):
        if name in SOURCES:
            continue
        age = _days_since(oldest, now)
        rows.append(
            {
                "source": name,
                "cloud": _cloud_of(name, clouds),
                "state": "static",
                "last_success": oldest,
                "age": _age_text(age),
                "rows": rows_now,
                "oldest_as_of": oldest,
                "stale": _stale(oldest, now, freshness_days),
                "reason": "",
            }
        )
    return rows


def _cloud_of(price_source: str, clouds: dict[str, str]) -> str:
    from pricing.sources.status import price_source as head

    found = {cloud for source, cloud in clouds.items() if head(source) == price_source}
    return ",".join(sorted(found))


def parse_time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def _days_since(iso_date: str, now: datetime) -> float | None:
    try:
        return float((now.date() - datetime.fromisoformat(iso_date[:10]).date()).days)
    except ValueError:
        return None


def _stale(oldest: str, now: datetime, freshness_days: int) -> bool:
    age = _days_since(oldest, now) if oldest else None
    return age is not None and age > freshness_days


def _age_text(days: float | None) -> str:
    if days is None:
        return "-"
    if days < 1 / 24:
        return f"{max(days * 1440, 0):.0f} min"
    if days < 2:
        return f"{days * 24:.0f} h"
    return f"{days:.0f} d"
