"""Waiting on an engine's own word, bounded by time: poll a condition until it holds or
a deadline passes.

A fixed number of polls bounds neither side of a wait: a loaded machine makes every
poll slower, and a slow engine (a cancelled Slurm job that stays COMPLETING while its
steps are killed) changes state later than any count assumed. So every wait in the
adapters and executors is a deadline in seconds, checked on a `Ticker`: wall time by
default, a virtual one in tests (`providers.polling.VirtualTicker`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Ticker(Protocol):
    """Where a wait reads the time and how it pauses (seconds, monotonic)."""

    def monotonic(self) -> float: ...

    def pause(self, seconds: float) -> None: ...


class WallTicker:
    """Real time: `time.monotonic` and an Event's timeout (no bare sleep)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def monotonic(self) -> float:
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        self._event.wait(max(0.0, seconds))


@dataclass
class VirtualTicker:
    """Time that moves only when a wait pauses (tests): a wait over it is instant and
    exact, whatever the machine's load."""

    now: float = 0.0
    pauses: int = 0

    def monotonic(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses += 1
        self.now += max(0.0, seconds)


def wait_for(
    condition: Callable[[], bool],
    seconds: float,
    *,
    ticker: Ticker | None = None,
    first: float = 0.1,
    most: float = 1.0,
) -> bool:
    """True once `condition()` holds; False once `seconds` have passed on `ticker`.

    The condition is asked at once, then after pauses growing from `first` to `most`
    seconds, and once more at the deadline itself, so a wait never gives up between
    two looks at a state that changed in time."""
    ticker = ticker or WallTicker()
    deadline = ticker.monotonic() + seconds
    pause = first
    while not condition():
        left = deadline - ticker.monotonic()
        if left <= 0:
            return False
        ticker.pause(min(pause, left))
        pause = min(most, pause * 1.5)
    return True
