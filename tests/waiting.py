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


def running_program(attempt_id: str, program: str) -> bool:
    """Whether a process of the broker attempt `attempt_id` (its BROKER_ATTEMPT variable)
    now runs `program`: the job's command has been exec'd, so a signal sent to its
    group can no longer fall between the shell's fork and exec and be lost."""
    from pathlib import Path

    wanted = f"BROKER_ATTEMPT={attempt_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != program:
                continue
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                return True
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return False


def wait_ended(provider, instance_id: str, timeout: float = 30.0) -> bool:
    """True once the provider reports the instance ended (any provider: it polls
    `describe`); False after `timeout` seconds."""
    return wait_until(lambda: not provider.describe(instance_id).active, timeout)

