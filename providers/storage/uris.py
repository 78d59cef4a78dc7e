"""Checkpoint URIs: `s3://bucket/key`, `gs://bucket/key`, `az://container/key`, `file:///path`.

Cloud keys are taken as written (as the AWS CLI and gsutil take them: no percent
decoding), so any key a bucket can hold can be named. `file://` URIs are URLs
(RFC 8089): they are percent-decoded, and formatted back percent-encoded, so that
`Path.as_uri()` output works and `parse_uri(str(uri)) == uri` always. The Azure
storage account is not part of the URI: it comes from AZURE_STORAGE_ACCOUNT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from providers.errors import InvalidRequest

SCHEMES: tuple[str, ...] = ("s3", "gs", "az", "file")
# The name errors carry for each scheme (ProviderError.provider).
PROVIDER_NAMES = {"s3": "s3", "gs": "gs", "az": "azure-blob", "file": "file"}


class InvalidUri(InvalidRequest, ValueError):
    """Not a checkpoint URI this store understands (bad input: a flag or a manifest)."""


@dataclass(frozen=True, order=True)
class ObjectUri:
    """One object, or a prefix, in one store.

    `bucket` is the S3/GCS bucket or Azure container ("" for `file`); `key` is the
    object name or prefix inside it. For `file`, `key` is the absolute path.
    """

    scheme: str
    bucket: str
    key: str

    def __str__(self) -> str:
        if self.scheme == "file":
            return "file://" + quote(self.key, safe="/")
        return f"{self.scheme}://{self.bucket}/{self.key}"

    @property
    def provider(self) -> str:
        return PROVIDER_NAMES[self.scheme]

    def join(self, relative: str) -> ObjectUri:
        """This prefix followed by `relative` (plain text concatenation, as S3 prefixes)."""
        return ObjectUri(self.scheme, self.bucket, self.key + relative)

    def as_directory(self) -> ObjectUri:
        """This prefix ending with "/" (a checkpoint directory, not a name prefix)."""
        if self.key.endswith("/") or (self.scheme != "file" and not self.key):
            return self
        return ObjectUri(self.scheme, self.bucket, self.key + "/")

    def require_object(self) -> ObjectUri:
        """Self, or InvalidUri when it names a directory or bucket rather than an object."""
        if not self.key or self.key.endswith("/"):
            raise InvalidUri(self.provider, f"{self} names a directory, not an object")
        return self


def parse_uri(text: str) -> ObjectUri:
    """The ObjectUri written as `text`; InvalidUri when it is not one."""
    if not isinstance(text, str):
        text = str(text)
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise InvalidUri(
            "storage",
            f"{text!r} is not a storage URI: use s3://bucket/key, gs://bucket/key, "
            "az://container/key or file:///absolute/path",
        )
    if any(not ch.isprintable() for ch in text):
        raise InvalidUri("storage", f"{text!r}: a URI is one line of printable text")
    if scheme == "file":
        return _parse_file(text, rest)
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InvalidUri(PROVIDER_NAMES[scheme], f"{text!r} names no bucket or container")
    return ObjectUri(scheme, bucket, key)


def _parse_file(text: str, rest: str) -> ObjectUri:
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
        raise InvalidUri("file", f"{text!r}: use file:///absolute/path (no host)")
    path = re.sub("/+", "/", unquote("/" + path))
    if "\0" in path:
        raise InvalidUri("file", f"{text!r}: a path cannot hold NUL")
    parts = path.split("/")
    if any(part in (".", "..") for part in parts):
        raise InvalidUri("file", f"{text!r}: no '.' or '..' in checkpoint paths")
    return ObjectUri("file", "", path)
