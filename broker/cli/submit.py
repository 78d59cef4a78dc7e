"""`broker submit` and `broker rerun`: put jobs in the queue, and run finished ones again.

Each run of a job is its own job id, grouped under its team/name (`broker jobs`).
Submitting an unchanged manifest is a no-op; when its job has finished, the row says so
and names `--rerun`; a changed manifest while a run is live waits for it (said so).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.cli.exits import BAD_INPUT, FAILED, fail
from broker.cli.formats import count
from broker.cli.options import (
    CatalogOption,
    FormatOption,
    InputFormat,
    OutputOption,
    OverlaysOption,
    PoolsOption,
    TeamOption,
    load_jobs,
)
from broker.cli.render import Column, Output, render
from broker.cli.session import StateOption, enabled_clouds, state_path

if TYPE_CHECKING:
    from broker.state import SubmitResult

COLUMNS = (
    Column("job", "job id", keep=3),
    Column("team", "team", keep=2),
    Column("name", "name", keep=3),
    Column("run", "run", count),
    Column("version", "version", count),
    Column("result", "submitted", keep=3),
)


def submit(
    paths: list[Path] = typer.Argument(None, help="Manifest files or directories (recursive)."),
    rerun: list[Path] = typer.Option(
        None,
        "--rerun",
        help="Manifests (files or directories) whose finished jobs run again from the same "
        "version (a new run each; new jobs are submitted as usual).",
        show_default=False,
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan without enqueueing."),
    output: Output = OutputOption,
    state: str = StateOption,
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    input_format: InputFormat = FormatOption,
    team: str = TeamOption,
) -> None:
    """Validate manifests and enqueue them; prints job ids. An unchanged manifest is a
    no-op (a finished job runs again with --rerun); a changed one is a new version."""
    paths, again = list(paths or ()), list(rerun or ())
    if not paths and not again:
        fail("give manifest files or directories (or --rerun PATH)", BAD_INPUT)
    loaded = load_jobs([*paths, *again], input_format, team)
    if loaded.errors:
        for error in loaded.errors:
            print(str(error), file=sys.stderr)
        fail(f"{len(loaded.errors)} error(s) in manifests; nothing submitted", BAD_INPUT)
    if dry_run:
        from broker.cli.plan_run import plan_manifests

        plan_manifests(loaded.manifests, 1, False, output, catalog, pools, overlays, state=state)
        return
    from broker.cli.statefile import check_state, opened_store
    from broker.state import RunInFlight
    from broker.submit import prepare

    path = state_path(state)
    check_state(path, "write")  # refused before anything is packed beside it
    ready, cannot = prepare(loaded.manifests, path, enabled_clouds())
    if cannot:
        for error in cannot:
            print(error, file=sys.stderr)
        fail(f"{len(cannot)} job(s) cannot be submitted; nothing submitted", BAD_INPUT)
    rerun_files = _files(again)
    refused: list[str] = []
    rows = []
    with opened_store(path, "write") as store:
        for manifest in _progress(ready):
            result = store.submit(manifest.spec, manifest.text, manifest.digest)
            if _finished_unchanged(result) and str(manifest.path.resolve()) in rerun_files:
                try:
                    result = store.rerun(result.job_id)
                except RunInFlight as exc:  # another controller queued one meanwhile
                    refused.append(str(exc))
            rows.append(_row(manifest.spec.team, manifest.spec.name, result))
    render(rows, COLUMNS, output, json_key="jobs", empty="no job manifest given")
    _notes(rows)
    if refused:
        fail("; ".join(refused), FAILED)


def rerun(
    jobs: list[str] = typer.Argument(..., help="Jobs: id, team/name or name (its newest run)."),
    output: Output = OutputOption,
    state: str = StateOption,
) -> None:
    """Queue a new run of finished jobs from the same manifest version: each a new job id
    under the same team/name (`broker jobs` groups them)."""
    from broker.cli.jobref import find_jobs
    from broker.cli.statefile import opened_store
    from broker.state import RunInFlight

    refused: list[str] = []
    rows = []
    with opened_store(state_path(state), "update") as store:
        for job in find_jobs(store, jobs):
            try:
                result = store.rerun(job.id)
            except RunInFlight as exc:
                refused.append(str(exc))
                continue
            rows.append(_row(job.team, job.name, result) | {"result": f"run of {job.id}"})
    if rows:
        render(rows, COLUMNS, output, json_key="jobs")
    if refused:
        fail("; ".join(refused), FAILED)


def _files(paths: list[Path]) -> set[str]:
    """The manifest files under `paths` (as `load_manifests` finds them), resolved."""
    from broker.manifest.load import find_manifest_files

    return {str(path.resolve()) for path in find_manifest_files(paths)}


def _finished_unchanged(result: SubmitResult) -> bool:
    from broker.state import TERMINAL

    return not result.changed and result.state in TERMINAL and not result.waiting


def _row(team: str, name: str, result: SubmitResult) -> dict[str, Any]:
    row = {"job": result.job_id, "team": team, "name": name, "run": result.run}
    return row | {"version": result.version, "result": _said(result)}


def _said(result: SubmitResult) -> str:
    """What happened, in the words of the table (and of --output json's `result`)."""
    if result.created:
        if result.run == 1:
            return "new"
        return "new run"
    if not result.changed:
        if result.waiting:
            return "unchanged (waiting for the live attempt)"
        if _finished_unchanged(result):
            return f"unchanged ({result.state}; --rerun runs it again)"
        return "unchanged"
    if result.waiting:
        return f"new version (waits: the run is {result.state})"
    return "new version"


def _notes(rows: list[dict[str, Any]]) -> None:
    """One line on stderr for what a reader might not expect: finished jobs left alone,
    versions that wait."""
    finished = [f"{r['team']}/{r['name']}" for r in rows if "--rerun" in str(r["result"])]
    if finished:
        print(
            f"{len(finished)} job(s) finished with this version ({', '.join(finished[:3])}"
            f"{', ...' if len(finished) > 3 else ''}): `broker submit --rerun PATH` or "
            "`broker rerun JOB` runs them again",
            file=sys.stderr,
        )
    for row in rows:
        if "waits" in str(row["result"]):
            print(
                f"{row['team']}/{row['name']}: version {row['version']} waits for the live "
                "attempt to end, then runs",
                file=sys.stderr,
            )


def _progress(manifests: list) -> Any:
    """The manifests, with a progress bar on a terminal when there are many."""
    from broker.cli.progress import progress

    return progress(manifests, "submitting", minimum=200)
