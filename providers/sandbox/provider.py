"""The local sandbox: the catalog's clouds and regions, played by local processes.

Each attempt runs `startup_script` with /bin/sh in `<workdir>/<attempt_id>/`, in its
own session (so Ctrl-C on the controller and its death leave the job alone), with
a clean environment (the controller's credentials never reach a job). Everything a
later `SandboxProvider` needs is on disk, which is what lets a restarted controller
reconcile:

    <workdir>/<attempt_id>/instance.json  tags, pid, /proc start time, boot id, times
    <workdir>/<attempt_id>/log.txt        the job's stdout and stderr
    <workdir>/<attempt_id>/exit_code      written by the script when the command ends
    <workdir>/checkpoints/<cloud>/<region>/<job_id>/
                                          BROKER_CHECKPOINT_DIR: the checkpoint store of
                                          that place (a bucket in that region, played
                                          locally); a job resumed elsewhere has its
                                          checkpoint copied there first (the controller)

A pid alone cannot tell a live job from a recycled pid, so a record also keeps the
process start time from /proc and the boot id. Changes to the workdir happen under
an flock, so two controllers sharing it never launch one attempt twice nor overfill
a region. Times come from the injected clock; billing scales them by `time_scale`.

A SIGTERM that lands while the shell is still starting the command (between fork and
exec) can be lost, as on any machine: `terminate` then kills the job after its grace
period, and `interrupt` after the notice deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pricing.userio.atomic import atomic_write_text
from pricing.userio.suggest import hint
from providers.base import (
    ID_PATTERN,
    Clock,
    Instance,
    InstanceState,
    InterruptionNotice,
    LaunchRequest,
    instance_tags,
    startup_script,
)
from providers.capabilities import Billing, Capacity, CheckpointStores, PlayedReclaims
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound, ProviderError

if TYPE_CHECKING:
    from pricing.table import OfferTable

NAME = "sandbox"
DEFAULT_CAPACITY = 4  # nodes per (cloud, region) unless configured
ID_PREFIX = "sbx-"
RESERVED_DIRS = frozenset({"checkpoints"})
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
RECORD, LOG, EXIT_CODE, SCRIPT = "instance.json", "log.txt", "exit_code", "startup.sh"
RECORD_FORMAT = 1
KILL_WAIT_SECONDS = 5.0
# The shell waits for "go" on stdin before it runs the script, and the launcher sends
# it only once the record is on disk: a launcher killed in between closes the pipe, the
# shell exits, and no job runs without a record. `exec` keeps the recorded pid.
GATE = 'IFS= read -r go && [ "$go" = go ] && exec /bin/sh "$0" </dev/null'


@dataclass(frozen=True)
class _Record:
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

    @classmethod
    def from_json(cls, text: str) -> _Record | None:
        data = json.loads(text)
        if data.pop("format", None) != RECORD_FORMAT:
            return None
        data["tags"] = tuple(tuple(pair) for pair in data["tags"])
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, **asdict(self)}, indent=1)


class SandboxProvider(Capacity, Billing, CheckpointStores, PlayedReclaims):
    """A `Provider` whose instances are local processes (see the module docstring).

    `capacity`: nodes that may run at once per (cloud, region); an int for every
    region, or a mapping whose unlisted regions get DEFAULT_CAPACITY (0 closes one).
    `time_scale`: billed seconds per wall second (3600 makes a second an hour).
    `notice_seconds`: how long after `interrupt` the job is killed if still running.
    Linux only (/proc, pidfd). Changes to the workdir are serialised by one lock, so
    threads and processes may share a workdir.
    """

    name = NAME

    def __init__(
        self,
        offers: OfferTable,
        workdir: Path,
        clock: Clock,
        capacity: Mapping[tuple[str, str], int] | int = DEFAULT_CAPACITY,
        time_scale: float = 1.0,
        *,
        terminate_grace: float = 10.0,
        notice_seconds: float = 30.0,
        inherit_env: Sequence[str] = INHERITED_ENV,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, not {time_scale}")
        self._offers = offers
        self.workdir = Path(workdir).resolve()  # absolute: its paths go into jobs' env
        self.clock = clock
        self.capacity = capacity if isinstance(capacity, int) else dict(capacity)
        self.time_scale = time_scale
        self.terminate_grace = terminate_grace
        self.notice_seconds = notice_seconds
        self.inherit_env = tuple(inherit_env)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[str, subprocess.Popen] = {}  # the processes this object started
        self._reported: set[str] = set()  # attempts whose notice interruptions() returned
        self._mutex = threading.RLock()
        self._lock_depth = 0
        self._lock_handle = None
        self._index: dict[tuple[str, str, str], list[tuple[str, float, float]]] | None = None
        self._boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """The catalog's offers, `capacity` = nodes still free in the row's region."""
        from pricing.table import OfferTable

        table = self._offers
        _, inverse, free = self._free_per_region()
        values = free[inverse].astype("float64")
        return OfferTable({**table.numbers, "capacity": values}, table.codes, table.categories)

    def launch(self, request: LaunchRequest) -> Instance:
        zone = self._check(request)
        digest = hashlib.sha256(repr(request).encode()).hexdigest()
        with self._locked():
            existing = self._load(request.attempt_id)
            if existing is not None:
                if existing.request_hash != digest:
                    raise InvalidRequest(
                        NAME, f"attempt {request.attempt_id} was launched with another request"
                    )
                return self._instance(self._observe(existing))
            used = self._usage().get((request.cloud, request.region), 0)
            limit = self._limit(request.cloud, request.region)
            if used + request.nodes > limit:
                raise InsufficientCapacity(
                    NAME,
                    f"no capacity in {request.cloud}/{request.region}: "
                    f"{used} of {limit} nodes busy, {request.nodes} asked",
                )
            return self._instance(self._start(request, zone, digest))

    def describe(self, instance_id: str) -> Instance:
        return self._instance(self._observe(self._require(instance_id)))

    def terminate(self, instance_id: str) -> bool:
        with self._locked():
            record = self._observe(self._require(instance_id))
            if record.ended_at is not None:
                return False
            record = replace(record, terminated=True)
            self._write(record)
        _signal_group(record.pid, signal.SIGTERM)
        if not self._wait_exit(record, self.terminate_grace):
            _signal_group(record.pid, signal.SIGKILL)
            self._wait_exit(record, KILL_WAIT_SECONDS)
        _signal_group(record.pid, signal.SIGKILL)  # whatever the job left in its group
        self._observe(record)
        return True

    def list_instances(self) -> list[Instance]:
        records = sorted(self._records(), key=lambda r: (r.launched_at, r.attempt_id))
        return [self._instance(self._observe(record)) for record in records]

    def interruptions(self) -> list[InterruptionNotice]:
        notices = []
        with self._locked():
            for record in self._records():
                if record.interrupted_at and record.attempt_id not in self._reported:
                    self._reported.add(record.attempt_id)
                    notices.append(self._notice(record))
        return notices

    def object_store(self):
        """An ObjectStore (providers.storage): the sandbox's checkpoints are file:// URIs;
        cloud URIs work too where their credentials are set."""
        from providers.storage import ObjectStore

        return ObjectStore()

    # --- sandbox-only verbs (tests, the simulator, the demo) ---------------------------

    def interrupt(self, instance_id: str, kind: str = "spot-reclaim") -> InterruptionNotice | None:
        """Play a spot reclaim: record a notice and send the job SIGTERM (the job contract:
        SIGTERM -> checkpoint -> exit). The job is killed if it still runs at the
        deadline. None when the instance had already ended."""
        with self._locked():
            record = self._observe(self._require(instance_id))
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
                self._write(record)
        _signal_group(record.pid, signal.SIGTERM)
        return self._notice(record)

    def wait(self, instance_id: str, timeout: float) -> Instance:
        """The instance once its process has ended, or as it is after `timeout` seconds
        (an interrupted one is killed when its notice runs out, as `describe` would)."""
        record = self._observe(self._require(instance_id))
        if record.ended_at is None and record.interrupt_deadline:
            # An interrupted job that ignores SIGTERM is killed at its notice's deadline.
            left = datetime.fromisoformat(record.interrupt_deadline) - self.clock.now()
            pause = min(timeout, max(0.0, left.total_seconds()))
            if not self._wait_exit(record, pause):
                record = self._observe(record)
                timeout -= pause
        if record.ended_at is None:
            self._wait_exit(record, timeout)
        return self.describe(instance_id)

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Nodes free now per (cloud, region) of the catalog: what a controller may still
        place in this pass (every place is capacity-limited in the sandbox)."""
        places, _, free = self._free_per_region()
        return dict(zip(places, free.tolist(), strict=True))

    def _free_per_region(self):
        """(places, each row's place index, free nodes per place): one look at the
        running instances, one pass per region rather than per offer."""
        import numpy as np

        table, used = self._offers, self._usage()
        names = table.categories["cloud"], table.categories["region"]
        n_regions = max(len(names[1]), 1)
        pair = table.codes["cloud"].astype(np.int64) * n_regions + table.codes["region"]
        distinct, inverse = np.unique(pair, return_inverse=True)
        places = [
            (str(names[0][code // n_regions]), str(names[1][code % n_regions]))
            for code in distinct.tolist()
        ]
        free = np.array(
            [max(0, self._limit(*where) - used.get(where, 0)) for where in places], dtype=np.int64
        )
        return places, inverse, free

    def checkpoint_store(self, job_id: str, cloud: str, region: str) -> str:
        """The directory standing for a job's checkpoint store in (cloud, region): what
        an attempt placed there sees as BROKER_CHECKPOINT_DIR, and resumes from."""
        return str(self._checkpoint_folder(job_id, cloud, region))

    def _checkpoint_folder(self, job_id: str, cloud: str, region: str) -> Path:
        return self.workdir / "checkpoints" / cloud / region / job_id

    def last_checkpoint_at(self, job_id: str, cloud: str, region: str) -> datetime | None:
        """When the job last wrote a checkpoint file in (cloud, region), by the files'
        modification times (None: never), on the provider's clock."""
        folder = self._checkpoint_folder(job_id, cloud, region)
        newest = max(
            (entry.stat().st_mtime for entry in folder.rglob("*") if entry.is_file()),
            default=None,
        )
        if newest is None:
            return None
        age = time.time() - newest  # how long ago, in wall seconds
        return self.clock.now() - timedelta(seconds=max(0.0, age))

    def billed_hours(self, instance: Instance) -> float:
        """Hours to bill: clock seconds from launch to end (or now) × time_scale / 3600."""
        if instance.launched_at is None:
            return 0.0
        end = instance.ended_at or self.clock.now()
        return max(0.0, (end - instance.launched_at).total_seconds()) * self.time_scale / 3600

    # --- launching -----------------------------------------------------------------------

    def _check(self, request: LaunchRequest) -> str:
        """The zone to report; InvalidRequest when the catalog does not sell the request."""
        if request.attempt_id in RESERVED_DIRS:
            raise InvalidRequest(NAME, f"attempt id {request.attempt_id!r} is reserved")
        index = self._catalog()
        where = f"{request.cloud}/{request.region}"
        rows = index.get((request.cloud, request.region, request.instance_type))
        if not rows:
            regions = {f"{c}/{r}" for c, r, _ in index}
            if where not in regions:
                raise InvalidRequest(NAME, f"no region {where}{hint(where, regions)}")
            types = {t for c, r, t in index if (c, r) == (request.cloud, request.region)}
            wanted = request.instance_type
            raise InvalidRequest(NAME, f"{wanted} not sold in {where}{hint(wanted, types)}")
        if request.zone:
            rows = [row for row in rows if row[0] in ("", request.zone)]
            if not rows:
                raise InvalidRequest(NAME, f"{request.instance_type} not sold in {request.zone}")
        price = 2 if request.market == "spot" else 1
        if all(math.isnan(row[price]) for row in rows):
            raise InvalidRequest(
                NAME, f"{request.instance_type} in {where} has no {request.market} price"
            )
        return request.zone or rows[0][0]

    def _catalog(self) -> dict[tuple[str, str, str], list[tuple[str, float, float]]]:
        if self._index is None:
            table, index = self._offers, {}
            columns = (
                table.text("cloud").tolist(),
                table.text("region").tolist(),
                table.text("instance_type").tolist(),
                table.text("zone").tolist(),
                table.numbers["price_on_demand"].tolist(),
                table.numbers["price_spot"].tolist(),
            )
            for cloud, region, itype, zone, on_demand, spot in zip(*columns, strict=True):
                index.setdefault((cloud, region, itype), []).append((zone, on_demand, spot))
            self._index = index
        return self._index

    def _start(self, request: LaunchRequest, zone: str, digest: str) -> _Record:
        run_dir = self.workdir / request.attempt_id
        checkpoints = self._checkpoint_folder(request.job_id, request.cloud, request.region)
        run_dir.mkdir(parents=True, exist_ok=True)
        checkpoints.mkdir(parents=True, exist_ok=True)
        request = replace(request, zone=zone, checkpoint_dir=str(checkpoints))
        (run_dir / EXIT_CODE).unlink(missing_ok=True)
        script = run_dir / SCRIPT
        script.write_text(
            startup_script(request, exit_code_path=str(run_dir / EXIT_CODE), watch_notices=False)
        )
        log_path = run_dir / LOG
        try:
            with log_path.open("ab") as log:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", GATE, str(script)],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=run_dir,
                    env=self._job_env(),
                    start_new_session=True,  # own process group; survives the controller
                )
        except OSError as exc:
            raise ProviderError(NAME, f"cannot start the job: {exc}") from exc
        assert proc.stdin is not None
        try:
            stat = _proc_stat(proc.pid)
            if stat is None:
                raise ProviderError(NAME, f"process {proc.pid} vanished at start")
            record = _Record(
                attempt_id=request.attempt_id,
                request_hash=digest,
                cloud=request.cloud,
                region=request.region,
                zone=zone,
                instance_type=request.instance_type,
                market=request.market,
                nodes=request.nodes,
                tags=instance_tags(request),
                pid=proc.pid,
                proc_start=stat[1],
                boot_id=self._boot_id,
                launched_at=self.clock.now().isoformat(),
                log_path=str(log_path),
            )
            self._write(record)
        except BaseException:
            proc.stdin.close()  # the gate never opens: the shell exits, nothing ran
            proc.wait()
            raise
        self._procs[request.attempt_id] = proc
        try:
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; describe will say so
        return record

    def _job_env(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in self.inherit_env if name in os.environ}
        env.setdefault("PATH", os.defpath)
        return env

    # --- records and processes -----------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive use of the workdir, across threads and processes (re-entrant)."""
        with self._mutex:
            if self._lock_depth == 0:
                self._lock_handle = (self.workdir / ".lock").open("a")
                fcntl.flock(self._lock_handle, fcntl.LOCK_EX)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    self._lock_handle.close()  # releases the flock
                    self._lock_handle = None

    def _write(self, record: _Record) -> None:
        path = self.workdir / record.attempt_id / RECORD
        atomic_write_text(path, record.to_json(), durable=False)

    def _load(self, attempt_id: str) -> _Record | None:
        try:
            return _Record.from_json((self.workdir / attempt_id / RECORD).read_text())
        except FileNotFoundError:
            return None

    def _require(self, instance_id: str) -> _Record:
        attempt = instance_id.removeprefix(ID_PREFIX)
        record = None
        if instance_id.startswith(ID_PREFIX) and ID_PATTERN.fullmatch(attempt):
            record = self._load(attempt)
        if record is None:
            raise NotFound(NAME, f"no instance {instance_id}")
        return record

    def _records(self) -> list[_Record]:
        records = []
        for path in sorted(self.workdir.glob(f"*/{RECORD}")):
            if ID_PATTERN.fullmatch(path.parent.name):
                record = self._load(path.parent.name)
                if record is not None:
                    records.append(record)
        return records

    def _usage(self) -> dict[tuple[str, str], int]:
        """Nodes running per (cloud, region)."""
        used: dict[tuple[str, str], int] = {}
        for record in map(self._observe, self._records()):
            if record.ended_at is None:
                key = (record.cloud, record.region)
                used[key] = used.get(key, 0) + record.nodes
        return used

    def _limit(self, cloud: str, region: str) -> int:
        if isinstance(self.capacity, int):
            return self.capacity
        return self.capacity.get((cloud, region), DEFAULT_CAPACITY)

    def _running(self, record: _Record) -> bool:
        proc = self._procs.get(record.attempt_id)
        if proc is not None and proc.pid == record.pid:
            return proc.poll() is None
        if record.boot_id != self._boot_id:
            return False
        stat = _proc_stat(record.pid)
        return stat is not None and stat[1] == record.proc_start and stat[0] not in ("Z", "X")

    def _observe(self, record: _Record) -> _Record:
        """`record`, with its end recorded the first time any provider sees it ended."""
        if record.ended_at is not None:
            return record
        if self._running(record):
            deadline = record.interrupt_deadline
            if deadline and self.clock.now() >= datetime.fromisoformat(deadline):
                _signal_group(record.pid, signal.SIGKILL)  # the notice ran out
            return record
        with self._locked():
            current = self._load(record.attempt_id) or record
            if current.ended_at is None:
                ended = self.clock.now().isoformat()
                current = replace(current, ended_at=ended, exit_code=self._exit_code(current))
                self._write(current)
            return current

    def _exit_code(self, record: _Record) -> int | None:
        try:
            return int((self.workdir / record.attempt_id / EXIT_CODE).read_text())
        except (OSError, ValueError):
            pass
        proc = self._procs.get(record.attempt_id)  # killed before the script could write it
        if proc is not None and proc.returncode is not None:
            return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return None

    def _wait_exit(self, record: _Record, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the process to end; True once it has."""
        proc = self._procs.get(record.attempt_id)
        if proc is not None and proc.pid == record.pid:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        if not self._running(record):
            return True
        try:
            handle = os.pidfd_open(record.pid)  # works for processes we did not start
        except ProcessLookupError:
            return True
        except OSError:  # no pidfd (Linux before 5.3): one bounded wait instead
            threading.Event().wait(timeout)
            return not self._running(record)
        try:
            if not self._running(record):  # the pid was recycled before the open
                return True
            return bool(select.select([handle], [], [], timeout)[0])
        finally:
            os.close(handle)

    def _state(self, record: _Record) -> InstanceState:
        if record.ended_at is None:
            return "running"
        if record.terminated:
            return "terminated"
        if record.interrupted_at:
            return "interrupted"
        return "succeeded" if record.exit_code == 0 else "failed"

    def _instance(self, record: _Record) -> Instance:
        return Instance(
            id=ID_PREFIX + record.attempt_id,
            provider=NAME,
            cloud=record.cloud,
            region=record.region,
            zone=record.zone,
            instance_type=record.instance_type,
            market=record.market,
            state=self._state(record),
            exit_code=record.exit_code,
            tags=record.tags,
            launched_at=datetime.fromisoformat(record.launched_at),
            ended_at=datetime.fromisoformat(record.ended_at) if record.ended_at else None,
            log_path=record.log_path,
            nodes=record.nodes,
        )

    def _notice(self, record: _Record) -> InterruptionNotice:
        assert record.interrupted_at is not None
        deadline = record.interrupt_deadline
        return InterruptionNotice(
            instance_id=ID_PREFIX + record.attempt_id,
            provider=NAME,
            kind=record.interrupt_kind,
            noticed_at=datetime.fromisoformat(record.interrupted_at),
            deadline=datetime.fromisoformat(deadline) if deadline else None,
        )


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of process `pid` from /proc, or None when there is none."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data.rpartition(")")[2].split()  # the command name may hold spaces and ')'
    return fields[0], int(fields[19])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
