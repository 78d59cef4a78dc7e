"""Compute Engine errors -> providers.errors: three tables and the two functions that read them.

GCE reports a failure in one of two places. A call the API front end refuses raises a
google.api_core exception carrying the HTTP status and `errors[].reason`
(rateLimitExceeded, quotaExceeded, forbidden, ...). A call it accepts returns an
operation that may finish with `error.errors[].code` (ZONE_RESOURCE_POOL_EXHAUSTED,
QUOTA_EXCEEDED, ...) and `httpErrorStatusCode`. The most specific hint wins: a reason or
code first, then the HTTP status. A 5xx from the front end is GCE's "back off and retry
the same call" (backendError), so it becomes RateLimited, which callers retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)

NAME = "gcp"

# `errors[].reason` of an HTTP error (and the ErrorInfo reason of a stockout).
REASONS: Mapping[str, type[ProviderError]] = MappingProxyType(
    {
        "rateLimitExceeded": RateLimited,
        "userRateLimitExceeded": RateLimited,
        "backendError": RateLimited,
        "quotaExceeded": QuotaExceeded,
        "limitExceeded": QuotaExceeded,
        "resource_availability": InsufficientCapacity,
        "forbidden": CredentialsError,
        "insufficientPermissions": CredentialsError,
        "authError": CredentialsError,
        "accessNotConfigured": CredentialsError,  # the Compute API is off in the project
        "notFound": NotFound,
        "invalid": InvalidRequest,
        "badRequest": InvalidRequest,
        "invalidParameter": InvalidRequest,
        "required": InvalidRequest,
        "alreadyExists": InvalidRequest,
        "conditionNotMet": InvalidRequest,
    }
)
# `error.errors[].code` of a failed operation; also looked for in the text of HTTP errors
# (an insert can fail with "503 ... ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: ...").
CODES: Mapping[str, type[ProviderError]] = MappingProxyType(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED": InsufficientCapacity,
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": InsufficientCapacity,
        "QUOTA_EXCEEDED": QuotaExceeded,
        "RATE_LIMIT_EXCEEDED": RateLimited,
        "RESOURCE_OPERATION_RATE_EXCEEDED": RateLimited,
        "RESOURCE_NOT_FOUND": InvalidRequest,  # an image, network or type the request names
        "UNSUPPORTED_OPERATION": InvalidRequest,
    }
)
# The HTTP status, when neither a reason nor a code says more. 5xx: see the docstring.
STATUSES: Mapping[int, type[ProviderError]] = MappingProxyType(
    {
        400: InvalidRequest,
        401: CredentialsError,
        403: CredentialsError,
        404: NotFound,
        409: InvalidRequest,
        412: InvalidRequest,
        429: RateLimited,
    }
)


def classify(
    reasons: Iterable[str], codes: Iterable[str], status: int | None
) -> type[ProviderError] | None:
    """The error class for what GCE said, most specific hint first; None: no idea."""
    for hint, table in ((reasons, REASONS), (codes, CODES)):
        for key in hint:
            if key in table:
                return table[key]
    if status is not None and status >= 500:
        return RateLimited
    return STATUSES.get(status) if status is not None else None


def sdk_errors() -> tuple[type[BaseException], ...]:
    """The exception types an SDK call may raise that `from_exception` understands (the
    rest are bugs and propagate as they are)."""
    import google.auth.exceptions
    import requests
    from google.api_core import exceptions as api

    return (api.GoogleAPIError, google.auth.exceptions.GoogleAuthError, requests.RequestException)


def from_exception(exc: BaseException, action: str) -> ProviderError:
    """The ProviderError for an exception raised by google-cloud-compute or google-auth
    while doing `action` ("insert us-central1-a/broker-a-1"). Messages are redacted."""
    import google.auth.exceptions as auth
    import requests
    from google.api_core import exceptions as api

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, api.GoogleAPICallError):
        reasons = [str(e.get("reason", "")) for e in exc.errors or () if isinstance(e, Mapping)]
        if exc.reason:
            reasons.append(exc.reason)
        text = str(exc.message)
        codes = [code for code in CODES if code in text]
        cls = classify(reasons, codes, exc.code) or ProviderError
        code = next((r for r in reasons if r), "") or (codes[0] if codes else str(exc.code or ""))
        return cls(NAME, f"{action}: {text}", code=code)
    if isinstance(exc, auth.DefaultCredentialsError | auth.RefreshError):
        return CredentialsError(NAME, f"{action}: {exc}", code=type(exc).__name__)
    if isinstance(exc, api.RetryError | auth.TransportError | requests.RequestException):
        return ProviderError(
            NAME, f"{action}: cannot reach GCE: {exc}", retryable=True, code="unreachable"
        )
    return ProviderError(NAME, f"{action}: {type(exc).__name__}: {exc}")


def from_operation(operation: Any, action: str) -> ProviderError | None:
    """The error of a finished GCE operation (compute_v1.Operation), or None when it
    succeeded. An unknown code keeps the operation's HTTP status as its guide."""
    errors = list(operation.error.errors) if operation.error else []
    if not errors:
        return None
    codes = [e.code for e in errors]
    status = operation.http_error_status_code or 0
    message = f"{action}: " + "; ".join(f"{e.code}: {e.message}" for e in errors)
    cls = classify((), codes, None)
    if cls is None and status >= 500:  # a failed operation is not throttling
        return ProviderError(NAME, message, retryable=True, code=codes[0])
    return (cls or STATUSES.get(status, ProviderError))(NAME, message, code=codes[0])
