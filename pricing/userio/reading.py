"""The one way broker reads a file a user gave it: checked before a byte is parsed.

Every user file (manifests, pools, policy, overlays, catalogs and their compiled
cache, `broker.toml`, billing exports, traces) is read here, and each read:

- refuses what is not a regular file (a directory, a FIFO, a device, a socket) with a
  clear message, without opening it: a FIFO named `jobs.yaml` must not hang a command,
  and `/dev/zero` must not fill the memory;
- refuses a file larger than the cap of its kind (`Limits`, from the settings
  `max_yaml_bytes`, `max_catalog_bytes`, `max_trace_bytes`, `max_bill_bytes`), checked
  on the size the file system reports and again on what is read (a file that grows,
  a `/proc` file that reports 0, a gzip stream that inflates);
- decodes UTF-8 strictly (a byte-order mark dropped): a byte that is not UTF-8 is a
  located error, `file:line:col: not UTF-8 text (...)`.

Every refusal is a `UserInputError` naming the file. Only `os` and our own errors are
imported at the top, so the manifest loader (which reads thousands of files) pays one
`open` and one `fstat` per file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pricing.userio.errors import UserInputError

# What each kind of file is called in messages, and the setting that caps its size.
KINDS: dict[str, tuple[str, str]] = {
    "yaml": ("YAML file", "max_yaml_bytes"),
    "catalog": ("catalog", "max_catalog_bytes"),
    "trace": ("trace", "max_trace_bytes"),
    "bill": ("billing export", "max_bill_bytes"),
    "config": ("settings file", ""),  # broker.toml: its cap cannot be a setting in itself
}
CONFIG_BYTES = 1 << 20  # broker.toml and config.toml: 1 MiB is a thousand times enough
# O_NONBLOCK: should the path have become a FIFO since it was checked, open does not wait.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_KIND_NAMES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class Limits(NamedTuple):
    """The size caps in force and the deepest nesting a structured file may have."""

    yaml_bytes: int = 8 << 20
    catalog_bytes: int = 512 << 20
    trace_bytes: int = 1 << 30
    bill_bytes: int = 1 << 30
    nesting_depth: int = 64

    @classmethod
    def resolved(cls) -> Limits:
        """The caps as the settings give them (flag > environment > broker.toml > ...)."""
        from pricing.userio.settings import resolve_positive_int

        return cls(
            yaml_bytes=resolve_positive_int("max_yaml_bytes"),
            catalog_bytes=resolve_positive_int("max_catalog_bytes"),
            trace_bytes=resolve_positive_int("max_trace_bytes"),
            bill_bytes=resolve_positive_int("max_bill_bytes"),
            nesting_depth=resolve_positive_int("max_nesting_depth"),
        )

    def bytes_for(self, kind: str) -> int:
        """The cap of one kind of file ("yaml", "catalog", "trace", "bill", "config")."""
        if kind == "config":
            return CONFIG_BYTES
        return int(getattr(self, f"{kind}_bytes"))


def check_regular(path: Path | str) -> os.stat_result:
    """The file's status when it is a regular file (symbolic links followed); else a
    UserInputError saying what it is. Nothing is opened."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise UserInputError(path, 0, 0, "", "file not found") from None
    except OSError as exc:
        raise UserInputError(path, 0, 0, "", f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(status.st_mode):
        what = _KIND_NAMES.get(stat.S_IFMT(status.st_mode), "not a plain file")
        if stat.S_ISDIR(status.st_mode):
            raise UserInputError(path, 0, 0, "", "is a directory, not a file")
        raise UserInputError(path, 0, 0, "", f"is {what}, not a regular file")
    return status


def read_bytes(path: Path | str, kind: str, limits: Limits | None = None) -> bytes:
    """The whole file, after the checks above (`limits`: resolved when not given)."""
    cap = (limits or _default_limits(kind)).bytes_for(kind)
    status = check_regular(path)
    if status.st_size > cap:
        raise too_large(path, kind, status.st_size, cap)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise UserInputError(path, 0, 0, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserInputError(path, 0, 0, "", "is no longer a regular file")
        data = _read_upto(fd, status.st_size, cap)
    except OSError as exc:
        raise UserInputError(path, 0, 0, "", f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise too_large(path, kind, len(data), cap)
    return data


def _read_upto(fd: int, size: int, cap: int) -> bytes:
    """The file's bytes up to `cap + 1` (one more than allowed says it is too large).
    The first read asks for the size the file system reported, plus one: never a
    buffer of the whole cap (8 MiB for a 1 KiB manifest: most of a folder's load
    time); a file that grows, or a `/proc` file that reports 0, is read on in chunks."""
    chunks: list[bytes] = []
    total, want = 0, min(size, cap) + 1
    while total <= cap:
        chunk = os.read(fd, want)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = min(1 << 20, cap + 1 - total) if total <= cap else 0
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_text(path: Path | str, kind: str, limits: Limits | None = None) -> str:
    """The whole file as text: UTF-8, strictly, a byte-order mark dropped."""
    return decode(read_bytes(path, kind, limits), path)


def read_texts(
    paths: Sequence[Path | str], kind: str, limits: Limits | None = None
) -> list[str | UserInputError]:
    """`read_text` of each path, or the error it raises, in order: a folder's files in
    one call. A plain file is read with the same checks, inlined (a tenth of the
    per-file cost of a folder of small manifests); anything else (an error, a file that
    is not regular, too large or not UTF-8) is read again by `read_text`, which says why."""
    limits = limits or _default_limits(kind)
    cap = limits.bytes_for(kind)
    texts: list[str | UserInputError] = []
    for path in paths:
        text = None
        try:
            status = os.stat(path)
            size = status.st_size if stat.S_ISREG(status.st_mode) else cap + 1
            if size <= cap:
                fd = os.open(path, _OPEN_FLAGS)
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        data = _read_upto(fd, size, cap)
                        if len(data) <= cap and b"\x00" not in data:
                            text = data.decode("utf-8").removeprefix("\ufeff")
                finally:
                    os.close(fd)
        except (OSError, UnicodeDecodeError):
            text = None
        if text is None:
            try:
                text = read_text(path, kind, limits)
            except UserInputError as exc:
                text = exc
        texts.append(text)
    return texts


def decode(data: bytes, path: Path | str) -> str:
    """`data` as UTF-8 text (a byte-order mark dropped); a located error at a bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = data[exc.start : exc.start + 1].hex()
        message = f"not UTF-8 text (byte 0x{byte}: {exc.reason})"
        raise UserInputError(path, line, column, "", message) from None
    if "\x00" in text:  # valid UTF-8, but no text file a user writes holds one
        at = data.index(b"\x00")
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1) + 1
        raise UserInputError(path, line, column, "", "a NUL byte: a binary file, not text")
    return text.removeprefix("\ufeff")


def read_gzip_or_plain(path: Path | str, kind: str, limits: Limits | None = None) -> bytes:
    """A file that may be gzip-compressed (by its `.gz` suffix), inflated, with the cap
    applied to the compressed file and to what it inflates to (a gzip bomb stops there)."""
    limits = limits or _default_limits(kind)
    data = read_bytes(path, kind, limits)
    if not str(path).endswith(".gz"):
        return data
    import gzip
    import io
    import zlib

    cap = limits.bytes_for(kind)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            inflated = stream.read(cap + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UserInputError(path, 0, 0, "", f"not a gzip file ({exc})") from None
    if len(inflated) > cap:
        raise too_large(path, kind, len(inflated), cap, inflated=True)
    return inflated


def too_large(
    path: Path | str, kind: str, size: int, cap: int, *, inflated: bool = False
) -> UserInputError:
    """The refusal of a file over its cap, naming the setting that raises it."""
    what, setting = KINDS[kind]
    tail = f" (setting {setting})" if setting else ""
    if inflated:
        message = f"inflates to more than the {_size(cap)} limit for a {what}{tail}"
    else:
        message = f"is {_size(size)}, over the {_size(cap)} limit for a {what}{tail}"
    return UserInputError(path, 0, 0, "", message)


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{count} bytes"


def _default_limits(kind: str) -> Limits:
    return Limits() if kind == "config" else Limits.resolved()


def read_text_maybe_gzip(path: Path | str, kind: str, limits: Limits | None = None) -> str:
    """`read_gzip_or_plain` decoded as `read_text` decodes (traces: `.csv`, `.json`, `.gz`)."""
    return decode(read_gzip_or_plain(path, kind, limits), path)


def load_json(path: Path | str, kind: str, limits: Limits | None = None) -> object:
    """A JSON file (gzip-compressed by its `.gz` suffix), read as above; a located
    UserInputError for text that is not JSON or nests deeper than Python can parse."""
    import json

    text = read_text_maybe_gzip(path, kind, limits)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(path, exc.lineno, exc.colno, "", f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise UserInputError(path, 0, 0, "", "lists and objects nested too deep") from None
    except ValueError:  # a number json reads but Python cannot hold (4,301 digits)
        import re

        at = (re.search(r"[0-9]{4300,}", text) or re.search("", text)).start()
        line, column = text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
        raise UserInputError(path, line, column, "", "an integer too long to read") from None


def csv_rows(path: Path | str, kind: str) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV file's header and rows as dicts, read as `read_text_maybe_gzip` reads; a
    located UserInputError for what the csv module refuses (a field over its 128 KiB
    limit, a NUL inside quotes) instead of its bare `_csv.Error`."""
    import csv
    import io

    with io.StringIO(read_text_maybe_gzip(path, kind), newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            rows = list(reader)
            return list(reader.fieldnames or ()), rows
        except csv.Error as exc:
            line = reader.line_num or 1
            raise UserInputError(path, line, 1, "", f"not CSV the broker reads: {exc}") from None
