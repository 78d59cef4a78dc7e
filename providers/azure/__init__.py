"""The Azure provider: virtual machines through azure-mgmt-compute (extra `broker[azure]`).

Importing this package loads no SDK; the client is made on first use."""

from providers.azure.provider import AzureProvider

__all__ = ["AzureProvider"]
