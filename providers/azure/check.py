"""`check`: is Azure usable from here? Credentials first, then one cheap ARM call.

The call is the usage list of one location: small, scoped to the subscription, and
it needs the same read permission the broker needs. Retries are off and timeouts
short, and the whole check runs in a daemon thread so a credential that hangs
(a CLI prompt, a metadata endpoint that never answers) cannot hold the caller.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from providers.cloud import CheckResult, endpoint_override
from providers.errors import redact

NAME = "azure"
PUBLIC_ENDPOINT = "https://management.azure.com"


def check(
    timeout: float = 5.0,
    *,
    subscription_id: str | None = None,
    credential: Any = None,
    endpoint: str | None = None,
    connection_verify: bool | str = True,
    location: str = "eastus",
) -> CheckResult:
    """Whether Azure answers with these credentials (the standard chain by default):
    reason "ok" with the subscription as detail, or the one thing to fix."""
    start = time.monotonic()
    try:
        import azure.identity  # noqa: F401
        import azure.mgmt.compute  # noqa: F401
    except ImportError as exc:
        missing = exc.name or "azure-mgmt-compute"
        return CheckResult(
            NAME, False, f"SDK not installed ({missing}): pip install 'broker[azure]'"
        )
    box: list[CheckResult] = []
    options = {
        "subscription_id": subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID") or "",
        "credential": credential,
        "endpoint": (endpoint or endpoint_override(NAME) or PUBLIC_ENDPOINT).rstrip("/"),
        "connection_verify": connection_verify,
        "location": location,
    }
    worker = threading.Thread(
        target=lambda: box.append(_guarded(timeout, options)), daemon=True, name="azure-check"
    )
    worker.start()
    worker.join(timeout + 1.0)
    seconds = time.monotonic() - start
    if not box:
        return CheckResult(NAME, False, f"no answer within {timeout:g} s", seconds=seconds)
    result = box[0]
    return CheckResult(result.cloud, result.usable, result.reason, result.detail, seconds)


def _guarded(timeout: float, options: dict[str, Any]) -> CheckResult:
    """`_probe`, any exception of the SDK (an `http://` AZURE_AUTHORITY_HOST is a
    ValueError inside azure-identity) turned into the check's answer: in this thread an
    exception would print a traceback and leave the caller waiting for nothing."""
    try:
        return _probe(timeout, **options)
    except Exception as exc:
        return CheckResult(NAME, False, f"check failed: {type(exc).__name__}: {_first_line(exc)}")


def _probe(
    timeout: float,
    *,
    subscription_id: str,
    credential: Any,
    endpoint: str,
    connection_verify: bool | str,
    location: str,
) -> CheckResult:
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )
    from azure.mgmt.compute import ComputeManagementClient

    scope = f"{endpoint}/.default"
    try:
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential(process_timeout=max(1, int(timeout)))
        credential.get_token(scope)
    except ClientAuthenticationError as exc:  # CredentialUnavailableError is one
        return CheckResult(NAME, False, f"no credentials: {_first_line(exc)}")
    if not subscription_id:
        return CheckResult(NAME, False, "no subscription: set AZURE_SUBSCRIPTION_ID")
    where = "" if endpoint == PUBLIC_ENDPOINT else f" at {endpoint}"
    client = ComputeManagementClient(
        credential,
        subscription_id,
        base_url=endpoint,
        credential_scopes=[scope],
        connection_verify=connection_verify,
        retry_total=0,
        connection_timeout=timeout,
        read_timeout=timeout,
    )
    try:
        next(iter(client.usage.list(location)), None)
    except (ServiceRequestError, ServiceResponseError) as exc:
        return CheckResult(NAME, False, f"unreachable: {_first_line(exc)}", detail=endpoint)
    except HttpResponseError as exc:
        code = getattr(exc.error, "code", None) or str(exc.status_code or "")
        denied = isinstance(exc, ClientAuthenticationError) or exc.status_code in (401, 403, 404)
        reason = "denied" if denied else "error"
        detail = f"subscription {subscription_id}{where}"
        return CheckResult(NAME, False, f"{reason}: {code}: {_first_line(exc)}", detail=detail)
    finally:
        client.close()
    return CheckResult(NAME, True, "ok", detail=f"subscription {subscription_id}{where}")


def _first_line(exc: BaseException) -> str:
    """The first line of an SDK message, redacted (DefaultAzureCredential's run long)."""
    error = getattr(exc, "error", None)
    text = getattr(error, "message", None) or getattr(exc, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return redact(lines[0][:300] if lines else type(exc).__name__)
