"""One sandbox record's process, from its start to its end: observing it (its end
recorded once), stopping it (SIGTERM, SIGKILL after the grace), a played reclaim of
it, waiting for it. A part of SandboxProvider, which provides the attributes below;
a single-node instance is one record, a gang one per rank (gang_runs.py).
"""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from providers.base import InterruptionNotice
from providers.sandbox.jobs import remove_container
from providers.sandbox.processes import KILL_WAIT_SECONDS, Processes, signal_group
from providers.sandbox.records import EXIT_CODE, Record, Workdir, notice_of

if TYPE_CHECKING:
    from providers.base import Clock


class RecordRuns:
    """The per-record half of SandboxProvider (see the module docstring)."""

    _dir: Workdir
    _processes: Processes
    clock: Clock
    terminate_grace: float
    notice_seconds: float
    containers: tuple[str, ...] | None

    def _stop(self, record: Record) -> bool:
        """Terminate one record's process (SIGTERM, SIGKILL after the grace); False when
        it had already ended."""
        with self._dir.locked():
            record = self._observe(record)
            if record.ended_at is not None:
                return False
            record = replace(record, terminated=True)
            self._dir.write(record)
        signal_group(record.pid, signal.SIGTERM)
        if not self._processes.wait_exit(record, self.terminate_grace):
            signal_group(record.pid, signal.SIGKILL)
            self._processes.wait_exit(record, KILL_WAIT_SECONDS)
        signal_group(record.pid, signal.SIGKILL)  # whatever the job left in its group
        self._remove_container(record)
        self._observe(record)
        return True

    def _interrupt_record(self, record: Record, kind: str) -> InterruptionNotice | None:
        with self._dir.locked():
            record = self._observe(record)
            if record.ended_at is not None:
                return None
            if record.interrupted_at is None:
                now = self.clock.now()
                deadline = now + timedelta(seconds=self.notice_seconds)
                record = replace(
                    record,
                    interrupted_at=now.isoformat(),
                    interrupt_kind=kind,
                    interrupt_deadline=deadline.isoformat(),
                )
                self._dir.write(record)
        signal_group(record.pid, signal.SIGTERM)
        return notice_of(record)

    def _wait_record(self, record: Record, timeout: float) -> None:
        record = self._observe(record)
        if record.ended_at is None and record.interrupt_deadline:
            # An interrupted job that ignores SIGTERM is killed at its notice's deadline.
            left = datetime.fromisoformat(record.interrupt_deadline) - self.clock.now()
            pause = min(timeout, max(0.0, left.total_seconds()))
            if not self._processes.wait_exit(record, pause):
                record = self._observe(record)
                timeout -= pause
        if record.ended_at is None:
            self._processes.wait_exit(record, timeout)
        self._observe(record)

    def _remove_container(self, record: Record) -> None:
        if record.container and self.containers:
            remove_container(self.containers, record.container)

    def _observe(self, record: Record) -> Record:
        """`record`, with its end recorded the first time any provider sees it ended."""
        if record.ended_at is not None:
            return record
        if self._processes.running(record):
            deadline = record.interrupt_deadline
            if deadline and self.clock.now() >= datetime.fromisoformat(deadline):
                signal_group(record.pid, signal.SIGKILL)  # the notice ran out
                self._remove_container(record)
            return record
        with self._dir.locked():
            current = self._dir.load(record.attempt_id) or record
            if current.ended_at is None:
                ended = self.clock.now().isoformat()
                exit_code = self._processes.exit_code(
                    current, self._dir.run_dir(current.attempt_id) / EXIT_CODE
                )
                current = replace(current, ended_at=ended, exit_code=exit_code)
                self._dir.write(current)
            return current
