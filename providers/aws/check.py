"""Is AWS usable from here? One STS GetCallerIdentity, short timeouts, no retries.

GetCallerIdentity needs no IAM permission, so it tells the cases apart: no credentials
in the standard chain, an endpoint that does not answer (BROKER_AWS_ENDPOINT or the
public STS), credentials AWS rejects or an account that may not call it, and ok with the
account id. Importing this module needs boto3: `providers.checks` turns its absence
into "SDK not installed".
"""

from __future__ import annotations

import time

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import ConnectionError as AwsConnectionError

from providers.aws.errors import CODES
from providers.cloud import CheckResult, endpoint_override
from providers.errors import CredentialsError, redact

NAME = "aws"
DEFAULT_REGION = "us-east-1"
# Codes that say the credentials themselves are wrong (as against "not allowed").
REJECTED = frozenset(
    {
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "UnrecognizedClientException",
        "AuthFailure",
    }
)


def check(timeout: float = 5.0) -> CheckResult:
    """Whether AWS answers with these credentials within about `timeout` seconds."""
    start = time.monotonic()
    endpoint = endpoint_override(NAME)

    def result(usable: bool, reason: str, detail: str = "") -> CheckResult:
        return CheckResult(NAME, usable, reason, redact(detail), time.monotonic() - start)

    try:
        session = boto3.session.Session()
        credentials = session.get_credentials()
    except BotoCoreError as exc:  # a broken profile, a failing credential_process
        return result(False, "no credentials", f"{type(exc).__name__}: {exc}")
    if credentials is None:
        return result(
            False, "no credentials", "none in the environment, ~/.aws, SSO or an instance role"
        )
    region = session.region_name or DEFAULT_REGION
    config = Config(
        connect_timeout=max(0.1, timeout / 2),
        read_timeout=max(0.1, timeout / 2),
        retries={"total_max_attempts": 1, "mode": "standard"},  # no retries
    )
    sts = session.client("sts", region_name=region, endpoint_url=endpoint, config=config)
    where = endpoint or sts.meta.endpoint_url
    try:
        identity = sts.get_caller_identity()
    except NoCredentialsError:
        return result(False, "no credentials", "none in the standard chain")
    except (AwsConnectionError, HTTPClientError) as exc:  # refused, timed out, closed
        return result(False, "unreachable", f"{where}: {type(exc).__name__}")
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", ""))
        detail = f"{message} [{code}]"  # not "Code: message": redact reads "…Token: x" as a secret
        if code in REJECTED:
            return result(False, "credentials rejected", detail)
        if CODES.get(code) is CredentialsError:
            return result(False, "denied", detail)
        return result(False, "error", detail)
    except BotoCoreError as exc:
        return result(False, "error", f"{type(exc).__name__}: {exc}")
    detail = f"account {identity.get('Account', '?')}, {region}"
    return result(True, "ok", detail + (f", via {endpoint}" if endpoint else ""))
