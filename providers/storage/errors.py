"""libcloud's storage errors mapped onto providers.errors, in one table.

libcloud reports most HTTP failures as a bare LibcloudError whose text holds the
status code ("Status code: 503") and sometimes the cloud's XML body. The body may
quote an access key id or a request signature, so a message keeps only the
cloud's error code and first sentence, and ProviderError redacts that again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from providers.errors import (
    CredentialsError,
    InvalidRequest,
    NotFound,
    ProviderError,
    RateLimited,
)

_STATUS = re.compile(r"(?i)status[ _]code\s*[:=]?\s*(\d{3})")
_XML_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")
_AZURE_CODE = re.compile(r"^([A-Za-z]{3,60}): ([^\n]{0,300}?) Status code")
_BUCKET_REGION = re.compile(r'Bucket region "([a-z0-9-]+)"')

THROTTLED_STATUS = frozenset({429, 503})
THROTTLED_CODES = frozenset({"SlowDown", "ServerBusy", "TooManyRequests", "RequestLimitExceeded"})
DENIED_STATUS = frozenset({401, 403})


def libcloud_text(exc: BaseException) -> str:
    """The text libcloud put in `exc`, without the driver's repr around it."""
    value = getattr(exc, "value", None)
    if value is None:
        value = getattr(exc, "message", None)
    return value if isinstance(value, str) else str(exc)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status libcloud reported, when it did."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    found = _STATUS.search(libcloud_text(exc))
    return int(found.group(1)) if found else None


def cloud_code(exc: BaseException) -> tuple[str, str]:
    """(the cloud's error code, its first sentence), from an XML body or Azure's text."""
    text = libcloud_text(exc)
    code, message = _XML_CODE.search(text), _XML_MESSAGE.search(text)
    if code:
        first = message.group(1).split(". ")[0] if message else ""
        return code.group(1), first
    azure = _AZURE_CODE.search(text)
    if azure:
        return azure.group(1), azure.group(2).split(". ")[0]
    return "", ""


def bucket_region(exc: BaseException) -> str | None:
    """The region S3 named in its "bucket is in another region" answer, if that is `exc`."""
    found = _BUCKET_REGION.search(libcloud_text(exc))
    return found.group(1) if found else None


def _detail(exc: BaseException) -> str:
    code, message = cloud_code(exc)
    if code:
        return f" ({code}: {message})" if message else f" ({code})"
    status = status_of(exc)
    return f" (HTTP {status})" if status else ""


def _network(exc: BaseException) -> bool:
    try:
        import requests
    except ImportError:  # pragma: no cover - libcloud depends on requests
        return False
    return isinstance(exc, (requests.RequestException, ConnectionError, TimeoutError))


Rule = tuple[Callable[[BaseException], bool], Callable[[str, str, BaseException], ProviderError]]


def _table() -> list[Rule]:
    """(does it match, what to raise) rules, first match wins."""
    from libcloud.common.exceptions import BaseHTTPError, RateLimitReachedError
    from libcloud.common.types import InvalidCredsError, LibcloudError
    from libcloud.storage.types import (
        ContainerDoesNotExistError,
        InvalidContainerNameError,
        ObjectDoesNotExistError,
        ObjectError,
        ObjectHashMismatchError,
    )

    def kind(*classes: type) -> Callable[[BaseException], bool]:
        return lambda exc: isinstance(exc, classes)

    def status(*codes: int) -> Callable[[BaseException], bool]:
        return lambda exc: (
            isinstance(exc, (LibcloudError, BaseHTTPError)) and status_of(exc) in codes
        )

    def throttled(exc: BaseException) -> bool:
        if isinstance(exc, RateLimitReachedError):
            return True
        if not isinstance(exc, (LibcloudError, BaseHTTPError)):
            return False
        return status_of(exc) in THROTTLED_STATUS or cloud_code(exc)[0] in THROTTLED_CODES

    return [
        (kind(ObjectDoesNotExistError), lambda p, uri, e: NotFound(p, f"no object {uri}")),
        (
            kind(ContainerDoesNotExistError),
            lambda p, uri, e: NotFound(p, f"no bucket or container for {uri}"),
        ),
        (
            kind(InvalidCredsError),
            lambda p, uri, e: CredentialsError(
                p, f"credentials rejected or access denied for {uri}{_detail(e)}"
            ),
        ),
        (throttled, lambda p, uri, e: RateLimited(p, f"throttled on {uri}{_detail(e)}")),
        (
            status(*DENIED_STATUS),
            lambda p, uri, e: CredentialsError(p, f"access denied for {uri}{_detail(e)}"),
        ),
        (status(404), lambda p, uri, e: NotFound(p, f"not found: {uri}{_detail(e)}")),
        (
            kind(InvalidContainerNameError),
            lambda p, uri, e: InvalidRequest(p, f"invalid bucket or container name in {uri}"),
        ),
        (
            kind(ObjectHashMismatchError),
            lambda p, uri, e: ProviderError(p, f"checksum mismatch on {uri}", retryable=True),
        ),
        (kind(ObjectError), lambda p, uri, e: NotFound(p, f"{uri} is not an object")),
        (
            status(500, 502, 504),
            lambda p, uri, e: ProviderError(p, f"server error on {uri}{_detail(e)}", True),
        ),
        (
            _network,
            lambda p, uri, e: ProviderError(
                p, f"cannot reach the store for {uri}: {type(e).__name__}", retryable=True
            ),
        ),
        (
            kind(LibcloudError),
            lambda p, uri, e: ProviderError(
                p, f"{uri}: {_detail(e).strip(' ()') or libcloud_text(e)[:200]}"
            ),
        ),
    ]


def translate(exc: BaseException, provider: str, uri: str) -> BaseException:
    """The providers.errors exception for `exc` raised while working on `uri`; `exc`
    itself when it is already one, or is not a storage failure (a bug, Ctrl-C)."""
    if isinstance(exc, ProviderError):
        return exc
    for matches, build in _table():
        if matches(exc):
            return build(provider, uri, exc)
    if isinstance(exc, FileNotFoundError):
        return NotFound(provider, f"no such file for {uri}")
    if isinstance(exc, OSError):
        return ProviderError(provider, f"{uri}: {exc.strerror or type(exc).__name__}")
    return exc
