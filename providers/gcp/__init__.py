"""The Google Compute Engine adapter (extra `gcp`: google-cloud-compute).

Importing this package loads no SDK: google-cloud-compute (about 2 s to import) is
imported when a `GcpProvider` is built or `check` runs.
"""

from providers.gcp.provider import GcpProvider

__all__ = ["GcpProvider"]
