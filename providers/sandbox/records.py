"""The sandbox's workdir: one folder and one record (instance.json) per attempt, the
checkpoint stores, the lock that serialises changes, and how a record reads as an
Instance or a notice.

Everything a later SandboxProvider needs is in these files: that is what lets a
restarted controller reconcile. The record is written atomically (a rename).

A `Workdir` also keeps the records it has read, so that a launch does not read every
record the workdir ever held: a record whose process has ended is final (nothing
writes it again, in any process), so it is never read twice; a live one keeps its
place and nodes, and whether it still runs is the process's to say
(`RecordRuns._observe`, which reads the record again when it has ended). Only the
folder listing is read each time, which is how records other processes wrote are found.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Protocol, TypeVar

from pricing.userio.atomic import atomic_write_text
from providers.base import ID_PATTERN, Instance, InstanceState, InterruptionNotice
from providers.errors import NotFound

NAME = "sandbox"
ID_PREFIX = "sbx-"
RESERVED_DIRS = frozenset({"checkpoints"})
RECORD, LOG, EXIT_CODE, SCRIPT = "instance.json", "log.txt", "exit_code", "startup.sh"
WORKDIR = "workdir"  # the job's run.workdir, unpacked
RECORD_FORMAT = 1
_R = TypeVar("_R")


@dataclass(frozen=True)
class Record:
    """The contents of instance.json."""

    attempt_id: str
    request_hash: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    nodes: int
    tags: tuple[tuple[str, str], ...]
    pid: int
    proc_start: int  # field 22 of /proc/<pid>/stat: start time in clock ticks after boot
    boot_id: str
    launched_at: str
    log_path: str
    ended_at: str | None = None  # when a provider first saw the process gone
    exit_code: int | None = None
    terminated: bool = False
    interrupted_at: str | None = None
    interrupt_kind: str = ""
    interrupt_deadline: str | None = None
    container: str = ""  # the container an image job runs in (removed when it is killed)
    time_scale: float | None = None  # billed seconds per wall second (None: written before)

    @classmethod
    def from_json(cls, text: str) -> Record | None:
        return decode_record(cls, text, RECORD_FORMAT)

    def to_json(self) -> str:
        return encode_record(self, RECORD_FORMAT)


def decode_record(cls: type[_R], text: str, format_number: int) -> _R | None:
    """A record dataclass from its JSON file; None for a file of another format (written
    by another broker: left alone rather than guessed at). Tags come back as pairs."""
    data = json.loads(text)
    if data.pop("format", None) != format_number:
        return None
    data["tags"] = tuple(tuple(pair) for pair in data["tags"])
    return cls(**data)


def encode_record(record: object, format_number: int) -> str:
    """The JSON file of a record dataclass, with its format number first."""
    return json.dumps({"format": format_number, **asdict(record)}, indent=1)  # type: ignore[call-overload]


class Workdir:
    """The files under `root` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._mutex = threading.RLock()
        self._depth = 0
        self._handle: IO[str] | None = None
        self._ended: dict[str, Record] = {}  # attempt id -> its final record
        self._live: dict[str, Record] = {}  # attempt id -> its live record as last seen

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the workdir, across threads and processes (re-entrant)."""
        with self._mutex:
            if self._depth == 0:
                self._handle = self._lock_file()
                if self._handle is not None:
                    fcntl.flock(self._handle, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._handle is not None:
                    self._handle.close()  # releases the flock
                    self._handle = None

    def _lock_file(self) -> IO[str] | None:
        """The lock file, opened; None when there is no folder yet (nothing to guard: a
        launch makes it first) or it cannot be made (a read-only location: read only)."""
        try:
            return (self.root / ".lock").open("a")
        except FileNotFoundError:
            return None
        except OSError:
            try:
                return (self.root / ".lock").open("r")  # flock needs no write access
            except OSError:
                return None

    def run_dir(self, attempt_id: str) -> Path:
        """The folder of one attempt: its record, script, log and exit code."""
        return self.root / attempt_id

    def checkpoint_folder(self, job_id: str, cloud: str, region: str) -> Path:
        """The folder standing for a job's checkpoint store in (cloud, region)."""
        return self.root / "checkpoints" / cloud / region / job_id

    def last_write_age(self, folder: Path) -> float | None:
        """Wall seconds since a file under `folder` was last written (None: no file)."""
        import time

        newest = max(
            (entry.stat().st_mtime for entry in folder.rglob("*") if entry.is_file()),
            default=None,
        )
        return None if newest is None else max(0.0, time.time() - newest)

    def write(self, record: Record) -> None:
        """Replace the attempt's record, atomically."""
        atomic_write_text(self.run_dir(record.attempt_id) / RECORD, record.to_json(), durable=False)
        self._remember(record)

    def load(self, attempt_id: str) -> Record | None:
        """The attempt's record as it is on disk now, or None when there is none (or of
        another format)."""
        try:
            record = Record.from_json((self.run_dir(attempt_id) / RECORD).read_text())
        except FileNotFoundError:
            return None
        if record is not None:
            self._remember(record)
        return record

    def _remember(self, record: Record) -> None:
        if record.ended_at is None:
            self._live[record.attempt_id] = record
        else:
            self._ended[record.attempt_id] = record
            self._live.pop(record.attempt_id, None)

    def folders(self) -> list[str]:
        """The names of the attempts' folders (and gangs'), sorted: one directory listing."""
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        return sorted(
            entry.name
            for entry in entries
            if entry.name not in RESERVED_DIRS
            and ID_PATTERN.fullmatch(entry.name)
            and entry.is_dir()
        )

    def holds_record(self, name: str) -> bool:
        """Whether folder `name` is known to hold a single-node record (never a gang's)."""
        return name in self._ended or name in self._live

    def require(self, instance_id: str) -> Record:
        """The record of a sandbox instance id ("sbx-<attempt>"); NotFound when unknown."""
        attempt = instance_id.removeprefix(ID_PREFIX)
        record = None
        if instance_id.startswith(ID_PREFIX) and ID_PATTERN.fullmatch(attempt):
            record = self.load(attempt)
        if record is None:
            raise NotFound(NAME, f"no instance {instance_id}")
        return record

    def records(self) -> list[Record]:
        """Every attempt's record, by folder name: the live ones as they are on disk now,
        the ended ones as first read (they are final)."""
        records = []
        for name in self.folders():
            record = self._ended.get(name) or self.load(name)
            if record is not None:
                records.append(record)
        return records

    def live_records(self) -> list[Record]:
        """The records not known to have ended, by folder name: those read before as last
        seen (a live record's place and nodes never change; a writer's newer flags, a
        stop or a reclaim, are for `records` and `load`), new folders' read from disk."""
        records = []
        for name in self.folders():
            if name in self._ended:
                continue
            record = self._live.get(name) or self.load(name)
            if record is not None:
                records.append(record)
        return records


def state_of(record: Record) -> InstanceState:
    """running until the process ended; then terminated (by a provider), interrupted
    (a played reclaim), or succeeded/failed by its exit code."""
    if record.ended_at is None:
        return "running"
    if record.terminated:
        return "terminated"
    if record.interrupted_at:
        return "interrupted"
    return "succeeded" if record.exit_code == 0 else "failed"


def instance_of(record: Record) -> Instance:
    """The Instance a record stands for."""
    return Instance(
        id=ID_PREFIX + record.attempt_id,
        provider=NAME,
        cloud=record.cloud,
        region=record.region,
        zone=record.zone,
        instance_type=record.instance_type,
        market=record.market,
        state=state_of(record),
        exit_code=record.exit_code,
        tags=record.tags,
        launched_at=datetime.fromisoformat(record.launched_at),
        ended_at=datetime.fromisoformat(record.ended_at) if record.ended_at else None,
        log_path=record.log_path,
        nodes=record.nodes,
    )


class InterruptedRecord(Protocol):
    """What a notice is read from: an instance's record or a gang's."""

    @property
    def attempt_id(self) -> str: ...
    @property
    def interrupted_at(self) -> str | None: ...
    @property
    def interrupt_kind(self) -> str: ...
    @property
    def interrupt_deadline(self) -> str | None: ...


def notice_of(record: InterruptedRecord) -> InterruptionNotice:
    """The notice of an interrupted record (its kind, time and deadline)."""
    assert record.interrupted_at is not None
    deadline = record.interrupt_deadline
    return InterruptionNotice(
        instance_id=ID_PREFIX + record.attempt_id,
        provider=NAME,
        kind=record.interrupt_kind,
        noticed_at=datetime.fromisoformat(record.interrupted_at),
        deadline=datetime.fromisoformat(deadline) if deadline else None,
    )
