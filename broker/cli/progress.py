"""Progress bars for long commands: rich, on stderr, only on a terminal (a pipe, a log
file or CI gets nothing), and gone when the work is done."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def shown() -> bool:
    """Whether a bar may be drawn: stderr is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(items: Sequence[T], label: str, minimum: int = 0) -> Iterator[T]:
    """`items`, one by one, with a bar when there are at least `minimum` of them."""
    if len(items) < minimum or not shown():
        yield from items
        return
    with bar(label, len(items)) as advance:
        for item in items:
            yield item
            advance(1)


@contextmanager
def bar(label: str, total: float | None) -> Iterator[Callable[[float], None]]:
    """A bar of `total` steps (None: unknown); yields `advance(steps)`. Nothing is drawn
    off a terminal, and `advance` is then free."""
    if not shown():
        yield lambda steps: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True) as p:
        task = p.add_task(label, total=total)
        yield lambda steps: p.advance(task, steps)
