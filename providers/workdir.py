"""A job's working directory (`run.workdir`): packed once at submit, delivered to every
attempt before its setup runs.

- **Packing** (`pack_workdir`): the folder's files as one gzip'd tar named by its own
  sha256 (`<digest>.tar.gz`), so the same files always pack to the same archive and
  name. Inside a git work tree only what git would keep goes in (`git ls-files -co
  --exclude-standard`: tracked files and untracked ones not ignored by `.gitignore`);
  elsewhere (and in a folder git ignores as a whole, such as an installed package
  inside a virtual environment) every file. Symbolic links stay links; times are set
  to 1980-01-01 and owners to root, so only contents, names and modes matter. Over
  `limit` bytes (of files, before compression) is a `WorkdirError` naming the folder,
  its size and the limit.
- **Delivery** (`deliver_workdir`): the archive, from any URI the ObjectStore reads,
  unpacked into a folder with tar's `data` filter (no absolute paths, no `..`, no
  devices). The sandbox calls it for each attempt, and so can any executor that runs
  jobs on this machine. A cloud VM fetches the archive itself: the adapter uploads it
  first (`stage_workdir`, to the `<cloud>_staging_uri` prefix) and the start-up script
  (`providers.jobscript`) copies it from there with the instance's own credentials,
  checks its sha256 and unpacks it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from providers.base import LaunchRequest

DEFAULT_LIMIT_MB = 100
ARCHIVE_SUFFIX = ".tar.gz"
FIXED_MTIME = 315532800  # 1980-01-01T00:00:00Z: the oldest time a zip file can hold
STAGING_SCHEMES = {"aws": "s3", "gcp": "gs", "azure": "az"}  # each cloud's object store
_ARCHIVE_NAME = re.compile(r"([0-9a-f]{64})\.tar\.gz")


class WorkdirError(ValueError):
    """A workdir that cannot be packed or delivered (too large, unreadable, corrupt)."""


@dataclass(frozen=True)
class PackedWorkdir:
    """A packed workdir: the archive, its sha256 and what went in."""

    folder: Path
    archive: Path
    digest: str
    files: int
    size: int  # bytes of the files packed, before compression

    @property
    def uri(self) -> str:
        """The archive as a file:// URI (what a launch request carries)."""
        return self.archive.as_uri()


def workdir_files(folder: Path) -> list[str]:
    """The files and links under `folder` to pack, relative and sorted (module docstring)."""
    listed = _git_files(folder)
    if listed is not None:
        return listed
    names = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        base = Path(root)
        for name in [*files, *(d for d in dirs if (base / d).is_symlink())]:
            names.append(str((base / name).relative_to(folder)))
    return sorted(names)


def pack_workdir(folder: Path, into: Path, limit: int) -> PackedWorkdir:
    """Pack `folder` into `into/<sha256>.tar.gz` (kept if already there); WorkdirError
    when its files are over `limit` bytes or one cannot be read."""
    folder = Path(folder).resolve()
    names = workdir_files(folder)
    size = 0
    for name in names:
        path = folder / name
        if path.is_symlink():
            _check_link(folder, name)
        else:
            size += path.stat().st_size
    if size > limit:
        raise WorkdirError(
            f"{folder} holds {_mb(size)} of files to deliver, over the {_mb(limit)} limit "
            "(in a git work tree, .gitignore'd files are left out; the limit is "
            "BROKER_WORKDIR_LIMIT_MB)"
        )
    into.mkdir(parents=True, exist_ok=True)
    handle, part = tempfile.mkstemp(dir=into, prefix=".pack-", suffix=ARCHIVE_SUFFIX)
    digest = hashlib.sha256()
    try:
        with os.fdopen(handle, "wb") as raw:
            hashing = _Hashing(raw, digest)
            with gzip.GzipFile(filename="", mode="wb", fileobj=hashing, mtime=0) as zipped:
                with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for name in names:
                        _add(tar, folder, name)
        target = into / f"{digest.hexdigest()}{ARCHIVE_SUFFIX}"
        os.replace(part, target)
    except OSError as exc:
        raise WorkdirError(f"{folder}: cannot pack: {exc}") from None
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return PackedWorkdir(folder, target, digest.hexdigest(), len(names), size)


def archive_digest(uri: str) -> str:
    """The sha256 an archive is named by (`.../<sha256>.tar.gz`); WorkdirError otherwise."""
    found = _ARCHIVE_NAME.fullmatch(uri.rstrip("/").rpartition("/")[2])
    if found is None:
        raise WorkdirError(f"{uri}: not a packed workdir (<sha256>{ARCHIVE_SUFFIX})")
    return found.group(1)


def deliver_workdir(uri: str, target: Path) -> Path:
    """Unpack the archive at `uri` (file:// or a cloud URI) into `target` (made; files
    already there are replaced), after checking its sha256. Returns `target`."""
    from providers.storage import ObjectStore

    expected = archive_digest(uri)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".workdir-") as scratch:
        local = Path(scratch) / "archive.tar.gz"
        if uri.startswith("file://"):
            from providers.storage import parse_uri

            shutil.copyfile(parse_uri(uri).key, local)
        else:
            ObjectStore().get(uri, local)
        if _sha256(local) != expected:
            raise WorkdirError(f"{uri}: the archive does not match its sha256")
        try:
            with tarfile.open(local, mode="r:gz") as tar:
                tar.extractall(target, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise WorkdirError(f"{uri}: cannot unpack: {exc}") from None
    return target


def stage_workdir(cloud: str, request: LaunchRequest, staging: str | None) -> LaunchRequest:
    """`request` with its workdir archive uploaded under the `staging` prefix of the
    cloud's object store (once: an archive is named by its contents) and named there,
    for the VM to fetch with its own credentials. InvalidRequest when the job has a
    workdir and `staging` is not a prefix of that cloud's store."""
    from dataclasses import replace

    from providers.errors import InvalidRequest
    from providers.storage import ObjectStore, parse_uri

    if not request.workdir_uri.startswith("file://"):
        return request  # no workdir, or already where the VM fetches it
    scheme = STAGING_SCHEMES[cloud]
    setting = f"BROKER_{cloud.upper()}_STAGING_URI"
    if not staging:
        raise InvalidRequest(
            cloud,
            f"the job has a run.workdir: set {setting} to a {scheme}:// prefix the "
            "instances can read (their instance role or identity), where it is uploaded",
        )
    prefix = parse_uri(staging).as_directory()
    if prefix.scheme != scheme:
        raise InvalidRequest(cloud, f"{setting} {staging!r}: {cloud} fetches from {scheme}://")
    local = parse_uri(request.workdir_uri)
    target = prefix.join(local.key.rpartition("/")[2])
    store = ObjectStore()
    if not store.exists(target):
        store.put(Path(local.key), target)
    return replace(request, workdir_uri=str(target))


def _git_files(folder: Path) -> list[str] | None:
    """What git would keep of `folder`, or None when it is not inside a work tree, git is
    missing, or git ignores the folder as a whole."""
    git = shutil.which("git")
    if git is None:
        return None

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [git, "-C", str(folder), *args], capture_output=True, timeout=60, check=False
        )

    inside = run("rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != b"true":
        return None
    if run("check-ignore", "-q", ".").returncode == 0:
        return None  # e.g. an installed package in a venv inside a repository
    listed = run("ls-files", "-co", "--exclude-standard", "-z", "--", ".")
    if listed.returncode != 0:
        return None
    names = {os.fsdecode(n) for n in listed.stdout.split(b"\0") if n}
    # A tracked file deleted in the work tree is still listed: keep what exists.
    return sorted(n for n in names if os.path.lexists(folder / n))


def _check_link(folder: Path, name: str) -> None:
    """WorkdirError for a link that points out of the workdir (it would dangle, or worse,
    on the instance)."""
    target = os.readlink(folder / name)
    inside = os.path.normpath(os.path.join(os.path.dirname(name), target))
    if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
        raise WorkdirError(
            f"{folder / name}: a link to {target}, outside the workdir, cannot be delivered"
        )


def _add(tar: tarfile.TarFile, folder: Path, name: str) -> None:
    path = folder / name
    info = tar.gettarinfo(str(path), arcname=name)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = stat.S_IMODE(info.mode)
    if info.isfile():
        with path.open("rb") as handle:
            tar.addfile(info, handle)
    elif info.issym():
        tar.addfile(info)
    # anything else (a fifo, a socket, a device) is not workdir content: left out


class _Hashing(io.RawIOBase):
    """A write-only file that hashes what passes through to `raw`."""

    def __init__(self, raw, digest) -> None:
        self.raw, self.digest = raw, digest

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.digest.update(data)
        return self.raw.write(data)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
