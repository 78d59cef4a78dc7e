"""botocore errors onto the broker's taxonomy: one table, one function.

AWS names every failure with a code (`ClientError.response["Error"]["Code"]`); the code
decides, the HTTP status is the fallback. Errors raised before an answer (no
credentials, an endpoint that does not answer, a bad parameter caught by botocore's own
validation) are decided by their class. Messages go through `ProviderError`, which
redacts them, and the botocore exception is not chained (`from None` at the call site),
so a traceback cannot carry a signed request either.
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    SSOError,
    TokenRetrievalError,
)
from botocore.exceptions import ConnectionError as AwsConnectionError

from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)

NAME = "aws"
CREDENTIALS_HINT = "check the AWS credentials (environment, ~/.aws, SSO, instance role)"


class _Retryable(ProviderError):
    """Marker for the table: a plain ProviderError the same call may survive (5xx)."""


# AWS error codes -> class. SpotMaxPriceTooLow is capacity: the spot market is above the
# cap for now, the place may come back below it. IdempotentParameterMismatch is the
# ClientToken of an attempt reused with another request. Unsupported (a type not sold in
# the asked zone) can never succeed as asked: invalid.
CODES: dict[str, type[ProviderError]] = {
    "InsufficientInstanceCapacity": InsufficientCapacity,
    "InsufficientCapacity": InsufficientCapacity,
    "InsufficientHostCapacity": InsufficientCapacity,
    "InsufficientReservedInstanceCapacity": InsufficientCapacity,
    "InsufficientFreeAddressesInSubnet": InsufficientCapacity,
    "SpotMaxPriceTooLow": InsufficientCapacity,
    "VcpuLimitExceeded": QuotaExceeded,
    "MaxSpotInstanceCountExceeded": QuotaExceeded,
    "InstanceLimitExceeded": QuotaExceeded,
    "VolumeLimitExceeded": QuotaExceeded,
    "ResourceLimitExceeded": QuotaExceeded,
    "ServiceQuotaExceededException": QuotaExceeded,
    "PendingVerification": QuotaExceeded,
    "RequestLimitExceeded": RateLimited,
    "Throttling": RateLimited,
    "ThrottlingException": RateLimited,
    "ThrottledException": RateLimited,
    "RequestThrottled": RateLimited,
    "RequestThrottledException": RateLimited,
    "TooManyRequestsException": RateLimited,
    "EC2ThrottledException": RateLimited,
    "SlowDown": RateLimited,
    "AuthFailure": CredentialsError,
    "UnauthorizedOperation": CredentialsError,
    "AccessDenied": CredentialsError,
    "AccessDeniedException": CredentialsError,
    "InvalidClientTokenId": CredentialsError,
    "UnrecognizedClientException": CredentialsError,
    "SignatureDoesNotMatch": CredentialsError,
    "IncompleteSignature": CredentialsError,
    "InvalidAccessKeyId": CredentialsError,
    "MissingAuthenticationToken": CredentialsError,
    "ExpiredToken": CredentialsError,
    "ExpiredTokenException": CredentialsError,
    "RequestExpired": CredentialsError,
    "OptInRequired": CredentialsError,
    "Blocked": CredentialsError,
    "InvalidParameterValue": InvalidRequest,
    "InvalidParameter": InvalidRequest,
    "InvalidParameterCombination": InvalidRequest,
    "MissingParameter": InvalidRequest,
    "UnknownParameter": InvalidRequest,
    "ValidationError": InvalidRequest,
    "ValidationException": InvalidRequest,
    "Unsupported": InvalidRequest,
    "UnsupportedOperation": InvalidRequest,
    "IdempotentParameterMismatch": InvalidRequest,
    "InvalidInstanceType": InvalidRequest,
    "InvalidAMIID.NotFound": InvalidRequest,
    "InvalidAMIID.Unavailable": InvalidRequest,
    "InvalidSubnetID.NotFound": InvalidRequest,
    "InvalidGroup.NotFound": InvalidRequest,
    "InvalidKeyPair.NotFound": InvalidRequest,
    "InvalidInstanceID.NotFound": NotFound,
    "InvalidInstanceID.Malformed": NotFound,
    "InvalidSpotInstanceRequestID.NotFound": NotFound,
    "NoSuchResourceException": NotFound,
    "ResourceNotFoundException": NotFound,
    "InternalError": _Retryable,
    "InternalFailure": _Retryable,
    "ServiceUnavailable": _Retryable,
    "Unavailable": _Retryable,
}
# Codes the table does not name, by their shape (checked in order).
SUFFIXES: tuple[tuple[str, type[ProviderError]], ...] = (
    (".NotFound", NotFound),
    (".Malformed", InvalidRequest),
)
PREFIXES: tuple[tuple[str, type[ProviderError]], ...] = (("Invalid", InvalidRequest),)
STATUSES: dict[int, type[ProviderError]] = {
    401: CredentialsError,
    403: CredentialsError,
    404: NotFound,
    429: RateLimited,
}
# Errors raised before any answer, by class (checked in order: subclasses first).
EXCEPTIONS: tuple[tuple[type[BaseException], type[ProviderError]], ...] = (
    (NoCredentialsError, CredentialsError),
    (PartialCredentialsError, CredentialsError),
    (CredentialRetrievalError, CredentialsError),
    (TokenRetrievalError, CredentialsError),
    (SSOError, CredentialsError),
    (ProfileNotFound, CredentialsError),
    (EndpointConnectionError, _Retryable),
    (ConnectTimeoutError, _Retryable),
    (ReadTimeoutError, _Retryable),
    (ConnectionClosedError, _Retryable),
    (HTTPClientError, _Retryable),
    (AwsConnectionError, _Retryable),
    (ParamValidationError, InvalidRequest),
    (NoRegionError, InvalidRequest),
)


def classify(code: str, status: int = 0) -> type[ProviderError]:
    """The class for an AWS error code (the HTTP status when the code says nothing):
    unknown 5xx are retryable, other unknown errors are plain ProviderError."""
    kind = CODES.get(code)
    if kind is None:
        kind = next((k for suffix, k in SUFFIXES if code.endswith(suffix)), None)
    if kind is None:
        kind = next((k for prefix, k in PREFIXES if code.startswith(prefix)), None)
    if kind is None:
        kind = STATUSES.get(status)
    if kind is None:
        kind = _Retryable if status >= 500 else ProviderError
    return kind


def map_error(exc: BaseException, action: str = "") -> ProviderError:
    """The ProviderError for a botocore exception (a ProviderError passes unchanged)."""
    if isinstance(exc, ProviderError):
        return exc
    prefix = f"{action}: " if action else ""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        text = " ".join(str(error.get("Message") or exc).split())[:500]
        return _build(classify(code, status), f"{prefix}{text}", code)
    kind = next((k for cls, k in EXCEPTIONS if isinstance(exc, cls)), None)
    name = type(exc).__name__
    if kind is _Retryable:
        return _build(kind, f"{prefix}cannot reach AWS: {exc}", name)
    if kind is not None:
        return _build(kind, f"{prefix}{exc}", name)
    if isinstance(exc, BotoCoreError):
        return ProviderError(NAME, f"{prefix}{name}: {exc}", code=name)
    return ProviderError(NAME, f"{prefix}{name}: {exc}")


def _build(kind: type[ProviderError], message: str, code: str) -> ProviderError:
    if kind is _Retryable:
        return ProviderError(NAME, message, retryable=True, code=code)
    if kind is CredentialsError:
        message = f"{message} ({CREDENTIALS_HINT})"
    return kind(NAME, message, code=code)
