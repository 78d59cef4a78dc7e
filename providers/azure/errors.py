"""Azure errors onto the broker's taxonomy: one table, one function.

ARM answers with `{"error": {"code", "message"}}`, either on the HTTP call itself or
as the final status of an async operation (a create that fails to allocate ends
Failed with `AllocationFailed` while its HTTP calls all succeeded). azure-core puts
that body on `HttpResponseError.error`; the code decides, the HTTP status is the
fallback. Messages go through `ProviderError`, which redacts them.
"""

from __future__ import annotations

from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)

NAME = "azure"

# ARM error codes (lowercase) -> class. OperationNotAllowed is decided by its text.
CODES: dict[str, type[ProviderError]] = {
    "allocationfailed": InsufficientCapacity,
    "zonalallocationfailed": InsufficientCapacity,
    "skunotavailable": InsufficientCapacity,
    "overconstrainedallocationrequest": InsufficientCapacity,
    "overconstrainedzonalallocationrequest": InsufficientCapacity,
    "quotaexceeded": QuotaExceeded,
    "toomanyrequests": RateLimited,
    "subscriptionrequeststhrottled": RateLimited,
    "authenticationfailed": CredentialsError,
    "authorizationfailed": CredentialsError,
    "linkedauthorizationfailed": CredentialsError,
    "invalidauthenticationtoken": CredentialsError,
    "expiredauthenticationtoken": CredentialsError,
    "invalidparameter": InvalidRequest,
    "badrequest": InvalidRequest,
    "invalidrequestcontent": InvalidRequest,
    "invalidrequestformat": InvalidRequest,
    "propertychangenotallowed": InvalidRequest,
    "resourcenotfound": NotFound,
    "notfound": NotFound,
    "resourcegroupnotfound": NotFound,
    "subscriptionnotfound": CredentialsError,  # the credential cannot see the subscription
}
STATUSES: dict[int, type[ProviderError]] = {
    400: InvalidRequest,
    401: CredentialsError,
    403: CredentialsError,
    404: NotFound,
    409: InvalidRequest,
    429: RateLimited,
}
QUOTA_WORDS = ("quota", "cores limit", "lowprioritycores")


def error_code(exc: BaseException) -> str:
    """The ARM error code carried by `exc` ("" when none): the first one the table knows,
    looking into `details` when the outer code is a generic wrapper."""
    error = getattr(exc, "error", None)
    codes = [getattr(error, "code", None)]
    codes += [getattr(detail, "code", None) for detail in getattr(error, "details", None) or ()]
    codes = [str(code) for code in codes if code]
    known = [
        code for code in codes if code.lower() in CODES or code.lower() == "operationnotallowed"
    ]
    return (known or codes or [""])[0]


def map_error(exc: BaseException, action: str = "") -> ProviderError:
    """The ProviderError for an Azure SDK exception (already a ProviderError: unchanged)."""
    if isinstance(exc, ProviderError):
        return exc
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    prefix = f"{action}: " if action else ""
    code = error_code(exc)
    text = _message(exc)
    if isinstance(exc, ClientAuthenticationError) and not code:
        return CredentialsError(NAME, f"{prefix}{text}", code=type(exc).__name__)
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return ProviderError(NAME, f"{prefix}cannot reach Azure: {text}", retryable=True)
    if not isinstance(exc, HttpResponseError):
        return ProviderError(NAME, f"{prefix}{type(exc).__name__}: {text}")
    kind = _by_code(code, text)
    if kind is None:
        kind = STATUSES.get(exc.status_code or 0)
    if kind is None:
        # 5xx and the unknown: the same call may well work later.
        retryable = (exc.status_code or 0) >= 500
        return ProviderError(NAME, f"{prefix}{text}", retryable=retryable, code=code)
    return kind(NAME, f"{prefix}{text}", code=code)


def _by_code(code: str, text: str) -> type[ProviderError] | None:
    lowered = code.lower()
    if lowered == "operationnotallowed":
        return QuotaExceeded if any(w in text.lower() for w in QUOTA_WORDS) else InvalidRequest
    return CODES.get(lowered)


def _message(exc: BaseException) -> str:
    """The service's own message (not the SDK's dump of the response)."""
    error = getattr(exc, "error", None)
    message = getattr(error, "message", None) or getattr(exc, "message", None) or str(exc)
    return " ".join(str(message).split())[:500]
