"""`OnPremProvider`: the team's own pools behind the `Provider` contract.

Each pool's attempts go through the executor its `executor:` mapping names (local
processes, OpenSSH, Slurm: `onprem.executors`); the controller sees instances only.
An instance id says where it lives, `onprem:<pool>:<attempt id>`, so describe and
terminate reach the right executor after a restart; everything else a restarted
provider needs is in the engines (Slurm's job names, the attempt directories on the
nodes), found again by tag. The provider keeps no state of its own on disk.

Launch is idempotent per attempt: the executor is asked for the attempt first. For
SSH and local pools the provider allocates the GPUs itself (`onprem.allocation`,
from what runs on the nodes now); Slurm allocates its own, and a multi-node job on
an InfiniBand pool asks Slurm for one leaf switch. Billing is the engine's own
elapsed time (start to end of the job, not its time in the queue).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from onprem.executors.base import AttemptRequest, AttemptStatus, Executor
from onprem.inventory import Pool
from onprem.shapes import Shape, devices_of, gres_type, place, pool_gang_nodes, shape_of
from providers.base import (
    TAG_REQUEST,
    Clock,
    Instance,
    InterruptionNotice,
    LaunchRequest,
    instance_tags,
    request_hash,
    startup_script,
)
from providers.capabilities import Billing, Capacity, Gangs, PoolShares
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound
from providers.gang import GangMember

if TYPE_CHECKING:
    from pricing.table import OfferTable

NAME = "onprem"
ID_PREFIX = "onprem:"
TAG_MARKET = "broker-market"
TAG_TYPE = "broker-instance-type"
NOTICE_KINDS = {"PREEMPTED": "preemption", "NODE_FAIL": "node-failure", "BOOT_FAIL": "node-failure"}


class OnPremProvider(Capacity, PoolShares, Billing, Gangs):
    """The pools of a pools.yaml as one provider (see the module docstring).

    `workdir`: where local and Slurm executors keep attempt directories of their own
    (a Slurm pool's `base_dir` must be on storage every node sees; this default is
    right for a one-machine cluster). `terminate_grace`: seconds between SIGTERM and
    SIGKILL. `executors` replaces the executors built from the pools (tests, or one
    Slurm cluster shared with another object). `local_time_scale`: billed seconds per
    wall second for pools run by the local executor (a workstation standing in for a
    cluster, as in `broker demo`); Slurm and SSH pools are billed as their engines report.
    """

    name = NAME

    def __init__(
        self,
        pools: Iterable[Pool],
        *,
        clock: Clock,
        workdir: Path,
        terminate_grace: float = 30.0,
        executors: Mapping[str, Executor] | None = None,
        local_time_scale: float = 1.0,
    ) -> None:
        if local_time_scale <= 0:
            raise ValueError(f"local_time_scale must be positive, not {local_time_scale}")
        self.local_time_scale = local_time_scale
        self.pools = {pool.name: pool for pool in pools}
        self.clock = clock
        self.workdir = Path(workdir).resolve()
        self.terminate_grace = terminate_grace
        self._executors: dict[str, Executor] = dict(executors or {})
        self._reported: set[tuple[str, int]] = set()  # (instance id, restarts) noticed
        self._lock = threading.Lock()  # one allocation at a time per provider object

    # --- the Provider contract (docstrings in providers.base) ----------------------------

    def offers(self) -> OfferTable:
        """The pools as offers, `capacity` from what runs on them now (Slurm's sinfo for
        Slurm pools, the broker's own allocations for SSH and local ones)."""
        from onprem.offers import pools_to_offers
        from onprem.usage import pool_use

        use = pool_use(list(self.pools.values()), self.executor)
        return pools_to_offers(
            list(self.pools.values()),
            use.gpus,
            used_slices=use.slices,
            today=self.clock.now().date(),
        )

    def launch(self, request: LaunchRequest) -> Instance:
        """The contract's launch; the request's `time_limit_seconds` becomes Slurm's
        --time, and `interconnect: nvlink` makes one NVLink domain a must."""
        shape = shape_of(self.pools, request, NAME)
        pool = shape.pool
        executor = self.executor(pool.name)
        digest = request_hash(request)
        with self._lock:
            found = executor.status(request.attempt_id)
            if found is not None:
                if dict(found.tags).get(TAG_REQUEST, digest) != digest:
                    raise InvalidRequest(
                        NAME, f"attempt {request.attempt_id} was launched with another request"
                    )
                return self._instance(pool, found)
            staged = self._deliver(request)
            try:
                attempt = self._attempt(shape, request, digest, executor, staged)
                return self._instance(pool, executor.submit(attempt))
            finally:
                if staged is not None:
                    shutil.rmtree(staged, ignore_errors=True)  # the executor has its copy

    def describe(self, instance_id: str) -> Instance:
        pool, attempt = self._locate(instance_id)
        status = self.executor(pool.name).status(attempt)
        if status is None:
            raise NotFound(NAME, f"no instance {instance_id}")
        return self._instance(pool, status)

    def terminate(self, instance_id: str) -> bool:
        pool, attempt = self._locate(instance_id)
        executor = self.executor(pool.name)
        if executor.status(attempt) is None:
            raise NotFound(NAME, f"no instance {instance_id}")
        return executor.cancel(attempt, self.terminate_grace)

    def list_instances(self) -> list[Instance]:
        out = []
        for pool in self.pools.values():
            out += [self._instance(pool, s) for s in self.executor(pool.name).list_attempts()]
        return out

    def interruptions(self) -> list[InterruptionNotice]:
        """Preemptions and node failures seen since the previous call: Slurm's own
        (PREEMPTED, NODE_FAIL, or a requeue of an attempt launched with `requeue`) and
        the broker's (`preempt`)."""
        notices = []
        now = self.clock.now()
        for pool in self.pools.values():
            for status in self.executor(pool.name).list_attempts():
                requeued = status.restarts > 0 and status.active
                if status.state != "interrupted" and not requeued:
                    continue
                key = (self.instance_id(pool.name, status.attempt_id), status.restarts)
                if key in self._reported:
                    continue
                self._reported.add(key)
                word = status.reason.split()[0] if status.reason else ""
                notices.append(
                    InterruptionNotice(
                        instance_id=key[0],
                        provider=NAME,
                        kind=NOTICE_KINDS.get(word, "preemption"),
                        noticed_at=status.ended_at or now,
                        detail=status.reason,
                    )
                )
        return notices

    def object_store(self):
        """An ObjectStore (providers.storage) for the jobs' checkpoint URIs."""
        from providers.storage import ObjectStore

        return ObjectStore()

    # --- on-prem verbs ---------------------------------------------------------------------

    def preempt(
        self, instance_id: str, grace_seconds: float | None = None
    ) -> InterruptionNotice | None:
        """The broker's own preemption (the queue policy's): SIGTERM, the grace to
        checkpoint, SIGKILL; the instance ends "interrupted" and `interruptions()`
        reports it once. None when it had already ended; NotFound when unknown."""
        pool, attempt = self._locate(instance_id)
        executor = self.executor(pool.name)
        if executor.status(attempt) is None:
            raise NotFound(NAME, f"no instance {instance_id}")
        grace = self.terminate_grace if grace_seconds is None else grace_seconds
        if not executor.cancel(attempt, grace, interrupted=True):
            return None
        return InterruptionNotice(instance_id, NAME, "preemption", self.clock.now())

    def log(self, instance_id: str, max_bytes: int = 65536) -> str:
        """The last `max_bytes` of the instance's output, from wherever it runs."""
        pool, attempt = self._locate(instance_id)
        return self.executor(pool.name).log(attempt, max_bytes)

    def executor(self, pool: str) -> Executor:
        """The executor of pool `pool` (built on first use)."""
        if pool not in self._executors:
            from onprem.executors import executor_for

            self._executors[pool] = executor_for(self.pools[pool], self.workdir, NAME)
        return self._executors[pool]

    def close(self) -> None:
        """Close the executors' connections (SSH masters); the jobs keep running."""
        for executor in self._executors.values():
            executor.close()

    @staticmethod
    def instance_id(pool: str, attempt_id: str) -> str:
        return f"{ID_PREFIX}{pool}:{attempt_id}"

    # --- capabilities -----------------------------------------------------------------------

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Per ("onprem", region): whole nodes free (free GPUs / GPUs per node, rounded
        down) plus sliced nodes with a free slice, over the region's pools."""
        from onprem.usage import pool_use

        use = pool_use(list(self.pools.values()), self.executor)
        free: dict[tuple[str, str], int] = {}
        for pool in self.pools.values():
            whole = max(0, pool.whole_gpus - use.gpus.get(pool.name, 0)) // pool.gpus_per_node
            sliced = use.sliced_free_nodes.get(pool.name, 0)
            key = ("onprem", pool.region)
            free[key] = free.get(key, 0) + whole + sliced
        return free

    def free_gpus(self) -> dict[tuple[str, str], int]:
        """Per ("onprem", pool): the pool's whole GPUs not in use, for pools without MIG
        slices (a sliced pool's room stays counted in nodes, `free_nodes`)."""
        from onprem.usage import pool_use

        use = pool_use(list(self.pools.values()), self.executor)
        return {
            ("onprem", pool.name): max(0, pool.whole_gpus - use.gpus.get(pool.name, 0))
            for pool in self.pools.values()
            if not any(node.mig for node in pool.nodes)
        }

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """The node count of the pool selling `instance_type` (`shapes.pool_gang_nodes`)."""
        if cloud != "onprem":
            return 0
        return pool_gang_nodes(self.pools.values(), region, instance_type)

    def billed_hours(self, instance: Instance) -> float:
        """The engine's elapsed time: from the job's start (not its submission) to its
        end, or to now while it runs; 0 while it waits in the queue."""
        if instance.launched_at is None:
            return 0.0
        end = instance.ended_at or self.clock.now()
        hours = max(0.0, (end - instance.launched_at).total_seconds()) / 3600
        pool, _ = self._locate(instance.id)
        return hours * self.time_scale("onprem", pool.name)

    def time_scale(self, cloud: str, pool: str = "") -> float:
        """Slurm and SSH pools are billed as their engines' times pass; local pools at
        `local_time_scale` (a workstation playing a cluster, as in the demo)."""
        known = self.pools.get(pool)
        return self.local_time_scale if known and known.executor.kind == "local" else 1.0

    # --- helpers ------------------------------------------------------------------------------

    def _locate(self, instance_id: str) -> tuple[Pool, str]:
        rest = instance_id.removeprefix(ID_PREFIX)
        pool_name, _, attempt = rest.partition(":")
        pool = self.pools.get(pool_name)
        if not instance_id.startswith(ID_PREFIX) or pool is None or not attempt:
            raise NotFound(NAME, f"no instance {instance_id}")
        return pool, attempt

    def _deliver(self, request: LaunchRequest) -> Path | None:
        """The request's packed workdir unpacked here, for the executor to stage into the
        attempt's folder (on the node, or the cluster's shared storage)."""
        if not request.workdir_uri:
            return None
        from providers.workdir import WorkdirError, deliver_workdir

        target = self.workdir / "staging" / request.attempt_id
        try:
            return deliver_workdir(request.workdir_uri, target)
        except WorkdirError as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise InvalidRequest(NAME, str(exc)) from exc

    def _attempt(
        self,
        shape: Shape,
        request: LaunchRequest,
        digest: str,
        executor: Executor,
        staged: Path | None,
    ) -> AttemptRequest:
        from onprem.executors.options import LocalOptions, SlurmOptions

        pool = shape.pool
        options = pool.executor.options
        tags = (
            *instance_tags(request),
            (TAG_REQUEST, digest),
            (TAG_MARKET, request.market),
            (TAG_TYPE, request.instance_type),
        )
        # A staged workdir is the attempt's work folder, where the job starts: ".".
        script = startup_script(request, watch_notices=False, workdir="." if staged else None)
        common = dict(
            attempt_id=request.attempt_id,
            job_id=request.job_id,
            broker_id=request.broker_id,
            tags=tags,
            nodes=request.nodes,
            time_limit_seconds=request.time_limit_seconds,
            grace_seconds=max(1, round(self.terminate_grace)),
            script=script,
            workdir=str(staged) if staged is not None else None,
        )
        if isinstance(options, SlurmOptions):
            return AttemptRequest(
                **common,
                gpus_per_node=shape.slices or shape.gpus_per_node,
                gpu_type=gres_type(shape, options.gres),
                cpus_per_node=max(1, int(pool.vcpus_per_node * shape.share)),
                memory_mib_per_node=max(1, int(pool.memory_gib_per_node * 1024 * shape.share)),
                requeue=options.requeue,
                switch_wait_seconds=options.switch_wait if pool.fabric == "infiniband" else 0,
            )
        nvlink = request.interconnect == "nvlink"
        allocation = place(shape, request.nodes, executor.list_attempts(), nvlink=nvlink)
        if allocation is None:
            raise InsufficientCapacity(
                NAME,
                f"pool {pool.name} has no room now for {request.instance_type} x{request.nodes}",
            )
        device_ids = options.devices if isinstance(options, LocalOptions) else ()
        return AttemptRequest(
            **common,
            hosts=allocation.nodes,
            gpus=tuple(grant.gpus for grant in allocation.grants),
            devices=devices_of(allocation, device_ids) if not shape.profile else (),
            slices=tuple(grant.slices for grant in allocation.grants) if shape.profile else (),
            gpus_per_node=shape.gpus_per_node,
        )

    def _instance(self, pool: Pool, status: AttemptStatus) -> Instance:
        tags = dict(status.tags)
        return Instance(
            id=self.instance_id(pool.name, status.attempt_id),
            provider=NAME,
            cloud="onprem",
            region=pool.region,
            zone=pool.name,
            instance_type=tags.get(TAG_TYPE, f"{pool.name}-node"),
            market=tags.get(TAG_MARKET, "on-demand"),
            state=status.state,
            exit_code=status.exit_code,
            tags=tuple((k, v) for k, v in status.tags if k not in (TAG_MARKET, TAG_TYPE)),
            launched_at=status.started_at,
            ended_at=status.ended_at,
            log_path=status.log_path,
            nodes=status.node_count or max(1, len(status.nodes)),
            members=self._members(pool, status),
        )

    def _members(self, pool: Pool, status: AttemptStatus) -> tuple[GangMember, ...]:
        """A gang's nodes by rank (the engine's order, head first), each in the state of
        the whole attempt: the engine starts and ends a gang's nodes together (srun, the
        node executor). The broker's own allocation (SSH, local) names the nodes at
        launch; Slurm places them later, so there a node is `<job id>#<rank>` and its
        address the node's name once placed. () for one node."""
        if (status.node_count or len(status.nodes)) <= 1:
            return ()
        addresses = {node.name: node.address for node in pool.nodes}
        slurm = pool.executor.kind == "slurm"
        names = status.nodes or ("",) * status.node_count  # "": not placed yet
        return tuple(
            GangMember(
                rank=rank,
                node_id=f"{status.handle}#{rank}" if slurm else name,
                zone=pool.name,
                address=addresses.get(name, "") or name,
                state=status.state,
                exit_code=status.exit_code,
            )
            for rank, name in enumerate(names)
        )
