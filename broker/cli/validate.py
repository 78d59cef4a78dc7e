"""`broker validate PATH...`: check job manifests without submitting them.

One line per file on stdout (`--output json|csv|markdown` through the renderer),
every error on stderr as file:line:column: field: message, a summary last.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.formats import count
from broker.cli.options import OutputOption
from broker.cli.render import Column, Output, render

if TYPE_CHECKING:
    from broker.manifest.load import LoadResult

FILE_COLUMNS = (
    Column("file", "file"),
    Column("status", "status"),
    Column("jobs", "jobs", count),
    Column("errors", "errors", count),
)


def validate(
    paths: list[Path] = typer.Argument(
        ...,
        help="Manifest files, or directories to search recursively for *.yaml and *.yml "
        "(there, YAML files that are not broker manifests are skipped).",
        show_default=False,
    ),
    output: Output = OutputOption,
) -> None:
    """Check job manifests: every error as file:line:column: field: message. Exit 2 on any error."""
    from broker.manifest.load import load_manifests

    result = load_manifests(paths)
    files = _file_rows(result)
    for error in result.errors:
        print(error.one_line(), file=sys.stderr)
    jobs = [
        {
            "name": m.spec.name,
            "team": m.spec.team,
            "file": str(m.path),
            "line": m.line,
            "digest": m.digest,
        }
        for m in result.manifests
    ]
    errors = [
        {
            "file": str(e.path),
            "line": e.line,
            "column": e.column,
            "field": e.field,
            "message": e.message,
        }
        for e in result.errors
    ]
    if output == Output.table:  # one plain line per file: a rich table of 10,000 rows takes seconds
        for row in files:
            print(f"{row['file']}: {_status(row)}")
    else:
        meta = {"jobs": jobs, "errors": errors}
        render(files, FILE_COLUMNS, output, json_key="files", meta=meta)
    ok_files = sum(1 for row in files if row["status"] == "ok")
    bad_files = sum(1 for row in files if row["status"] == "error")
    summary = _count(len(result.manifests), "job") + f" ok in {_count(ok_files, 'file')}"
    if result.skipped:
        summary += f", {len(result.skipped)} skipped (not manifests)"
    if result.errors:
        fail(
            f"{summary}; {_count(len(result.errors), 'error')} in {_count(bad_files, 'file')}",
            BAD_INPUT,
        )
    print(summary, file=sys.stderr)


def _file_rows(result: LoadResult) -> list[dict[str, object]]:
    """One row per file looked at (and per named path that gave an error of its own)."""
    jobs: dict[Path, int] = {}
    for manifest in result.manifests:
        jobs[manifest.path] = jobs.get(manifest.path, 0) + 1
    errors: dict[Path, int] = {}
    for error in result.errors:
        errors[error.path] = errors.get(error.path, 0) + 1
    skipped = set(result.skipped)
    paths = list(result.files) + [p for p in errors if p not in set(result.files)]
    rows = []
    for path in paths:
        status = "error" if path in errors else ("skipped" if path in skipped else "ok")
        rows.append(
            {
                "file": str(path),
                "status": status,
                "jobs": jobs.get(path, 0),
                "errors": errors.get(path, 0),
            }
        )
    return rows


def _status(row: dict[str, object]) -> str:
    if row["status"] == "ok":
        return f"ok ({_count(row['jobs'], 'job')})"  # type: ignore[arg-type]
    if row["status"] == "skipped":
        return "skipped (not a job manifest)"
    return _count(row["errors"], "error")  # type: ignore[arg-type]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
