"""`broker state`: the state store itself. `broker state migrate --from state.db --to
postgresql://...` moves a single user's history into a team's database (see
docs/state.md, "PostgreSQL")."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, FAILED, fail

app = typer.Typer(help="The state store: copy a state file into a team's PostgreSQL database.")


@app.command("migrate")
def migrate(
    source: Path = typer.Option(..., "--from", help="The state file to copy (SQLite)."),
    target: str = typer.Option(..., "--to", help="The database: postgresql://user@host:port/db"),
    into_nonempty: bool = typer.Option(
        False, "--into-nonempty", help="Copy even when the database already has jobs."
    ),
) -> None:
    """Copy every job, version, attempt, instance, event and ledger line of a state file
    into a PostgreSQL database, exactly (ids, times and money as they were), in one
    transaction. A database that already has jobs is refused unless --into-nonempty."""
    from broker.cli.statefile import check_state
    from broker.clock import SystemClock
    from broker.state import StateError
    from broker.state.copy import TargetNotEmpty, copy_state
    from broker.state.files import StateFileError
    from broker.state.location import DatabaseUrl, parse_location
    from broker.state.schema import SchemaTooNew

    where = parse_location(target)
    if not isinstance(where, DatabaseUrl):
        fail(f"--to must be a postgresql:// URL, not {target}", BAD_INPUT)
    found = check_state(source.expanduser(), "read")
    if found is None or found.kind in ("missing", "empty"):
        fail(f"no state file at {source}", BAD_INPUT)
    try:
        copied = copy_state(source.expanduser(), where, SystemClock(), into_nonempty=into_nonempty)
    except TargetNotEmpty as exc:
        fail(str(exc), FAILED)
    except (SchemaTooNew, StateFileError) as exc:  # the file given is the fault: unchanged
        fail(str(exc), BAD_INPUT)
    except StateError as exc:
        fail(str(exc), FAILED)
    rows = ", ".join(f"{n} {table}" for table, n in copied.rows.items())
    print(f"copied {source} into {where.shown}: {rows}", file=sys.stderr)
