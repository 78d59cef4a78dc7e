"""libcloud storage drivers built from each cloud's standard credentials.

- AWS: boto3's credential chain when boto3 is installed (environment, shared files,
  SSO, container and instance roles; `botocore.session.get_session().get_credentials()`),
  else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN. Region: AWS_REGION,
  AWS_DEFAULT_REGION, the profile's region, else us-east-1; a bucket elsewhere is
  followed by the store (S3 names the bucket's region in its answer).
- Google Cloud Storage: an HMAC key (interoperability API) in GOOGLE_STORAGE_HMAC_ACCESS_ID
  and GOOGLE_STORAGE_HMAC_SECRET (create one with `gcloud storage hmac create SA_EMAIL`).
- Azure Blob Storage: the account in AZURE_STORAGE_ACCOUNT and its key in
  AZURE_STORAGE_KEY (the az CLI's variables).

Endpoint overrides, for tests and private endpoints, are `http(s)://host:port` in
BROKER_S3_ENDPOINT, BROKER_GCS_ENDPOINT and BROKER_AZURE_BLOB_ENDPOINT. An Azure
endpoint that is not an Azure host is addressed with the account as a path prefix
(`/account/container/blob`, as Azurite wants).

libcloud is imported here, inside functions, so importing providers.storage costs
nothing. Every request gets a timeout, streamed ones included (see `bounded`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from providers.cloud import endpoint_override
from providers.errors import CredentialsError, InvalidRequest, ProviderError

DEFAULT_TIMEOUT = 60.0  # seconds per request (connect and each read)
DEFAULT_S3_REGION = "us-east-1"
GCS_KEY_ID, GCS_SECRET = "GOOGLE_STORAGE_HMAC_ACCESS_ID", "GOOGLE_STORAGE_HMAC_SECRET"
AZURE_ACCOUNT, AZURE_KEY = "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"
# providers.cloud.endpoint_override names: BROKER_<NAME>_ENDPOINT
ENDPOINT_NAMES = {"s3": "s3", "gs": "gcs", "az": "azure_blob"}


class StorageUnavailable(ProviderError):
    """apache-libcloud (and fasteners, for file://) are not installed: the storage extra."""


@dataclass(frozen=True)
class Endpoint:
    """Where a driver connects instead of the cloud's public endpoint."""

    host: str
    port: int
    secure: bool


def parse_endpoint(url: str, variable: str) -> Endpoint:
    """`http(s)://host[:port]` as an Endpoint; InvalidRequest naming `variable` otherwise."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.username
        or port == -1
    ):
        raise InvalidRequest("storage", f"{variable} must look like http(s)://host:port")
    secure = parts.scheme == "https"
    return Endpoint(parts.hostname, port or (443 if secure else 80), secure)


def endpoint(scheme: str) -> Endpoint | None:
    """The endpoint override for `scheme` ("s3", "gs", "az"), or None."""
    name = ENDPOINT_NAMES[scheme]
    url = endpoint_override(name)
    return parse_endpoint(url, f"BROKER_{name.upper()}_ENDPOINT") if url else None


def require_libcloud() -> None:
    """StorageUnavailable, with the fix, when libcloud is not installed."""
    try:
        import libcloud.storage.base  # noqa: F401
    except ImportError as exc:
        raise StorageUnavailable("storage", _missing(exc)) from exc


def _missing(exc: ImportError) -> str:
    name = exc.name or "fasteners"  # libcloud's Local driver names no module
    package = "apache-libcloud" if name.startswith("libcloud") else name
    return f"checkpoint storage needs {package}: pip install 'broker[storage]'"


def bounded(driver: Any, timeout: float) -> Any:
    """`driver`, with `timeout` on its streamed requests too: libcloud gives its timeout
    to buffered requests only, so a stalled download would otherwise wait forever."""
    session = driver.connection.connection.session
    adapter = _timeout_adapter()(timeout)
    for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    return driver


@functools.cache
def _timeout_adapter() -> type:
    from requests.adapters import HTTPAdapter

    class TimeoutAdapter(HTTPAdapter):
        """An HTTPAdapter whose requests without a timeout get `default_timeout`."""

        def __init__(self, default_timeout: float) -> None:
            super().__init__()
            self.default_timeout = default_timeout

        def send(self, request, **kwargs):  # type: ignore[no-untyped-def]
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = self.default_timeout
            return super().send(request, **kwargs)

    return TimeoutAdapter


# --- AWS ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AwsKeys:
    access_key: str
    secret_key: str
    token: str | None

    def __repr__(self) -> str:  # never print a secret, even in a traceback's locals
        return "AwsKeys(***)"


def aws_keys() -> AwsKeys:
    """The AWS credentials of the standard chain; CredentialsError when there are none."""
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:
        return _aws_env_keys()
    try:
        credentials = botocore.session.get_session().get_credentials()
        frozen = credentials.get_frozen_credentials() if credentials else None
    except botocore.exceptions.BotoCoreError as exc:
        raise CredentialsError("s3", f"AWS credentials unusable: {type(exc).__name__}") from None
    if frozen is None or not frozen.access_key or not frozen.secret_key:
        raise CredentialsError(
            "s3",
            "no AWS credentials found (environment, ~/.aws, SSO, container or instance role)",
        )
    return AwsKeys(frozen.access_key, frozen.secret_key, frozen.token or None)


def _aws_env_keys() -> AwsKeys:
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise CredentialsError(
            "s3", "no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    return AwsKeys(key, secret, os.environ.get("AWS_SESSION_TOKEN") or None)


def aws_region() -> str:
    """The region S3 requests go to first: AWS_REGION, AWS_DEFAULT_REGION, the profile."""
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        try:
            import botocore.session

            region = botocore.session.get_session().get_config_variable("region")
        except Exception:  # no boto3, or a broken profile: the default will do
            region = None
    return region or DEFAULT_S3_REGION


def s3_driver(region: str, *, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """An S3 driver for `region` (path-style requests, SigV4)."""
    require_libcloud()
    from libcloud.storage.drivers.s3 import REGION_TO_HOST_MAP, S3StorageDriver

    keys, where = aws_keys(), endpoint("s3")
    known = region in REGION_TO_HOST_MAP
    options: dict[str, Any] = {"timeout": timeout, "token": keys.token}
    if where is not None:
        options |= {"host": where.host, "port": where.port, "secure": where.secure}
    elif not known:
        options["host"] = f"s3.{region}.amazonaws.com"
    driver = S3StorageDriver(
        keys.access_key,
        keys.secret_key,
        region=region if known else DEFAULT_S3_REGION,
        **options,
    )
    if not known:
        # libcloud knows a fixed list of regions; its signer reads region_name.
        driver.region_name = driver.region = region
    return bounded(driver, timeout)


# --- Google Cloud Storage ----------------------------------------------------------------


def gcs_driver(*, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """A Google Cloud Storage driver on an HMAC key (interoperability API)."""
    require_libcloud()
    from libcloud.storage.drivers.google_storage import GoogleStorageDriver

    key, secret = os.environ.get(GCS_KEY_ID), os.environ.get(GCS_SECRET)
    if not key or not secret:
        raise CredentialsError(
            "gs", f"no Google Cloud Storage HMAC key: set {GCS_KEY_ID} and {GCS_SECRET}"
        )
    driver = GoogleStorageDriver(key, secret, timeout=timeout)
    where = endpoint("gs")
    if where is not None:
        # The constructor's host/port land in auth_type/credential_file (libcloud 3.9):
        # point the built connection at the endpoint instead.
        connection = driver.connection
        connection.host, connection.port, connection.secure = where.host, where.port, where.secure
        connection.connect()
    return bounded(driver, timeout)


# --- Azure Blob Storage ------------------------------------------------------------------


def azure_driver(*, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """An Azure Blob Storage driver on the account's shared key."""
    require_libcloud()
    import binascii

    from libcloud.storage.drivers.azure_blobs import AzureBlobsStorageDriver

    account, key = os.environ.get(AZURE_ACCOUNT), os.environ.get(AZURE_KEY)
    if not account or not key:
        raise CredentialsError(
            "azure-blob", f"no Azure storage key: set {AZURE_ACCOUNT} and {AZURE_KEY}"
        )
    options: dict[str, Any] = {"timeout": timeout}
    where = endpoint("az")
    if where is not None:
        options |= {"host": where.host, "port": where.port, "secure": where.secure}
    try:
        driver = AzureBlobsStorageDriver(account, key, **options)
    except (binascii.Error, ValueError):
        raise CredentialsError("azure-blob", f"{AZURE_KEY} is not a base64 account key") from None
    return bounded(driver, timeout)


# --- local files -------------------------------------------------------------------------


def local_driver(base: str) -> Any:
    """A libcloud Local driver rooted at directory `base`.

    Its per-object lock is off: the store writes each object under a unique temporary
    name and renames it into place, so writers never share a file (and no lock files
    pile up in the temp directory).
    """
    try:
        from libcloud.storage.drivers.local import LocalStorageDriver
    except ImportError as exc:
        raise StorageUnavailable("file", _missing(exc)) from exc
    return LocalStorageDriver(base, ex_use_locking=False)
