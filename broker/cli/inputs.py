"""What several commands read from their flags, without typer: the manifests given
(`load_jobs`), the offers in force (`offers_in_force`), the catalog's banner, lists and
times in flags. `broker plan FILE` runs on these alone (broker.cli.direct); the flags
themselves are declared in broker.cli.options."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from broker.cli.exits import BAD_INPUT, fail

if TYPE_CHECKING:
    from broker.manifest.load import LoadResult
    from broker.offers import OffersInForce


class InputFormat(StrEnum):
    """What the files given to `plan` and `submit` are."""

    broker = "broker"
    skypilot = "skypilot"


def load_jobs(paths: list[Path], input_format: InputFormat, team: str | None) -> LoadResult:
    """The manifests of `paths` in the format given; every error in the result."""
    if input_format == InputFormat.skypilot:
        from broker.cli.importer import skypilot_manifests

        return skypilot_manifests(paths, team)
    if team is not None:
        fail("--team is for --format skypilot: a manifest names its own team", BAD_INPUT)
    from broker.manifest.load import load_manifests

    return load_manifests(paths)


def split_list(values: list[str] | None) -> tuple[str, ...]:
    """Accept both repeated flags and comma-separated values: `--cloud aws,gcp --cloud azure`."""
    return tuple(
        item.strip() for value in values or () for item in value.split(",") if item.strip()
    )


def offers_in_force(
    catalog: Path | None,
    pools: Path | None,
    overlays: Path | None,
    live_pools: Path | None = None,
) -> OffersInForce:
    """Resolve the three sources by the config precedence and load them; bad input exits 2.
    With the `auto_refresh_days` setting (off by default), a due user catalog is
    refreshed first (see `broker pricing refresh`). With `live_pools` (the pools'
    executors' work directory), pools show what their engines say is free now."""
    from broker.offers import load_offers
    from pricing.schema import SchemaError
    from pricing.userio.settings import ConfigError, origin_note, resolve, resolve_path

    if resolve("auto_refresh_days").value:  # checked here: the refresh module is not cheap
        from broker.cli.pricing_refresh import auto_refresh

        auto_refresh(catalog)
    try:
        catalog_path = resolve_path("catalog", catalog)
        pools_path = resolve_path("pools", pools, default_file="pools.yaml")
        overlays_path = resolve_path("overlays", overlays, default_file="overlays.yaml")
        for label, path, flag in (
            ("catalog", catalog_path, catalog),
            ("pools", pools_path, pools),
            ("overlays", overlays_path, overlays),
        ):
            if path is not None and not path.is_file():
                fail(f"{label} file {_why_not(path)}{origin_note(label, flag)}", BAD_INPUT)
        return load_offers(catalog_path, pools_path, overlays_path, live_pools=live_pools)
    except (SchemaError, ConfigError) as exc:
        fail(str(exc), BAD_INPUT)
    except ValueError as exc:
        # A broken pools or overlays file. Its error class is imported only now: its
        # module costs a plan that has neither file ~0.01 s.
        from pricing.userio.errors import UserInputError

        if isinstance(exc, UserInputError):
            fail(str(exc), BAD_INPUT)
        raise


def _why_not(path: Path) -> str:
    """Why `path` cannot be read as a file: "not found: PATH", "PATH: is a FIFO ..."."""
    from pricing.userio.reading import check_regular

    try:
        check_regular(path)
    except ValueError as exc:  # UserInputError
        return "not found: " + str(path) if "not found" in str(exc) else str(exc)
    return f"{path}: cannot be read"


def catalog_banner(view: OffersInForce, today: date, freshness_days: int) -> str:
    """One line saying which catalog is in use and how old its prices are."""
    catalog = view.catalog
    label = {"bundled": "bundled snapshot", "user": "user catalog", "file": "catalog"}[
        catalog.origin
    ]
    oldest, newest = catalog.as_of_range()
    age = catalog.age_days(today)
    when = f"prices as of {oldest}" + (f"..{newest}" if newest != oldest else "")
    stale = (
        f" (oldest {age} days old, over {freshness_days})"
        if age and age > freshness_days
        else (f" ({age} days old)" if age is not None else "")
    )
    extras = "".join(
        f" + {name} {path}"
        for name, path in (("pools", view.pools_path), ("overlays", view.overlays_path))
        if path
    )
    return f"{label} {catalog.path}: {when}{stale}{extras}"


def time_flag(text: str | None, flag: str, inclusive_day: bool = False) -> datetime | None:
    """A UTC date (midnight; the next one for an inclusive end day) or a time."""
    if not text:
        return None
    try:
        if len(text.strip()) == 10:
            day = datetime.strptime(text.strip(), "%Y-%m-%d").replace(tzinfo=UTC)
            return day + timedelta(days=1) if inclusive_day else day
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, OverflowError):  # 9999-12-31 has no next day
        fail(f"{flag}: not a date (YYYY-MM-DD) or time (ISO 8601): {text!r}", BAD_INPUT)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def number_flag(value: float, flag: str, low: float, high: float) -> float:
    """`value` when it is a finite number within [low, high]; else exit 2 naming the flag:
    NaN, inf, -1 or 1e20 given to a flag would otherwise reach the code behind it
    (an overflow, a traceback, a controller that never sleeps)."""
    import math

    if not (isinstance(value, int | float) and math.isfinite(value) and low <= value <= high):
        fail(f"{flag} must be a number from {low:g} to {high:g}, not {value!r}", BAD_INPUT)
    return value
