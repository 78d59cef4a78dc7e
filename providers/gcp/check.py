"""`check`: is Compute Engine usable from here, and if not, the one thing to fix.

In order: the SDK is installed; google.auth.default() finds credentials (the standard
chain: GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default login, the metadata
server on GCE); a project is known; one cheap call (zones.list, one result) answers.
The call has a short timeout and no retries, so an unreachable endpoint answers in
`timeout` seconds. The detail names the project and endpoint, never a secret.
"""

from __future__ import annotations

import importlib
import os
import time

from providers.cloud import CheckResult, endpoint_override
from providers.errors import redact

CLOUD = "gcp"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def check(timeout: float = 5.0) -> CheckResult:
    """Whether GCE answers with the credentials and project this process would use."""
    started = time.monotonic()

    def result(usable: bool, reason: str, detail: str = "") -> CheckResult:
        seconds = round(time.monotonic() - started, 3)
        return CheckResult(CLOUD, usable, redact(reason), redact(detail), seconds)

    try:
        import google.auth
        import google.auth.exceptions as auth_errors
        import requests
        from google.api_core import exceptions as api
        from google.api_core.client_options import ClientOptions

        compute_v1 = importlib.import_module("google.cloud.compute_v1")
    except ImportError as exc:
        return result(
            False, f"the gcp extra is not installed ({exc.name}): pip install 'broker[gcp]'"
        )
    endpoint = endpoint_override(CLOUD)
    where = endpoint or "compute.googleapis.com"
    try:
        credentials, found_project = google.auth.default(scopes=SCOPES)
    except auth_errors.DefaultCredentialsError:
        return result(
            False,
            "no credentials found (run `gcloud auth application-default login` "
            "or set GOOGLE_APPLICATION_CREDENTIALS)",
        )
    project = (
        os.environ.get("GOOGLE_CLOUD_PROJECT")
        or os.environ.get("CLOUDSDK_CORE_PROJECT")
        or found_project
    )
    if not project:
        return result(False, "no project: set GOOGLE_CLOUD_PROJECT", f"endpoint {where}")
    detail = f"project {project} at {where}"
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    zones = compute_v1.ZonesClient(
        credentials=credentials, transport="rest", client_options=options
    )
    request = compute_v1.ListZonesRequest(project=project, max_results=1)
    try:
        zones.list(request=request, retry=None, timeout=timeout)
    except (api.Unauthorized, auth_errors.RefreshError) as exc:
        return result(False, f"credentials rejected: {_first_line(exc)}", detail)
    except api.Forbidden as exc:
        return result(False, f"permission denied: {_first_line(exc)}", detail)
    except api.NotFound:
        return result(False, f"project {project} not found", detail)
    except (
        api.ServerError,
        api.RetryError,
        auth_errors.TransportError,
        requests.RequestException,
    ) as exc:
        return result(False, f"unreachable: {type(exc).__name__}", detail)
    except api.GoogleAPICallError as exc:
        return result(False, f"GCE refused: {_first_line(exc)}", detail)
    return result(True, "ok", detail)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]
