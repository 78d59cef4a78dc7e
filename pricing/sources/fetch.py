"""HTTP for the public price sources: bounded retries, exact numbers, one error type.

Every source reads its pages through `Http`, so that throttling (429), a busy
server (5xx) or a dropped connection are retried the same way everywhere: at most
`attempts` tries, pausing between them with capped exponential backoff (half fixed,
half random, so a pause is never 0) or the server's `Retry-After` when it is
shorter than the cap. What cannot be retried, or still fails after the last try,
becomes `SourceError` with a one-line reason that names the host and never a
credential (keys travel in headers, never in URLs). JSON is parsed with
`parse_float=Decimal`: prices stay the digits the cloud published.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pricing.userio.redact import redact

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
USER_AGENT = "broker-pricing-refresh/1"


class SourceError(Exception):
    """A price source could not be read: network, credentials, throttling, a bad page.

    Its message is redacted (`pricing.userio.redact`): an error page that quotes the
    request (an access key id, a session token) never reaches stderr or the status file.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(redact(message))


class MissingCredentials(SourceError):
    """A source that needs credentials found none (reported as skipped, not failed)."""


class NotFound(SourceError):
    """HTTP 404: the page does not exist (e.g. a region without a price file)."""


def where(url: str) -> str:
    """Host and path of `url`, without its query (for messages)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.netloc}{parts.path}"


@dataclass
class Http:
    """GET with bounded retries. `sleep` is injected so that tests do not wait."""

    timeout: float = 30.0
    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 10.0
    sleep: Callable[[float], None] = time.sleep
    pauses: list[float] = field(default_factory=list)  # every backoff pause taken, in order

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> bytes:
        """The body of `url` (whole), retried as the module docstring says."""
        with self._open(url, headers) as answer:
            try:
                return answer.read()
            except (OSError, urllib.error.URLError) as exc:
                raise SourceError(f"{where(url)}: connection lost while reading ({exc})") from None

    def get_json(self, url: str, headers: Mapping[str, str] | None = None) -> Any:
        """`url`'s body as JSON, numbers with a fraction as Decimal; SourceError when the
        page is not JSON (a malformed page is reported, never skipped)."""
        body = self.get(url, headers)
        try:
            return json.loads(body, parse_float=Decimal)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SourceError(f"{where(url)}: malformed page, not JSON ({exc})") from None

    def lines(self, url: str, headers: Mapping[str, str] | None = None) -> Iterator[str]:
        """`url`'s body as text lines, streamed (a bulk file of hundreds of MB never sits in
        memory). Retries happen before the first byte only."""
        answer = self._open(url, headers)
        try:
            for raw in answer:
                yield raw.decode("utf-8")
        except (OSError, urllib.error.URLError) as exc:
            raise SourceError(f"{where(url)}: connection lost while reading ({exc})") from None
        except UnicodeDecodeError as exc:
            raise SourceError(f"{where(url)}: malformed page, not UTF-8 ({exc})") from None
        finally:
            answer.close()

    def pause(self, attempt: int, retry_after: str | None = None) -> None:
        """Wait before try `attempt + 1`: Retry-After when given (capped), else backoff."""
        delay = min(self.max_delay, self.base_delay * 2**attempt)
        delay = delay / 2 + random.uniform(0, delay / 2)
        if retry_after:
            try:
                delay = min(self.max_delay, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: keep our own backoff
        self.pauses.append(delay)
        self.sleep(delay)

    def _open(self, url: str, headers: Mapping[str, str] | None):
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
        last = ""
        for attempt in range(self.attempts):
            try:
                return urllib.request.urlopen(request, timeout=self.timeout)  # noqa: S310
            except urllib.error.HTTPError as exc:
                status, retry_after = exc.code, exc.headers.get("Retry-After")
                detail = _error_text(exc)
                exc.close()
                if status not in RETRY_STATUS:
                    kind = NotFound if status == 404 else SourceError
                    raise kind(_refusal(url, status, exc.reason, detail)) from None
                kind = "throttled" if status == 429 else "server error"
                last = f"{kind} (HTTP {status})"
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last, retry_after = f"unreachable ({reason})", None
            if attempt < self.attempts - 1:
                self.pause(attempt, retry_after)
        raise SourceError(f"{where(url)}: {last}; gave up after {self.attempts} tries")


def _refusal(url: str, status: int, reason: str, detail: str) -> str:
    kind = {401: "not authorised", 403: "permission denied", 404: "not found"}.get(status, "")
    text = f"{where(url)}: HTTP {status} {reason}" + (f" ({kind})" if kind else "")
    return f"{text}: {detail}" if detail else text


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The first line of an error body, short (APIs explain a 400/403 there)."""
    try:
        body = exc.read(2000).decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        document = json.loads(body)
        message = document.get("error", {}).get("message") if isinstance(document, dict) else ""
        body = message or body
    except (json.JSONDecodeError, AttributeError):
        pass
    return " ".join(body.split())[:200]
