"""Checkpoint storage: one streaming `ObjectStore` over apache-libcloud drivers for
`s3://`, `gs://`, `az://` and `file://` URIs (credentials: providers.storage.drivers).

Importing this package loads no libcloud; the first transfer does.
"""

from providers.storage.drivers import StorageUnavailable
from providers.storage.store import ObjectInfo, ObjectStore
from providers.storage.streams import Progress
from providers.storage.uris import InvalidUri, ObjectUri, parse_uri

__all__ = [
    "InvalidUri",
    "ObjectInfo",
    "ObjectStore",
    "ObjectUri",
    "Progress",
    "StorageUnavailable",
    "parse_uri",
]
