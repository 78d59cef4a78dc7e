"""Bounded waits for tests: poll a condition on an Event's timeout (never a bare sleep)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """True once `condition()` holds; False after `timeout` seconds."""
    pause, deadline = threading.Event(), time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True
