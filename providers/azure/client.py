"""The ComputeManagementClient the Azure adapter talks through, and how its calls fail.

The SDK is imported here only inside functions: importing the adapter loads none of it,
and the client is made on first use (no credential work before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from providers.azure.errors import NAME, map_error
from providers.cloud import sdk_call
from providers.errors import CredentialsError

T = TypeVar("T")
PUBLIC_ENDPOINT = "https://management.azure.com"


def make_client(
    subscription_id: str | None,
    credential: Any,
    endpoint: str | None,
    connection_verify: bool | str,
    polling_interval: float | None,
) -> tuple[Any, Any]:
    """(ComputeManagementClient, the credential it uses) for `subscription_id` on ARM at
    `endpoint` (default the public one); `credential` None: DefaultAzureCredential.
    CredentialsError without a subscription."""
    from azure.mgmt.compute import ComputeManagementClient

    if not subscription_id:
        raise CredentialsError(NAME, "no subscription: set AZURE_SUBSCRIPTION_ID")
    if credential is None:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential()
    base_url = (endpoint or PUBLIC_ENDPOINT).rstrip("/")
    options: dict[str, Any] = {
        "base_url": base_url,
        "connection_verify": connection_verify,
        "retry_policy": sdk_retry_policy(),
        # A sovereign or private ARM takes tokens for its own audience.
        "credential_scopes": [f"{base_url}/.default"],
    }
    if polling_interval is not None:
        options["polling_interval"] = polling_interval
    return ComputeManagementClient(credential, subscription_id, **options), credential


def sdk_retry_policy(**options: Any) -> Any:
    """azure-core's RetryPolicy minus 429: the adapter backs off throttling itself
    (with_backoff, injectable sleep), so the two layers do not multiply."""
    from azure.core.pipeline.policies import RetryPolicy

    class _LeaveThrottlingToBroker(RetryPolicy):
        def is_retry(self, settings: Any, response: Any) -> bool:
            if response.http_response.status_code == 429:
                return False
            return super().is_retry(settings, response)

    return _LeaveThrottlingToBroker(**options)


def call(fn: Callable[[], T], action: str, sleep: Callable[[float], None]) -> T:
    """`fn()` with Azure's errors mapped (errors.py), throttling retried with backoff."""
    from azure.core.exceptions import AzureError

    return sdk_call(fn, AzureError, map_error, action, sleep)
