"""The local sandbox: the catalog's clouds and regions, played by local processes.

Each attempt runs `startup_script` with /bin/sh in `<workdir>/<attempt_id>/`, in its
own session (so Ctrl-C on the controller and its death leave the job alone), with
a clean environment (the controller's credentials never reach a job). Everything a
later `SandboxProvider` needs is on disk, which is what lets a restarted controller
reconcile:

    <workdir>/<attempt_id>/instance.json  tags, pid, /proc start time, boot id, times
    <workdir>/<attempt_id>/log.txt        the job's stdout and stderr
    <workdir>/<attempt_id>/exit_code      written by the script when the command ends
    <workdir>/<attempt_id>/workdir/       the job's run.workdir, unpacked from its archive
                                          before the job starts (its BROKER_WORKDIR)
    <workdir>/<attempt_id>/gang.json      a gang of N nodes instead (gang_record.py): one
    <workdir>/<attempt_id>/rank-<r>/      folder as above per rank, each its own process
    <workdir>/checkpoints/<cloud>/<region>/<job_id>/
                                          BROKER_CHECKPOINT_DIR: the checkpoint store of
                                          that place (a bucket in that region, played
                                          locally); a job resumed elsewhere has its
                                          checkpoint copied there first (the controller)

An image job runs under the local container runtime (podman or docker, see
jobs.py), never on the host; without one it is refused.

A pid alone cannot tell a live job from a recycled pid, so a record also keeps the
process start time from /proc and the boot id. Changes to the workdir happen under
an flock, so two controllers sharing it never launch one attempt twice nor overfill
a region. Times come from the injected clock; billing scales them by `time_scale`.

Beside this module: records.py (the workdir, its records and lock, a record as an
Instance), record_runs.py (one record's process from start to end), gang_runs.py (a
gang of N records, one per rank), processes.py (starting, watching, waiting for and
signalling jobs), catalog.py (what the catalog sells, the nodes free per region),
jobs.py (a job's script, its delivered workdir, the container runtime of image jobs).

A SIGTERM that lands while the shell is still starting the command (between fork and
exec) can be lost, as on any machine: `terminate` then kills the job after its grace
period, and `interrupt` after the notice deadline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from providers.base import (
    Clock,
    Instance,
    InterruptionNotice,
    LaunchRequest,
    instance_tags,
    request_text,
)
from providers.capabilities import Billing, Capacity, CheckpointStores, Gangs, PlayedReclaims
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound
from providers.jobscript import container_image
from providers.sandbox.catalog import (
    DEFAULT_CAPACITY,
    Index,
    catalog_index,
    free_per_region,
    limit_of,
    spot_prices,
    zone_to_report,
)
from providers.sandbox.gang_runs import GangRuns
from providers.sandbox.jobs import (
    container_name,
    container_runtime,
    no_runtime_reason,
    write_script,
)
from providers.sandbox.processes import (
    INHERITED_ENV,
    Processes,
    job_env,
)
from providers.sandbox.record_runs import RecordRuns
from providers.sandbox.records import (
    EXIT_CODE,
    ID_PREFIX,
    LOG,
    NAME,
    RESERVED_DIRS,
    Record,
    Workdir,
    instance_of,
    notice_of,
)

if TYPE_CHECKING:
    from pricing.table import OfferTable


class SandboxProvider(
    GangRuns, RecordRuns, Capacity, Billing, CheckpointStores, Gangs, PlayedReclaims
):
    """A `Provider` whose instances are local processes (see the module docstring); a
    request for N > 1 nodes runs as a gang of N processes (gang_runs.py).

    `capacity`: nodes that may run at once per (cloud, region); an int for every
    region, or a mapping whose unlisted regions get DEFAULT_CAPACITY (0 closes one).
    `time_scale`: billed seconds per wall second (3600 makes a second an hour).
    `notice_seconds`: how long after `interrupt` the job is killed if still running.
    `containers`: the command that runs image jobs (default: the one jobs.py
    finds; with none, image jobs are refused).
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
        make_workdir: bool = True,
        containers: Sequence[str] | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, not {time_scale}")
        self._offers = offers
        self.workdir = Path(workdir).resolve()  # absolute: its paths go into jobs' env
        self.clock = clock
        self.capacity = capacity if isinstance(capacity, int) else dict(capacity)
        self.billing_scale = time_scale
        self.terminate_grace = terminate_grace
        self.notice_seconds = notice_seconds
        self.inherit_env = tuple(inherit_env)
        found = tuple(containers) if containers else container_runtime()
        self.containers = found or None
        if make_workdir:  # else made by the first launch: reading needs no folder
            self.workdir.mkdir(parents=True, exist_ok=True)
        self._dir = Workdir(self.workdir)
        self._processes = Processes()  # the processes this object started
        self._reported: set[str] = set()  # attempts whose notice interruptions() returned
        self._index: Index | None = None  # built from _offers on first use
        self._spot_crunched: set[str] = set()  # clouds whose spot a crunch closed (crunch_spot)

    # --- the Provider contract (docstrings in providers.base) --------------------------

    def offers(self) -> OfferTable:
        """The catalog's offers, `capacity` = nodes still free in the row's region (and no
        spot price on a cloud whose spot a played crunch closed)."""
        from pricing.table import OfferTable

        table = self._offers
        _, inverse, free = self._free_per_region()
        numbers = {**table.numbers, "capacity": free[inverse].astype("float64")}
        numbers["price_spot"] = spot_prices(table, self._spot_crunched)
        return OfferTable(numbers, table.codes, table.categories)

    def launch(self, request: LaunchRequest) -> Instance:
        zone = self._check(request)
        if request.nodes > 1:
            self._check_gang(request)
        digest = hashlib.sha256(request_text(request).encode()).hexdigest()
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self._dir.locked():
            existing = self._dir.load(request.attempt_id)
            gang = self._gang_of(ID_PREFIX + request.attempt_id)
            if gang is not None and gang.request_hash != digest:
                raise InvalidRequest(
                    NAME, f"attempt {request.attempt_id} was launched with another request"
                )
            if gang is not None:
                return self._launch_gang(request, zone, digest)  # completes a partial gang
            if existing is not None:
                if existing.request_hash != digest:
                    raise InvalidRequest(
                        NAME, f"attempt {request.attempt_id} was launched with another request"
                    )
                return instance_of(self._observe(existing))
            if request.market == "spot" and request.cloud in self._spot_crunched:
                raise InsufficientCapacity(
                    NAME, f"no spot capacity on {request.cloud} (a played capacity crunch)"
                )
            used = self._usage().get((request.cloud, request.region), 0)
            limit = self._limit(request.cloud, request.region)
            if used + request.nodes > limit:
                raise InsufficientCapacity(
                    NAME,
                    f"no capacity in {request.cloud}/{request.region}: "
                    f"{used} of {limit} nodes busy, {request.nodes} asked",
                )
            if request.nodes > 1:
                return self._launch_gang(request, zone, digest)
            return instance_of(self._start(request, zone, digest))

    def describe(self, instance_id: str) -> Instance:
        gang = self._gang_of(instance_id)
        if gang is not None:
            return self._gang_instance(gang)
        return instance_of(self._observe(self._dir.require(instance_id)))

    def terminate(self, instance_id: str) -> bool:
        gang = self._gang_of(instance_id)
        if gang is not None:
            return self._terminate_gang(gang)
        return self._stop(self._dir.require(instance_id))

    def list_instances(self) -> list[Instance]:
        records = [instance_of(self._observe(record)) for record in self._dir.records()]
        everything = [*records, *self._gang_instances()]
        return sorted(everything, key=lambda i: (i.launched_at, i.attempt_id or ""))

    def interruptions(self) -> list[InterruptionNotice]:
        notices = []
        with self._dir.locked():
            for record in self._dir.records():
                if record.interrupted_at and record.attempt_id not in self._reported:
                    self._reported.add(record.attempt_id)
                    notices.append(notice_of(record))
            notices += self._gang_notices()
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
        deadline. None when the instance had already ended. For a gang (its id, or the
        node id of any one rank), every rank gets the notice: the gang ends as a unit."""
        gang = self._gang_of(instance_id)
        if gang is not None:
            return self._interrupt_gang(gang, kind)
        return self._interrupt_record(self._dir.require(instance_id), kind)

    def crunch_spot(self, cloud: str) -> None:
        """Play a spot capacity crunch on `cloud`: from now on this object sells no spot
        there (offers without a spot price, spot launches InsufficientCapacity), as when
        a cloud runs out of spot GPUs everywhere. In memory only (the demo plays it)."""
        self._spot_crunched.add(cloud)

    def wait(self, instance_id: str, timeout: float) -> Instance:
        """The instance once its process has ended, or as it is after `timeout` seconds
        (an interrupted one is killed when its notice runs out, as `describe` would)."""
        gang = self._gang_of(instance_id)
        if gang is not None:
            return self._wait_gang(gang, timeout)
        record = self._dir.require(instance_id)
        self._wait_record(record, timeout)
        return self.describe(instance_id)

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Nodes free now per (cloud, region) of the catalog: what a controller may still
        place in this pass (every place is capacity-limited in the sandbox)."""
        places, _, free = self._free_per_region()
        return dict(zip(places, free.tolist(), strict=True))

    def checkpoint_store(self, job_id: str, cloud: str, region: str) -> str:
        """The directory standing for a job's checkpoint store in (cloud, region): what
        an attempt placed there sees as BROKER_CHECKPOINT_DIR, and resumes from."""
        return str(self._dir.checkpoint_folder(job_id, cloud, region))

    def last_checkpoint_at(self, job_id: str, cloud: str, region: str) -> datetime | None:
        """When the job last wrote a checkpoint file in (cloud, region), by the files'
        modification times (None: never), on the provider's clock."""
        age = self._dir.last_write_age(self._dir.checkpoint_folder(job_id, cloud, region))
        return None if age is None else self.clock.now() - timedelta(seconds=age)

    def billed_hours(self, instance: Instance) -> float:
        """Hours to bill: clock seconds from launch to end (or now) × the time scale the
        instance was launched with / 3600 (another session's scale never re-bills it)."""
        if instance.launched_at is None:
            return 0.0
        end = instance.ended_at or self.clock.now()
        gang = self._gang_of(instance.id)
        try:
            scale = gang.time_scale if gang else self._dir.require(instance.id).time_scale
        except NotFound:
            scale = None
        seconds = max(0.0, (end - instance.launched_at).total_seconds())
        return seconds * (scale or self.billing_scale) / 3600

    def time_scale(self, cloud: str, pool: str = "") -> float:
        """The scale new instances are launched with, on every cloud the sandbox plays."""
        return self.billing_scale

    # --- launching -----------------------------------------------------------------------

    def _check(self, request: LaunchRequest) -> str:
        """The zone to report; InvalidRequest when the catalog does not sell the request."""
        if request.attempt_id in RESERVED_DIRS:
            raise InvalidRequest(NAME, f"attempt id {request.attempt_id!r} is reserved")
        image = container_image(request)
        if image and self.containers is None:
            raise InvalidRequest(NAME, no_runtime_reason(image))
        if self._index is None:
            self._index = catalog_index(self._offers)
        return zone_to_report(request, self._index)

    def _start(
        self,
        request: LaunchRequest,
        zone: str,
        digest: str,
        *,
        key: str = "",
        tags: tuple[tuple[str, str], ...] = (),
        extra_env: Mapping[str, str] | None = None,
    ) -> Record:
        """Start one process for `request`; a gang's rank passes its record's `key`
        (its folder), its `tags` and its rank environment (`extra_env`)."""
        key = key or request.attempt_id
        run_dir = self._dir.run_dir(key)
        checkpoints = self._dir.checkpoint_folder(request.job_id, request.cloud, request.region)
        run_dir.mkdir(parents=True, exist_ok=True)
        checkpoints.mkdir(parents=True, exist_ok=True)
        request = replace(request, zone=zone, checkpoint_dir=str(checkpoints))
        (run_dir / EXIT_CODE).unlink(missing_ok=True)
        script = write_script(request, run_dir, self.containers)
        log_path = run_dir / LOG

        def record(pid: int, proc_start: int) -> Record:
            written = Record(
                attempt_id=key,
                request_hash=digest,
                cloud=request.cloud,
                region=request.region,
                zone=zone,
                instance_type=request.instance_type,
                market=request.market,
                nodes=request.nodes if key == request.attempt_id else 1,  # a rank: one
                tags=tags or instance_tags(request),
                pid=pid,
                proc_start=proc_start,
                boot_id=self._processes.boot_id,
                launched_at=self.clock.now().isoformat(),
                log_path=str(log_path),
                container=container_name(key) if container_image(request) else "",
                time_scale=self.billing_scale,
            )
            self._dir.write(written)
            return written

        env = job_env(self.inherit_env) | dict(extra_env or {})
        return self._processes.start(key, script, log_path, env, record)

    # --- places and records --------------------------------------------------------------

    def _free_per_region(self):
        """(places, each row's place index, free nodes per place): one look at the
        running instances, one pass per region rather than per offer."""
        return free_per_region(self._offers, self._usage(), self._limit)

    def _usage(self) -> dict[tuple[str, str], int]:
        """Nodes running per (cloud, region): the live records, each asked of its
        process (records.py: the workdir reads each ended record once)."""
        used: dict[tuple[str, str], int] = {}
        for record in map(self._observe, self._dir.live_records()):
            if record.ended_at is None:
                key = (record.cloud, record.region)
                used[key] = used.get(key, 0) + record.nodes
        for key, nodes in self._gang_usage().items():
            used[key] = used.get(key, 0) + nodes
        return used

    def _limit(self, cloud: str, region: str) -> int:
        return limit_of(self.capacity, cloud, region)
