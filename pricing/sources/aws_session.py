"""boto3 for the AWS price sources (on-demand `aws`, spot `aws_spot`): a session only
when the standard credential chain finds credentials, bounded retries, and one line for
a client error (its code, what kind it is, the HTTP status)."""

from __future__ import annotations

from typing import Any


def session_with_credentials() -> Any | None:
    """A boto3 Session when boto3 is installed and finds credentials, else None."""
    try:
        import boto3
    except ImportError:
        return None
    session = boto3.session.Session()
    try:
        found = session.get_credentials()
    except Exception:  # a broken profile: as good as none, the bulk files need none
        return None
    return session if found is not None else None


def client_config() -> Any:
    from botocore.config import Config

    return Config(
        connect_timeout=10,
        read_timeout=60,
        retries={"mode": "standard", "total_max_attempts": 5},  # throttling: bounded backoff
    )


def client_error(exc: Any) -> str:
    error = exc.response.get("Error", {})
    code, message = error.get("Code", "?"), error.get("Message", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    kind = ""
    if code in ("AuthFailure", "UnauthorizedOperation", "AccessDeniedException", "AccessDenied"):
        kind = " (permission denied)"
    elif "Throttl" in code or code == "RequestLimitExceeded":
        kind = " (throttled; gave up after 5 tries)"
    return f"{code}{kind} HTTP {status}: {message}".strip()
