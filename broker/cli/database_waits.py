"""`broker run` and a state database that is down: it waits, and goes on once it is back.

A run started while the database is down waits for it as a run does whose database goes
down mid-run: it says so once per try, tries again after 1, 2, 5, 10, then every 30 s,
and says when it is back (docs/state.md). A database that answers and refuses (a wrong
password, no such database) is not waited for: that is one line and exit 1, as it is
with `--once` and for every other command.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from broker.cli.exits import FAILED, fail

if TYPE_CHECKING:
    from broker.state.location import StateLocation

T = TypeVar("T")

DB_RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits for a state database that is down


def waited_out(step: Callable[[], T], once: bool, pause: Callable[[float], None] = time.sleep) -> T:
    """`step()`, run again after each wait while the state database is unavailable (a
    write lost with the connection is not half done: the next try sees what committed).
    With `once`, or when the database refuses us, one line and exit 1."""
    from broker.state.backend import StateRefused, StateUnavailable

    tries = 0
    while True:
        try:
            result = step()
        except StateUnavailable as exc:
            if once or isinstance(exc, StateRefused):
                fail(str(exc), FAILED)
            wait = DB_RETRY_S[min(tries, len(DB_RETRY_S) - 1)]
            print(f"broker: {exc}; trying again in {wait:g} s", file=sys.stderr)
            tries += 1
            pause(wait)
            continue
        if tries:
            print("broker: the state database is back", file=sys.stderr)
        return result


def wait_for_database(location: StateLocation, once: bool) -> None:
    """Before `broker run` opens its state: a database that is down is waited for (a
    file needs no wait; opening it is left to the run)."""
    from broker.clock import SystemClock
    from broker.state import StateStore
    from broker.state.location import DatabaseUrl

    if not isinstance(location, DatabaseUrl):
        return

    def reachable() -> None:
        with StateStore.open(location, SystemClock()):
            pass

    waited_out(reachable, once)
