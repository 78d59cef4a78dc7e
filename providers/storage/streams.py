"""Byte streams for the store: what `put` accepts, and a meter that counts, hashes and
reports the bytes flowing from a source into a destination, one chunk at a time."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from providers.errors import NotFound, ProviderError

Progress = Callable[[int, int | None], None]  # (bytes done, total bytes or None)
Source = str | os.PathLike | bytes | bytearray | memoryview | IO[bytes] | Iterable[bytes]


class Meter:
    """Iterating it yields `chunks`, counting their bytes, hashing them with MD5 when
    `md5` is set, and calling `progress(done, total)`: once with 0 before the first
    chunk, then after each non-empty chunk, so the counts increase to the total.

    `on_error` turns an exception raised by `chunks` (the source) into the one to
    raise, so that a copy blames the side that failed.
    """

    def __init__(
        self,
        chunks: Iterable[bytes],
        total: int | None,
        progress: Progress | None = None,
        *,
        md5: bool = False,
        on_error: Callable[[Exception], BaseException] | None = None,
    ) -> None:
        self._chunks = chunks
        self.total = total
        self._progress = progress
        self._md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self._on_error = on_error
        self.count = 0
        self.finished = False  # the source was read to its end
        self.error: BaseException | None = None  # what stopped it otherwise

    @property
    def md5(self) -> str | None:
        """Hex MD5 of the bytes so far, when asked for."""
        return self._md5.hexdigest() if self._md5 is not None else None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._flow()
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.error = exc
            raise
        self.finished = True

    def _flow(self) -> Iterator[bytes]:
        if self._progress is not None:
            self._progress(0, self.total)
        source = iter(self._chunks)
        while True:
            try:
                chunk = next(source)
            except StopIteration:
                return
            except Exception as exc:
                if self._on_error is None:
                    raise
                raise self._on_error(exc) from exc
            if not chunk:
                continue
            chunk = bytes(chunk)
            self.count += len(chunk)
            if self._md5 is not None:
                self._md5.update(chunk)
            if self._progress is not None:
                self._progress(self.count, self.total)
            yield chunk

    def raise_unless_finished(self, provider: str, where: str) -> None:
        """Re-raise what stopped the flow, even if a driver swallowed it (libcloud's Local
        driver without locking does), or fail if the destination stopped reading early."""
        if self.error is not None:
            raise self.error
        if not self.finished:
            raise ProviderError(provider, f"the upload to {where} ended before its source")


@contextlib.contextmanager
def open_source(source: Source, chunk_size: int) -> Iterator[tuple[Iterable[bytes], int | None]]:
    """(chunks, total size or None) of what `put` was given: a local path, bytes, a
    binary file object (read from its position) or an iterable of byte chunks."""
    if isinstance(source, (str, os.PathLike)):
        try:
            handle = open(source, "rb")  # noqa: SIM115 - closed below, after the yield
        except FileNotFoundError:
            raise NotFound("file", f"no local file {os.fspath(source)!r}") from None
        with handle:
            yield _read_chunks(handle, chunk_size), _remaining(handle)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        yield (view[i : i + chunk_size] for i in range(0, len(view), chunk_size)), len(view)
    elif hasattr(source, "read"):
        yield _read_chunks(source, chunk_size), _remaining(source)
    else:
        yield source, None


def _read_chunks(handle: IO[bytes], chunk_size: int) -> Iterator[bytes]:
    while chunk := handle.read(chunk_size):
        yield chunk


def _remaining(handle: IO[bytes]) -> int | None:
    """Bytes left to read in a regular file or seekable buffer; None for pipes, sockets
    and anything else whose end cannot be known in advance."""
    try:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
    except (AttributeError, OSError, ValueError):
        pass  # no descriptor (BytesIO): ask the object itself
    try:
        if not handle.seekable():
            return None
        here = handle.tell()
        end = handle.seek(0, os.SEEK_END)
        handle.seek(here)
        return max(0, end - here)
    except (AttributeError, OSError, ValueError):
        return None
