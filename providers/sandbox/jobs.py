"""A sandbox job: its start-up script, with its workdir delivered
into the attempt's folder, and the container runtime of image jobs.

The runtime is the `container_runtime` setting (BROKER_CONTAINER_RUNTIME, a command
such as `podman --root /srv/pm`), else `podman`, else `docker`, whichever is on PATH
first. Without one, an image job is refused (at submit, and by the sandbox's launch):
never run on the host instead.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pricing.userio.settings import resolve_text
from providers.base import LaunchRequest, startup_script
from providers.errors import ProviderError
from providers.jobscript import CONTAINER_PREFIX, ContainerRuntime
from providers.sandbox.records import EXIT_CODE, NAME, SCRIPT, WORKDIR

RUNTIMES = ("podman", "docker")


def container_runtime() -> tuple[str, ...] | None:
    """The command that runs a container here, or None when there is none."""
    written = resolve_text("container_runtime")
    if written:
        return tuple(shlex.split(written))
    for name in RUNTIMES:
        if shutil.which(name):
            return (name,)
    return None


def no_runtime_reason(image: str) -> str:
    """The one line a refused image job gets."""
    return (
        f"run.image {image!r} needs a container runtime: the sandbox found neither podman "
        "nor docker on PATH (install one, set BROKER_CONTAINER_RUNTIME, or place the job "
        "on a cloud launched for real with BROKER_CLOUDS)"
    )


def container_name(attempt_id: str) -> str:
    """The name an attempt's container runs under (providers.jobscript gives it)."""
    return f"{CONTAINER_PREFIX}{attempt_id}"


def remove_container(runtime: Sequence[str], name: str) -> None:
    """Remove a container at once, running or not: a killed `podman run` leaves its
    container running (conmon is not in the job's process group)."""
    try:
        subprocess.run(
            [*runtime, "rm", "-f", "-t", "0", name], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        pass  # nothing more to do from here; the next terminate tries again


def write_script(request: LaunchRequest, run_dir: Path, runtime: Sequence[str] | None) -> Path:
    """Deliver the request's workdir into `run_dir` (a copy per attempt: the job may
    change it) and write its start-up script there; the script's path."""
    from providers.workdir import WorkdirError, deliver_workdir

    workdir = None
    if request.workdir_uri:
        try:
            workdir = str(deliver_workdir(request.workdir_uri, run_dir / WORKDIR))
        except WorkdirError as exc:
            raise ProviderError(NAME, f"cannot deliver the workdir: {exc}") from None
    script = run_dir / SCRIPT
    text = startup_script(
        request,
        exit_code_path=str(run_dir / EXIT_CODE),
        watch_notices=False,  # the sandbox signals its jobs itself
        workdir=workdir,
        containers=ContainerRuntime(tuple(runtime or ()), gpus=False),
    )
    script.write_text(text)
    return script
