"""`ObjectStore`: streaming put / get / copy / list over libcloud storage drivers, for
checkpoints at `s3://`, `gs://`, `az://` and `file://` URIs.

Nothing is ever held whole: bytes flow chunk by chunk from the source into the
destination driver (`upload_object_via_stream`), so a copy between clouds needs no
local disk and little memory (S3 buffers one 5 MiB part, Azure one 4 MiB block).

Every transfer is verified: the destination's size must equal the bytes streamed
(and the source's size), and where a side reports a true content MD5 it must equal
the MD5 of the streamed bytes. True MD5s come from Azure (Content-MD5, set on every
upload) and Google (the ETag of an object written in one request). S3 ETags are not
used: an ETag is an MD5 only for single-part uploads without SSE-KMS or SSE-C, which
the ETag alone does not tell, and libcloud always uploads streams in parts. A failed
check deletes what was written and raises a retryable ProviderError.

Writes are atomic: a cloud object appears only once its upload completes; a file://
object is written under a hidden temporary name and renamed into place; `get` writes a
temporary file beside the target and renames it, so a failure leaves the old file (or
none) and no partial one.

libcloud drivers are not thread-safe: each thread gets its own, rebuilt after
`driver_ttl` seconds so that refreshed credentials (roles, SSO) are picked up.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from providers.cloud import with_backoff
from providers.errors import NotFound, ProviderError
from providers.storage import drivers
from providers.storage.errors import bucket_region, translate
from providers.storage.streams import Meter, Progress, Source, open_source
from providers.storage.uris import InvalidUri, ObjectUri, parse_uri

T = TypeVar("T")
CHUNK_SIZE = 1 << 20  # bytes read from a source per step
DRIVER_TTL_SECONDS = 300.0
PARTIAL_MARK = ".broker-part-"  # hidden name of a file:// object being written
MD5_SCHEMES = frozenset({"gs", "az"})
_HEX_MD5 = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class ObjectInfo:
    """An object as a transfer left it: URI, size, and content MD5 when known."""

    uri: str
    size: int
    md5: str | None = None


def content_md5(scheme: str, obj: Any) -> str | None:
    """The object's true content MD5 (hex) when its store reports one (module docstring)."""
    if scheme == "az":
        value = (obj.extra or {}).get("md5_hash")
        return value.lower() if isinstance(value, str) and _HEX_MD5.fullmatch(value) else None
    if scheme == "gs":
        value = (obj.hash or "").strip('"').lower()
        return value if _HEX_MD5.fullmatch(value) else None
    return None


class ObjectStore:
    """Checkpoint storage over libcloud (see the module docstring).

    `chunk_size`: bytes per read from a source. `timeout`: seconds per HTTP request.
    `sleep`: the pause between retries of throttled metadata calls (exists, size, list,
    delete); transfers are not retried here, their RateLimited is the caller's.
    """

    def __init__(
        self,
        *,
        chunk_size: int = CHUNK_SIZE,
        timeout: float = drivers.DEFAULT_TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        driver_ttl: float = DRIVER_TTL_SECONDS,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        self.chunk_size = chunk_size
        self.timeout = timeout
        self.driver_ttl = driver_ttl
        self._sleep = sleep
        self._threads = threading.local()
        self._bucket_regions: dict[str, str] = {}
        self._default_region: str | None = None

    # --- transfers -----------------------------------------------------------------------

    def put(
        self, source: Source, uri: str | ObjectUri, progress: Progress | None = None
    ) -> ObjectInfo:
        """Upload `source` (a local path, bytes, a binary file object read from its
        position, or an iterable of byte chunks) to `uri`, streaming."""
        target = parse_uri(uri).require_object()
        with self._errors(target), open_source(source, self.chunk_size) as (chunks, total):
            meter = Meter(chunks, total, progress, md5=target.scheme in MD5_SCHEMES)
            obj = self._upload(target, meter)
            return self._verified(target, obj, meter, expected=None, other_md5=None)

    def get(
        self, uri: str | ObjectUri, local_path: str | os.PathLike, progress: Progress | None = None
    ) -> ObjectInfo:
        """Download `uri` to `local_path` (parents created), streaming into a temporary
        file beside it that is renamed into place only once complete and verified."""
        source = parse_uri(uri).require_object()
        target = Path(local_path)
        with self._errors(source):
            driver, obj = self._object(source, "src")
            expected_md5 = content_md5(source.scheme, obj)
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, part = tempfile.mkstemp(
                dir=target.parent, prefix=f".{target.name}.", suffix=".part"
            )
            try:
                with os.fdopen(handle, "wb") as out:
                    chunks = driver.download_object_as_stream(obj, chunk_size=self.chunk_size)
                    meter = Meter(chunks, obj.size, progress, md5=expected_md5 is not None)
                    for chunk in meter:
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                _check(source, meter, int(obj.size), expected_md5)
                os.replace(part, target)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
                raise
        return ObjectInfo(str(source), meter.count, expected_md5 or meter.md5)

    def copy(
        self,
        src_uri: str | ObjectUri,
        dst_uri: str | ObjectUri,
        progress: Progress | None = None,
    ) -> ObjectInfo:
        """Copy one object between any two stores, streaming: chunks read from the source
        go straight into the destination's upload, never into a local file."""
        source, target = parse_uri(src_uri).require_object(), parse_uri(dst_uri).require_object()
        with self._errors(source):
            driver, obj = self._object(source, "src")
            source_md5 = content_md5(source.scheme, obj)
            chunks = driver.download_object_as_stream(obj, chunk_size=self.chunk_size)
        meter = Meter(
            chunks,
            int(obj.size),
            progress,
            md5=source_md5 is not None or target.scheme in MD5_SCHEMES,
            on_error=lambda exc: translate(exc, source.provider, str(source)),
        )
        with self._errors(target):
            new = self._upload(target, meter)
            return self._verified(target, new, meter, int(obj.size), source_md5)

    def copy_tree(
        self,
        src_prefix: str | ObjectUri,
        dst_prefix: str | ObjectUri,
        progress: Progress | None = None,
    ) -> list[ObjectInfo]:
        """Copy every object under the directory `src_prefix` to the same relative names
        under `dst_prefix` (objects already there and not in the source are left alone).
        `progress` sees the bytes of the whole tree. NotFound when the source is empty."""
        source, target = parse_uri(src_prefix).as_directory(), parse_uri(dst_prefix).as_directory()
        items = self._retrying(source, lambda: self._list(source))
        if not items:
            raise NotFound(source.provider, f"nothing under {source}")
        total, done, copied = sum(size for _, size in items), 0, []
        for item, _ in items:
            step = None
            if progress is not None:
                step = _offset(progress, done, total)
            info = self.copy(item, target.join(item.key[len(source.key) :]), step)
            copied.append(info)
            done += info.size
        return copied

    # --- metadata ------------------------------------------------------------------------

    def size(self, uri: str | ObjectUri) -> int:
        """The object's size in bytes; NotFound when there is none."""
        where = parse_uri(uri).require_object()
        return self._retrying(where, lambda: int(self._object(where, "src")[1].size))

    def exists(self, uri: str | ObjectUri) -> bool:
        """Whether the object exists (False also when its bucket or directory does not)."""
        try:
            self.size(uri)
        except NotFound:
            return False
        return True

    def delete(self, uri: str | ObjectUri) -> bool:
        """Delete the object: True when it existed, False when it was already gone."""
        where = parse_uri(uri).require_object()

        def remove() -> bool:
            try:
                with self._errors(where):
                    driver, obj = self._object(where, "dst")
            except NotFound:
                return False
            return bool(driver.delete_object(obj))

        return self._retrying(where, remove)

    def list(self, prefix_uri: str | ObjectUri) -> list[str]:
        """URIs of every object whose key starts with the prefix (a text prefix, as in
        S3: `.../ckpt` also matches `.../ckpt2/x`; end it with "/" for a directory),
        sorted. Empty when nothing matches, or the file:// directory does not exist."""
        where = parse_uri(prefix_uri)
        return [str(item) for item, _ in self._retrying(where, lambda: self._list(where))]

    # --- drivers, places and errors ------------------------------------------------------

    def _driver(self, scheme: str, bucket: str, role: str) -> Any:
        """This thread's driver for (scheme, S3 region, role): a copy reads with one
        driver and writes with another, so two connections never share state."""
        cache: dict[tuple[str, ...], tuple[Any, float]] = self._threads.__dict__.setdefault(
            "drivers", {}
        )
        if scheme == "s3":
            region = self._bucket_regions.get(bucket) or self._region()
            key: tuple[str, ...] = (scheme, region, role)
        else:
            key = (scheme, role)
        now = time.monotonic()
        entry = cache.get(key)
        if entry is None or now - entry[1] > self.driver_ttl:
            if scheme == "s3":
                built = drivers.s3_driver(key[1], timeout=self.timeout)
            elif scheme == "gs":
                built = drivers.gcs_driver(timeout=self.timeout)
            else:
                built = drivers.azure_driver(timeout=self.timeout)
            entry = cache[key] = (built, now)
        return entry[0]

    def _region(self) -> str:
        if self._default_region is None:
            self._default_region = drivers.aws_region()
        return self._default_region

    def _in_bucket(self, where: ObjectUri, role: str, action: Callable[[Any], T]) -> tuple[Any, T]:
        """(driver, action(driver)) for a cloud URI; when S3 answers that the bucket lives
        in another region, once more with a driver for that region."""
        driver = self._driver(where.scheme, where.bucket, role)
        try:
            return driver, action(driver)
        except Exception as exc:
            region = bucket_region(exc) if where.scheme == "s3" else None
            if region is None or self._bucket_regions.get(where.bucket) == region:
                raise
            self._bucket_regions[where.bucket] = region
            driver = self._driver(where.scheme, where.bucket, role)
            return driver, action(driver)

    def _local(self, where: ObjectUri, need_object: bool = False) -> tuple[Any, Any, str]:
        """(Local driver, container, name) for a file:// URI: the container is the
        parent directory, so listings walk that directory only. `need_object`: NotFound,
        as libcloud's driver says it, when no file is there, before a driver is made
        (a reclaim's checkpoint-marker check mostly finds none)."""
        directory, _, name = where.key.rpartition("/")
        base, _, container_name = directory.rpartition("/")
        if not container_name:
            raise InvalidUri("file", f"{where}: a file:// object must be inside a directory")
        if not os.path.isdir(directory):
            raise NotFound("file", f"no directory {directory}")
        if need_object and not os.path.lexists(where.key):
            raise NotFound(where.provider, f"no object {where}")
        driver = drivers.local_driver(base or "/")
        return driver, driver.get_container(container_name), name

    def _object(self, where: ObjectUri, role: str) -> tuple[Any, Any]:
        """(driver, libcloud Object) of an existing object; NotFound otherwise."""
        if where.scheme == "file":
            driver, container, name = self._local(where, need_object=True)
            return driver, driver.get_object(container.name, name)
        return self._in_bucket(where, role, lambda d: d.get_object(where.bucket, where.key))

    def _upload(self, target: ObjectUri, meter: Meter) -> Any:
        """Stream `meter` into `target`; the stored object as the store now reports it."""
        if target.scheme == "file":
            return self._upload_file(target, meter)
        driver, container = self._in_bucket(target, "dst", lambda d: d.get_container(target.bucket))
        driver.upload_object_via_stream(iter(meter), container, target.key)
        meter.raise_unless_finished(target.provider, str(target))
        return driver.get_object(target.bucket, target.key)

    def _upload_file(self, target: ObjectUri, meter: Meter) -> Any:
        directory, _, name = target.key.rpartition("/")
        if directory:
            os.makedirs(directory, exist_ok=True)
        driver, container, name = self._local(target)
        part = f".{name}{PARTIAL_MARK}{uuid.uuid4().hex}"
        part_path = os.path.join(directory, part)
        try:
            driver.upload_object_via_stream(iter(meter), container, part)
            meter.raise_unless_finished(target.provider, str(target))
            descriptor = os.open(part_path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(part_path, target.key)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part_path)
            raise
        return driver.get_object(container.name, name)

    def _verified(
        self,
        target: ObjectUri,
        obj: Any,
        meter: Meter,
        expected: int | None,
        other_md5: str | None,
    ) -> ObjectInfo:
        """The ObjectInfo of an upload that passed its checks; else delete it and raise."""
        stored_md5 = content_md5(target.scheme, obj)
        try:
            _check(target, meter, expected, other_md5)
            _check(target, meter, int(obj.size), stored_md5, stored=True)
        except ProviderError:
            with contextlib.suppress(Exception):
                self.delete(target)
            raise
        return ObjectInfo(str(target), int(obj.size), stored_md5 or meter.md5)

    def _list(self, where: ObjectUri) -> list[tuple[ObjectUri, int]]:
        if where.scheme == "file":
            directory, _, prefix = where.key.rpartition("/")
            try:
                driver, container, _ = self._local(where)
            except NotFound:
                return []
            found = [  # the Local driver walks the directory anyway: filter here
                (ObjectUri("file", "", f"{directory}/{obj.name}"), int(obj.size))
                for obj in driver.iterate_container_objects(container)
                if obj.name.startswith(prefix) and not _partial(obj.name)
            ]
        else:
            driver, container = self._in_bucket(
                where, "src", lambda d: d.get_container(where.bucket)
            )
            found = [
                (ObjectUri(where.scheme, where.bucket, obj.name), int(obj.size))
                for obj in driver.iterate_container_objects(container, prefix=where.key or None)
            ]
        return sorted(found)

    def _retrying(self, where: ObjectUri, call: Callable[[], T]) -> T:
        """`call()` with errors translated, retried with backoff while throttled."""

        def attempt() -> T:
            with self._errors(where):
                return call()

        return with_backoff(attempt, sleep=self._sleep)

    @contextlib.contextmanager
    def _errors(self, where: ObjectUri) -> Iterator[None]:
        """libcloud, network and file errors as providers.errors (module errors.py). The
        original is not chained: its text may quote a cloud's answer verbatim."""
        try:
            yield
        except Exception as exc:
            mapped = translate(exc, where.provider, str(where))
            if mapped is exc:
                raise
            raise mapped from None


def _check(
    where: ObjectUri, meter: Meter, size: int | None, md5: str | None, stored: bool = False
) -> None:
    """ProviderError (retryable) when the streamed bytes differ from `size` or `md5`."""
    side = "stored" if stored else "source"
    if size is not None and meter.count != size:
        raise ProviderError(
            where.provider,
            f"size mismatch on {where}: {meter.count} bytes streamed, {side} has {size}",
            retryable=True,
        )
    if md5 is not None and meter.md5 is not None and md5 != meter.md5:
        raise ProviderError(
            where.provider,
            f"checksum mismatch on {where}: streamed MD5 {meter.md5}, {side} MD5 {md5}",
            retryable=True,
        )


def _partial(name: str) -> bool:
    """A file:// object still being written by some put (hidden temporary name)."""
    base = name.rpartition("/")[2]
    return base.startswith(".") and PARTIAL_MARK in base


def _offset(progress: Progress, done: int, total: int) -> Progress:
    """A progress callback for one object of a tree, reporting tree-wide bytes."""
    return lambda count, _total: progress(done + count, total)
