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


def check_arguments(args: list[str]) -> None:
    """Refuse, before any command runs, a word no command takes: an empty one (`broker
    validate ""` would read the current folder, `--catalog ""` the default catalog) or
    one holding a NUL byte (no path or name can, and the system refuses it later with a
    traceback). The message names the flag the word was given to, or its position."""
    for number, word in enumerate(args):
        flag, given, value = word.partition("=") if word.startswith("--") else ("", "", word)
        if not given:
            flag, value = (args[number - 1] if number else ""), word
        if value and "\x00" not in value:
            continue
        what = "is empty" if not value else "holds a NUL byte"
        if flag.startswith("-") and (given or len(flag) > 1) and flag != "--":
            fail(f"{flag}: the value {what}", BAD_INPUT)
        fail(f"argument {number + 1} {what}", BAD_INPUT)


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
            why = _why_not(path) if path is not None else None
            if why is not None:
                fail(f"{label} file {why}{origin_note(label, flag)}", BAD_INPUT)
        view = load_offers(catalog_path, pools_path, overlays_path, live_pools=live_pools)
    except (SchemaError, ConfigError) as exc:
        fail(str(exc), BAD_INPUT)
    except ValueError as exc:
        # A broken pools or overlays file. Its error class is imported only now: its
        # module costs a plan that has neither file ~0.01 s.
        from pricing.userio.errors import UserInputError

        if isinstance(exc, UserInputError):
            fail(str(exc), BAD_INPUT)
        raise
    if not len(view.catalog.offers):  # a header and no rows: every plan would find nothing
        where = f"{view.catalog.path}{origin_note('catalog', catalog)}"
        fail(f"catalog {where}: a header and no offers (remove it or import one)", BAD_INPUT)
    return view


def _why_not(path: Path) -> str | None:
    """Why `path` cannot be read as a file ("not found: PATH", "PATH: is a FIFO ...",
    "PATH: cannot read: File name too long"), or None when it is a regular file."""
    from pricing.userio.reading import check_regular

    try:
        check_regular(path)
    except ValueError as exc:  # UserInputError
        return "not found: " + str(path) if "not found" in str(exc) else str(exc)
    return None


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


def price_day_flag(text: str, flag: str, today: date | None = None) -> date:
    """The day prices were read, written YYYY-MM-DD, from EARLIEST_PRICE_DAY to tomorrow
    (UTC; a day's grace for time zones); else exit 2 naming the flag. A price read in
    the future (`--as-of 9999-12-31`) would keep a catalog fresh for ever, and the
    other shapes Python also reads as dates (20260520, 2026-W21-3) are typos here."""
    import re

    from pricing.userio.bounds import EARLIEST_PRICE_DAY, latest_price_day

    latest = latest_price_day(today)
    shown = text if len(text) <= 40 else text[:40] + "..."
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError(text)
        day = date.fromisoformat(text)
    except ValueError:
        fail(f"{flag} must be a date such as 2026-05-20 (YYYY-MM-DD), not {shown!r}", BAD_INPUT)
    if not EARLIEST_PRICE_DAY <= day <= latest:
        fail(f"{flag} {day} is out of range: from {EARLIEST_PRICE_DAY} to {latest}", BAD_INPUT)
    return day


def number_flag(value: float, flag: str, low: float, high: float) -> float:
    """`value` when it is a finite number within [low, high]; else exit 2 naming the flag:
    NaN, inf, -1 or 1e20 given to a flag would otherwise reach the code behind it
    (an overflow, a traceback, a controller that never sleeps)."""
    import math

    if not (isinstance(value, int | float) and math.isfinite(value) and low <= value <= high):
        fail(f"{flag} must be a number from {low:g} to {high:g}, not {value!r}", BAD_INPUT)
    return value


def output_path(
    path: Path,
    flag: str,
    suffixes: tuple[str, ...] = (),
    inputs: tuple[Path | None, ...] = (),
) -> Path:
    """`path` when a command can write it there; else exit 2 naming `flag`, checked before
    the command does any work (a report computed, a cluster read, a file made): a
    directory, a FIFO or a device in its place, a file where one of its folders should
    be, a name the system refuses (too long), or, with `suffixes`, a kind of file the
    writer cannot make, or one of the command's `inputs` (the file it would read, then
    replace). Folders that do not exist yet are made by the write (atomic_write), and a
    file already there is replaced; a folder that refuses writes is found by the write
    itself (exit 1)."""
    import os
    import stat

    if suffixes and path.suffix.lower() not in suffixes:
        fail(f"{flag}: {path} must end in {', '.join(suffixes)}", BAD_INPUT)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        folder = next((p for p in path.absolute().parents if os.path.lexists(p)), None)
        if folder is not None and not folder.is_dir():
            fail(f"{flag}: cannot write {path}: {folder} is not a folder", BAD_INPUT)
        return path
    except OSError as exc:  # too long, a loop of links, a file where a folder should be
        fail(f"{flag}: cannot write {path}: {exc.strerror or exc}", BAD_INPUT)
    if stat.S_ISDIR(mode):
        fail(f"{flag}: {path} is a directory, not a file", BAD_INPUT)
    if not stat.S_ISREG(mode):
        fail(f"{flag}: {path} exists and is not a regular file (a FIFO, a device)", BAD_INPUT)
    for given in inputs:
        if given is not None and _same_file(path, given):
            fail(f"{flag}: {path} is also an input of this command ({given}): name a new "
                 "file (the input is kept)", BAD_INPUT)  # fmt: skip
    return path


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.samefile(other)
    except (OSError, ValueError):  # the other is missing, or no path the system takes
        return False
