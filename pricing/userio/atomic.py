"""Replacing a file all or nothing: readers see the old file or the new one, never half.

`write` fills a temporary file beside the target (same folder, so the same file
system; the folder is created if need be), which is then renamed over it with
`os.replace`, an atomic rename. By default (`durable=True`) the file is fsynced before
the rename and the folder after it, so that a power loss keeps the rename too
(catalogs, refresh status); caches pass `durable=False` and skip the fsyncs, since
losing one costs only speed. A kill leaves at most a stray ``.<name>.<pid>.tmp``,
never a half-written target. Only `os` is imported, and paths may be text, so the
CLI entry can use it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO, Any


def atomic_write(
    path: str | os.PathLike[str],
    write: Callable[[IO[Any]], object],
    *,
    binary: bool = False,
    durable: bool = True,
) -> None:
    """Replace `path` with what `write` writes to the open file handed to it.

    Text is UTF-8 with newlines as written (as the csv module wants); `binary`
    hands a bytes file instead.
    """
    target = os.fspath(path)
    _refuse_special(target)
    folder, name = os.path.split(target)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        text_mode = {"mode": "w", "encoding": "utf-8", "newline": ""}
        with open(tmp, **({"mode": "wb"} if binary else text_mode)) as handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
        if durable:
            _fsync_directory(folder or ".")
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _refuse_special(target: str) -> None:
    """An OSError for a target that exists and is no regular file: the rename would put
    a file in place of a directory's name, a FIFO or a device (`-o /dev/null` as root
    would replace /dev/null). A symbolic link is replaced itself, as `os.replace` does."""
    import errno
    import stat

    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return  # nothing there yet (or its folder is missing: made below)
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", target)
    raise OSError(errno.EINVAL, "exists and is not a regular file (a FIFO, a device)", target)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text` (UTF-8), all or nothing."""
    atomic_write(path, lambda handle: handle.write(text), durable=durable)


def _fsync_directory(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # not every platform opens directories (Windows); the rename still happened
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
