"""Who is using the broker: the submitter recorded on every job, the name `--mine` means.

`BROKER_USER` when set (CI, a service account, a shared login), else the operating
system's login name. Read when asked, never at import.
"""

from __future__ import annotations

import getpass
import os

UNKNOWN = "unknown"


def current_user() -> str:
    """The user this process acts for: `BROKER_USER`, else the OS user ("unknown" when
    the system cannot say, e.g. a uid with no passwd entry in a container)."""
    named = os.environ.get("BROKER_USER", "").strip()
    if named:
        return named
    try:
        return getpass.getuser() or UNKNOWN
    except (KeyError, OSError):  # no passwd entry, no LOGNAME/USER
        return UNKNOWN
