"""`broker import skypilot TASK.yaml [-o FILE]`: a SkyPilot task YAML as a broker/v1 manifest.

The conversion is `broker.manifest.skypilot` (pure); this module reads the task,
measures the local folders it mounts, chooses the team (a SkyPilot task has none),
prints every warning on stderr, and checks the manifest as `broker validate` would
before writing it. `broker plan --format skypilot` and `broker submit --format
skypilot` run the same conversion in memory (`skypilot_manifests`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from broker.cli.exits import BAD_INPUT, fail
from broker.cli.inputs import output_path

if TYPE_CHECKING:
    from broker.manifest.load import LoadResult
    from broker.manifest.skypilot import ImportWarning
    from pricing.userio.errors import UserInputError

app = typer.Typer(
    help="Write broker/v1 manifests from jobs written for other tools (SkyPilot).",
    no_args_is_help=True,
)


@app.command("skypilot")
def skypilot(
    task: Path = typer.Argument(..., help="A SkyPilot task YAML file.", show_default=False),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Write the manifest to this file (default: stdout).",
        show_default=False,
    ),
    team: str = typer.Option(
        None,
        "--team",
        help="The job's team (a SkyPilot task has none; default: your user name).",
        show_default=False,
    ),
) -> None:
    """Convert a SkyPilot task to a broker/v1 manifest; every field not carried over is a
    warning on stderr. Exit 2 on a task that cannot be converted."""
    from broker.manifest.load import parse_manifest_text
    from pricing.userio.errors import UserInputError

    if out is not None:
        output_path(out, "--out", inputs=(task,))
    chosen = choose_team(team)
    manifest_dir = Path.cwd() / out.parent if out is not None else None
    try:
        text, warnings = import_task(task, chosen, manifest_dir)
    except UserInputError as exc:
        _bad(exc)
    _show(warnings)
    try:  # what `broker validate` would say of the file, before it is written
        parse_manifest_text(text, out if out is not None else _in_memory(task))
    except UserInputError as exc:
        where = Path(f"{out} (not written)") if out is not None else None
        _bad(exc, where)
    if out is None:
        sys.stdout.write(text)
        return
    from pricing.userio.atomic import atomic_write_text

    try:
        atomic_write_text(out, text)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}", BAD_INPUT)
    print(f"broker: wrote {out} ({len(warnings)} warning(s))", file=sys.stderr)


def import_task(
    task: Path, team: str, manifest_dir: Path | None
) -> tuple[str, tuple[ImportWarning, ...]]:
    """A task file's manifest as YAML text, and the warnings; UserInputError on bad input."""
    from broker.manifest.skypilot import convert_task, to_yaml
    from pricing.userio.errors import UserInputError
    from pricing.userio.yaml_reader import parse_yaml_documents, read_yaml_text

    documents = [d for d in parse_yaml_documents(read_yaml_text(task), task) if d.data is not None]
    if not documents:
        raise UserInputError(task, 0, 0, "", "no SkyPilot task in this file")
    if len(documents) > 1:
        raise documents[1].error(
            (), "a SkyPilot pipeline (several tasks in one file): import each task on its own"
        )
    converted = convert_task(
        documents[0], team=team, paths_from=Path.cwd(), manifest_dir=manifest_dir, size_of=size_gb
    )
    return to_yaml(converted, str(task)), converted.warnings


def skypilot_manifests(paths: list[Path], team: str | None) -> LoadResult:
    """The manifests of SkyPilot task files, converted in memory (warnings on stderr);
    every error of every task in the result, as `load_manifests` gives them."""
    from broker.manifest.load import LoadResult, load_texts
    from pricing.userio.errors import UserInputError

    chosen = choose_team(team)
    texts: list[tuple[str, Path]] = []
    errors: list[UserInputError] = []
    for path in paths:
        if path.is_dir():
            errors.append(UserInputError(path, 0, 0, "", "give SkyPilot task files, not a folder"))
            continue
        try:
            text, warnings = import_task(path, chosen, None)
        except UserInputError as exc:
            errors.extend(_alone(error) for error in exc.errors)
            continue
        _show(warnings)
        texts.append((text, _in_memory(path)))
    loaded = load_texts(texts)
    return LoadResult(loaded.manifests, [*errors, *loaded.errors], [], list(paths))


def choose_team(team: str | None) -> str:
    """`--team`, checked; else the user's name as a broker name, said on stderr."""
    import getpass

    from broker.manifest.skypilot import label

    if team is not None:
        if label(team) != team:
            message = f"--team {team!r} is not a name: use lower-case letters, digits and '-'"
            fail(message, BAD_INPUT)
        return team
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = ""
    chosen = label(user)
    if not chosen:
        fail("a SkyPilot task has no team: give one with --team", BAD_INPUT)
    print(
        f"broker: note: team: a SkyPilot task has no team: the job's team is {chosen!r} "
        "(your user name); give --team to choose",
        file=sys.stderr,
    )
    return chosen


def size_gb(path: Path) -> float | None:
    """Size in GB of a local file or folder (symbolic links not followed); None when absent."""
    import os

    try:
        if not path.is_dir():
            return round(path.stat().st_size / 1e9, 3) if path.is_file() else None
        total = 0
        for root, _dirs, names in os.walk(path):
            for name in names:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
        return round(total / 1e9, 3)
    except OSError:
        return None


def _in_memory(task: Path) -> Path:
    """How a task's converted manifest is named in errors: not its own lines."""
    return Path(f"{task} (as broker/v1)")


def _show(warnings: tuple[ImportWarning, ...]) -> None:
    for warning in warnings:
        print(warning, file=sys.stderr)


def _alone(error: UserInputError, path: Path | None = None) -> UserInputError:
    """One error without the ones collected with it (optionally named by another path)."""
    from pricing.userio.errors import UserInputError

    where = error.path if path is None else path
    return UserInputError(where, error.line, error.column, error.field, error.message)


def _bad(exc: UserInputError, path: Path | None = None) -> NoReturn:
    for error in exc.errors:
        print(_alone(error, path).one_line(), file=sys.stderr)
    fail(f"{len(exc.errors)} error(s); nothing imported", BAD_INPUT)
