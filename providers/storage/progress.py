"""A rich progress bar behind the store's `progress(done, total)` callbacks, for the CLI
(messages and progress go to stderr; rich honours NO_COLOR and non-terminals)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from providers.storage.streams import Progress


@contextlib.contextmanager
def progress_bar(description: str, console: Console | None = None) -> Iterator[Progress]:
    """A callback that drives one rich progress bar while the block runs: bytes done,
    total (or a pulsing bar while the total is unknown), speed and time left."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console or Console(stderr=True)) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update
