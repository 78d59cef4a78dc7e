"""The provider error taxonomy: one root, a few classes the controller acts on.

Each adapter maps its cloud's codes onto these classes; the controller decides by
class (and `retryable`), never by a cloud's string. The cloud's own code is kept in
`code` for humans. Messages pass through `redact` (`pricing.userio.redact`, the one
redaction every room uses) so that a key or token quoted by an SDK never reaches a
log, the state store or a report.
"""

from __future__ import annotations

from typing import ClassVar

# The one redaction (pricing.userio.redact), named here too for the adapters.
from pricing.userio.redact import MASK as MASK
from pricing.userio.redact import redact as redact


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
