"""The provider error taxonomy: one root, a few classes the controller acts on.

Each adapter maps its cloud's codes onto these classes; the controller decides by
class (and `retryable`), never by a cloud's string. The cloud's own code is kept in
`code` for humans. Messages pass through `redact` so that a key or token quoted by
an SDK never reaches a log, the state store or a report.
"""

from __future__ import annotations

import re
from typing import ClassVar

MASK = "***"

# Whole secrets recognisable by their shape.
_SHAPES = (
    # PEM private keys
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
    ),
    re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),  # JWT
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),  # AWS key id
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),  # Google API key
    re.compile(r"\bya29\.[0-9A-Za-z_.-]+"),  # Google OAuth access token
    re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat|glpat|xox[abpr])[_-][A-Za-z0-9_-]{10,}"),
    # AWS secret access keys: 40 base64 characters mixing upper, lower and digits
    re.compile(
        r"(?<![A-Za-z0-9+/=])(?=[A-Za-z0-9+/]{0,39}[A-Z])(?=[A-Za-z0-9+/]{0,39}[a-z])"
        r"(?=[A-Za-z0-9+/]{0,39}[0-9])[A-Za-z0-9+/]{40}(?![A-Za-z0-9+/=])"
    ),
    # any other long token mixing upper, lower and digits (ids and UUIDs are one case)
    re.compile(
        r"(?<![A-Za-z0-9_+=-])(?=[A-Za-z0-9_+=-]*[A-Z])(?=[A-Za-z0-9_+=-]*[a-z])"
        r"(?=[A-Za-z0-9_+=-]*[0-9])[A-Za-z0-9_+=-]{32,}"
    ),
)
# Values after a name that says "secret": key=value, key: value, "key": "value".
_NAMED = re.compile(
    r"""(?ix)
    (?P<name>["']?[\w.-]*(?:secret|token|passw(?:or)?d|pwd|credential|signature|api[_-]?key
        |access[_-]?key|account[_-]?key|private[_-]?key|shared[_-]?access[_-]?key|\bsig\b)
        [\w.-]*["']?)
    (?P<sep>\s*[:=]\s*)
    (?P<value>"[^"]*"|'[^']*'|[^\s,;&"'<>)}\]]+)
    """
)
_AUTH_HEADER = re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:(?:bearer|basic|token)\s+)?[^\s,;]+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@")


def redact(text: str) -> str:
    """`text` with anything that looks like a key, token, password or signature masked.

    Errs on the side of masking: a long mixed-case token is masked even when it is
    harmless, since a leaked secret cannot be taken back.
    """
    text = _URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    text = _AUTH_HEADER.sub(rf"\1{MASK}", text)
    text = _BEARER.sub(rf"\1{MASK}", text)
    text = _NAMED.sub(lambda m: f"{m['name']}{m['sep']}{_mask_value(m['value'])}", text)
    for shape in _SHAPES:
        text = shape.sub(MASK, text)
    return text


def _mask_value(value: str) -> str:
    if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


class ProviderError(Exception):
    """A provider call failed. `retryable`: the same request may succeed later."""

    default_retryable: ClassVar[bool] = False

    def __init__(
        self, provider: str, message: str, retryable: bool | None = None, code: str = ""
    ) -> None:
        self.provider = provider
        self.message = redact(message)
        self.retryable = self.default_retryable if retryable is None else retryable
        self.code = redact(code)  # the cloud's own error code, for humans only
        super().__init__(provider, self.message)

    def __str__(self) -> str:
        suffix = f" [{self.code}]" if self.code else ""
        return f"{self.provider}: {self.message}{suffix}"

    def __reduce__(self):  # keep every field across pickling (process pools, queues)
        return (type(self), (self.provider, self.message, self.retryable, self.code))


class InsufficientCapacity(ProviderError):
    """No capacity for this offer and market now: mark it unavailable for a while, fail over."""

    default_retryable = True


class QuotaExceeded(ProviderError):
    """The account's quota forbids it: another region or cloud, or a human raising the quota."""


class RateLimited(ProviderError):
    """The provider throttled us: back off and retry the same call."""

    default_retryable = True


class CredentialsError(ProviderError):
    """Missing, expired or insufficient credentials: nothing will work until a human acts."""


class NotFound(ProviderError):
    """The instance (or object) does not exist, or no longer does."""


class InvalidRequest(ProviderError):
    """The request can never succeed as asked (unknown type, bad parameter): a bug or bad input."""
