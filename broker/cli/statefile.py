"""How a command opens the state file: the one place that decides what reading and
writing commands do with a missing, foreign, damaged, newer or read-only state file.

- nothing there: a read command (queue, status, logs, cost-report) gives an empty
  result with one note on stderr and exits 0, creating nothing; a write command
  creates the file; an update command (cancel, rerun, sandbox interrupt: it acts on
  jobs already there) is refused (exit 2: there is no job to act on), creating nothing;
- a broker state file: opened; in a read-only location a read command opens it
  read-only (no WAL switch, nothing created) and a write command is refused (exit 1);
- not a broker state file, a damaged one, one written by a newer broker: refused
  with one line (exit 2) naming the file (and the schema version it needs), unchanged.

See docs/state.md ("Opening a state file").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from broker.cli.exits import BAD_INPUT, FAILED, fail

if TYPE_CHECKING:
    from broker.state import StateStore
    from broker.state.files import Examined
    from broker.state.location import StateLocation

Mode = Literal["read", "write", "update"]  # update: write a state that must exist


def state_path(flag: str | Path | None) -> StateLocation:
    """The state in force: `--state`, else the `state` setting (BROKER_STATE, broker.toml),
    else the default file; a `postgresql://` URL is a database, anything else a path."""
    from broker.state import default_state_path
    from broker.state.location import parse_location
    from pricing.userio.settings import ConfigError, check_no_nul, resolve

    setting = resolve("state", flag)
    if isinstance(setting.value, str | Path) and str(setting.value):
        return parse_location(check_no_nul(setting, "state"))
    if setting.value is not None:
        raise ConfigError(f"{setting.origin}: state: expected a path or URL, got {setting.value!r}")
    return default_state_path()


def check_state(path: StateLocation, mode: Mode) -> Examined | None:
    """What is at `path`, when a command in `mode` may use it; else the command stops
    with one line (a command checks this before it writes anything beside the file).
    None for a database: it is checked when it is opened."""
    from broker.state.files import StateFileError, examine
    from broker.state.location import DatabaseUrl

    if isinstance(path, DatabaseUrl):
        return None

    try:
        found = examine(path)
    except StateFileError as exc:
        fail(str(exc), BAD_INPUT)
    if mode != "read" and not found.writable:
        where = f"the state file {path} is in a read-only location"
        fail(f"{where}: this command writes it", FAILED)
    return found


@contextmanager
def opened_store(
    path: StateLocation, mode: Mode, *, note_missing: bool = True
) -> Iterator[StateStore | None]:
    """The store at `path`, opened for `mode`; None for a read of a missing (or empty)
    file, after a one-line note (none with `note_missing` off: a command to which the
    state is only an optional input, such as history for `broker plan`). A refusal,
    SQLite finding the file damaged while the command uses it, or a database that cannot
    be reached, stops the command with one line (codes in the table above)."""
    import sqlite3

    from broker.clock import SystemClock
    from broker.state import SchemaTooNew, StateError, StateStore
    from broker.state.backend import StateUnavailable
    from broker.state.files import ReadOnlyState, StateFileError

    found = check_state(path, mode)
    try:
        if found is None:  # a database: created and migrated by any command, as a file is
            store = StateStore.open(path, SystemClock())
        elif mode == "update" and found.kind in ("missing", "empty"):
            fail(f"no state file at {path}: nothing was submitted, so no job to act on", BAD_INPUT)
        elif mode == "read" and found.kind in ("missing", "empty"):
            if note_missing:
                note = f"broker: no state file at {path} yet: nothing was submitted"
                print(note, file=sys.stderr)
            store = None
        else:
            read_only = mode == "read" and not found.writable
            store = StateStore.open(path, SystemClock(), read_only=read_only)
    except ReadOnlyState as exc:
        fail(str(exc), FAILED)
    except (StateFileError, SchemaTooNew) as exc:
        fail(str(exc), BAD_INPUT)
    except StateError as exc:  # unreachable, no driver, a schema to migrate first
        fail(str(exc), FAILED)
    if store is None:
        yield None
        return
    try:
        yield store
    except StateUnavailable as exc:  # the database went away while the command ran
        fail(str(exc), FAILED)
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc):
            fail(f"the state file {path} cannot be written here: {exc}", FAILED)
        raise
    except sqlite3.DatabaseError as exc:  # found while reading: "database disk image is malformed"
        fail(f"the state file {path} is damaged ({exc}); it was not changed", BAD_INPUT)
    finally:
        store.close()


@contextmanager
def reading_store(flag: str | None, *, note_missing: bool = True) -> Iterator[StateStore | None]:
    """The state store for a command that only reads it (`jobs`, `status`): None when
    there is no state file yet (nothing is created; a note on stderr unless
    `note_missing` is off), read-only in a read-only place."""
    with opened_store(state_path(flag), "read", note_missing=note_missing) as store:
        yield store
