"""The parts of a job's start-up script after its exports (`providers.base.startup_script`
puts them together): the workdir fetched and entered, `setup` once, then the command or
the container image.

- **Workdir**: `BROKER_WORKDIR` is where the job runs. A provider that delivered the
  archive itself (the sandbox, with `providers.workdir.deliver_workdir`) names the
  folder; otherwise the script fetches the archive (`LaunchRequest.workdir_uri`): a
  `file://` path is copied, `s3://` with `aws s3 cp`, `gs://` with `gcloud storage cp`,
  `az://` with `az storage blob download --auth-mode login` after `az login
  --identity`: always with the machine's own credentials (an instance profile, a
  service account, a managed identity), so no secret is ever in the script. The
  archive's sha256 (its name) is checked before it is unpacked, into
  `${BROKER_WORKDIR:-${TMPDIR:-/tmp}/broker/<attempt>/workdir}`.
- **Setup** runs once, in the workdir, before the command; its failure is the job's.
- **Images**: an image that names a machine image (AWS `ami-…`, a GCE image path) boots
  the VM; any other is a container image. A container job runs under the container
  runtime (`docker` on a cloud VM, with `--gpus all` when the job has GPUs), with the
  job's variables passed by name (`-e NAME`), host networking and IPC, and the workdir
  and a local checkpoint folder mounted at their own paths. Without a command the
  image's entrypoint runs; with one, `/bin/sh -c` (as the entrypoint) runs setup and
  command inside it.
  Nothing of an image job ever runs on the host.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from providers.base import LaunchRequest

# Images that boot a VM rather than run in it: an AMI, a GCE image (path or URL).
MACHINE_IMAGE = re.compile(
    r"ami-[0-9a-f]{8,17}|(https://[\w.-]+/compute/v1/)?projects/[\w.:-]+/global/images/.+"
)
_ARCHIVE = re.compile(r"([0-9a-f]{64})\.tar\.gz")
CONTAINER_PREFIX = "broker-"  # a container is named after its attempt


@dataclass(frozen=True)
class ContainerRuntime:
    """How a machine runs container images: the command (`docker`, `podman --root X`)
    and whether it hands the host's GPUs to the container."""

    command: tuple[str, ...] = ("docker",)
    gpus: bool = True


CLOUD_RUNTIME = ContainerRuntime()


def container_image(request: LaunchRequest) -> str:
    """The request's container image ("" when it has none, or names a machine image)."""
    image = request.image
    return "" if not image or MACHINE_IMAGE.fullmatch(image) else image


def workdir_lines(request: LaunchRequest, delivered: str | None) -> list[str]:
    """Export BROKER_WORKDIR, fetch and unpack the archive unless `delivered` names the
    folder it is already in, and enter it (a job without a workdir: nothing)."""
    if not request.workdir_uri:
        return []
    if delivered is not None:
        return [f"export BROKER_WORKDIR={shlex.quote(delivered)}", 'cd "$BROKER_WORKDIR" || exit 1']
    found = _ARCHIVE.fullmatch(request.workdir_uri.rpartition("/")[2])
    if found is None:
        raise ValueError(f"workdir_uri {request.workdir_uri!r} is not a packed workdir")
    default = f"${{TMPDIR:-/tmp}}/broker/{request.attempt_id}/workdir"
    return [
        f'export BROKER_WORKDIR="${{BROKER_WORKDIR:-{default}}}"',
        'broker_archive="$BROKER_WORKDIR.tar.gz"',
        'mkdir -p "$BROKER_WORKDIR" || exit 1',
        f"{fetch_command(request.workdir_uri)} || {{",
        f"  echo 'broker: cannot fetch the workdir {request.workdir_uri}' >&2; exit 1; }}",
        f'echo "{found.group(1)}  $broker_archive" | sha256sum -c --status || {{',
        "  echo 'broker: the workdir archive does not match its sha256' >&2; exit 1; }",
        'tar -xzf "$broker_archive" -C "$BROKER_WORKDIR" --no-same-owner || exit 1',
        'rm -f "$broker_archive"',
        'cd "$BROKER_WORKDIR" || exit 1',
    ]


def fetch_command(uri: str) -> str:
    """The shell command that copies the archive at `uri` to "$broker_archive" with the
    machine's own credentials (module docstring). ValueError for another scheme."""
    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        from urllib.parse import unquote

        return f'cp {shlex.quote(unquote(rest.removeprefix("localhost")))} "$broker_archive"'
    if scheme == "s3":
        return f'aws s3 cp --only-show-errors {shlex.quote(uri)} "$broker_archive"'
    if scheme == "gs":
        return f'gcloud storage cp --quiet {shlex.quote(uri)} "$broker_archive"'
    if scheme == "az":
        container, _, name = rest.partition("/")
        account = _azure_account()
        return (
            "az login --identity --output none && az storage blob download --auth-mode login "
            f"--account-name {shlex.quote(account)} --container-name {shlex.quote(container)} "
            f'--name {shlex.quote(name)} --file "$broker_archive" --output none'
        )
    raise ValueError(f"no way to fetch a workdir from {uri!r}")


def job_body(request: LaunchRequest, runtime: ContainerRuntime) -> str:
    """What runs once the workdir is entered: setup then the command, or the container."""
    image = container_image(request)
    if not image:
        return "\n".join((*_setup_lines(request.setup), request.command))
    return container_command(request, image, runtime)


def container_command(request: LaunchRequest, image: str, runtime: ContainerRuntime) -> str:
    """`<runtime> run ...` for an image job (module docstring)."""
    from providers.base import job_environment

    args = [*runtime.command, "run", "--rm", "--name", f"{CONTAINER_PREFIX}{request.attempt_id}"]
    args += ["--network", "host", "--ipc", "host"]
    if runtime.gpus and request.accelerator_count > 0:
        args += ["--gpus", "all"]
    names = [name for name, _ in request.env] + [name for name, _ in job_environment(request)]
    if request.workdir_uri:
        names.append("BROKER_WORKDIR")
    if request.nodes > 1:  # a gang member's rank environment (providers.gangscript)
        from providers.gang import rank_environment

        names += list(rank_environment(0, ("head",), 0))
    for name in names:
        args += ["-e", name]
    quoted = [shlex.quote(a) for a in args]
    mounts = []
    if request.workdir_uri:
        mounts.append('-v "$BROKER_WORKDIR:$BROKER_WORKDIR" -w "$BROKER_WORKDIR"')
    for folder in dict.fromkeys((request.checkpoint_dir, request.resume_from)):
        if folder.startswith("/"):
            mounts.append(f"-v {shlex.quote(folder)}:{shlex.quote(folder)}")
    inner = "\n".join((*_setup_lines(request.setup), request.command)).strip()
    if inner:  # the command replaces the entrypoint, whatever the image's is
        mounts.append("--entrypoint /bin/sh")
    line = " ".join([*quoted, *mounts, shlex.quote(image)])
    if inner:
        line += f" -c {shlex.quote(inner)}"
    return line


def _setup_lines(setup: str) -> list[str]:
    if not setup:
        return []
    return [
        f"/bin/sh -c {shlex.quote(setup)} || {{",
        '  broker_status=$?; echo "broker: setup failed with status $broker_status" >&2',
        '  exit "$broker_status"; }',
    ]


def _azure_account() -> str:
    import os

    account = os.environ.get("AZURE_STORAGE_ACCOUNT", "")
    if not account:
        raise ValueError("an az:// workdir needs AZURE_STORAGE_ACCOUNT (the storage account)")
    return account
