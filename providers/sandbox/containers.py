"""Which container runtime runs the sandbox's image jobs: the `container_runtime`
setting (BROKER_CONTAINER_RUNTIME, a command such as `podman --root /srv/pm`), else
`podman`, else `docker`, whichever is on PATH first. Without one, an image job is
refused (at submit, and by the sandbox's launch): never run on the host instead.
"""

from __future__ import annotations

import shlex
import shutil

from pricing.userio.settings import resolve_text

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
