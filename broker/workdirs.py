"""Workdirs at submit: each manifest's `run.workdir` packed (`providers.workdir`) into
the archive folder beside the state file, the archive named in the spec
(`RunSpec.workdir_archive`), and its digest folded into the version's digest.

So a job runs the files as they were when it was submitted: every attempt, a resume
after a reclaim included, gets the same archive, whatever the folder holds later;
and `broker submit` of an unchanged manifest whose files changed is a new version,
as a changed manifest is.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.manifest.load import Manifest
    from broker.state.location import StateLocation
    from providers.workdir import PackedWorkdir


def archives_dir(state_path: StateLocation) -> Path:
    """Where the packed workdirs of a state file live: `<state>-workdirs/` beside it (a
    database's: beside its `local_anchor`)."""
    from broker.state.location import local_anchor

    anchor = local_anchor(state_path)
    return anchor.parent / f"{anchor.stem}-workdirs"


def limit_bytes() -> int:
    """The most a workdir may hold (the `workdir_limit_mb` setting), in bytes; a
    ConfigError (exit 2, naming where it was set) for a value that is no size."""
    from pricing.userio.settings import ConfigError, origin_note, resolve
    from providers.workdir import DEFAULT_LIMIT_MB

    value = resolve("workdir_limit_mb").value
    try:
        megabytes = float(value if value is not None else DEFAULT_LIMIT_MB)
    except (TypeError, ValueError):
        megabytes = float("nan")
    if not 0 <= megabytes <= 10_000_000:  # NaN and inf too: int() of them is a traceback
        where = origin_note("workdir_limit_mb")
        raise ConfigError(f"workdir_limit_mb: {value!r} is not a number of MB{where}")
    return int(megabytes * 1_000_000)


def pack_manifests(manifests: list[Manifest], into: Path) -> tuple[list[Manifest], list[str]]:
    """The manifests with their workdirs packed into `into`, and one error line per
    workdir that cannot be (`file:line: run.workdir: ...`). A folder shared by several
    jobs is packed once."""
    from providers.workdir import WorkdirError, pack_workdir

    limit = limit_bytes()
    packed: dict[str, PackedWorkdir | str] = {}  # folder -> archive, or its error
    out, errors = [], []
    for manifest in manifests:
        folder = manifest.spec.run.workdir
        if folder is None or manifest.spec.run.workdir_archive:
            out.append(manifest)
            continue
        if folder not in packed:
            try:
                packed[folder] = pack_workdir(Path(folder), into, limit)
            except WorkdirError as exc:
                packed[folder] = str(exc)
        done = packed[folder]
        if isinstance(done, str):
            errors.append(f"{manifest.path}:{manifest.line}: run.workdir: {done}")
            continue
        out.append(with_archive(manifest, done))
    return out, errors


def with_archive(manifest: Manifest, packed: PackedWorkdir) -> Manifest:
    """`manifest` naming its packed workdir, its digest the document's and the files'."""
    spec = manifest.spec
    run = replace(spec.run, workdir_archive=packed.uri)
    digest = hashlib.sha256(f"{manifest.digest}+workdir:{packed.digest}".encode()).hexdigest()
    return replace(manifest, spec=replace(spec, run=run), digest=digest)
