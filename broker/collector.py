"""The cyclic garbage collector paused over work that allocates many small objects and
makes no reference cycles worth collecting (loading manifests, planning a batch), where
its repeated scans would otherwise cost a third of the time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """The collector is off inside, and on again after (if it was). With `freeze`, the
    objects alive then are frozen (`gc.freeze`) and never scanned again: for a command's
    input, alive until the command ends (`broker plan DIR` pauses it over loading, its
    planning and its table). The controller plans every pass and must not freeze."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
