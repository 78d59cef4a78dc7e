"""Sandbox gangs: `nodes: N` runs N local processes, one per rank, as one attempt.

Each rank is an ordinary sandbox record (`gang_record.rank_key`) started with its rank
environment (`providers.gang.rank_environment`: every address 127.0.0.1, the gang's
own free MASTER_PORT) in its process environment, so a job's shell, Python or torchrun
sees it. The gang is the unit the controller sees: one Instance whose `members` are the
ranks; its state is `providers.gang.gang_state` of theirs. A rank that fails stops the
others; a played reclaim of the gang or of any one rank sends every rank SIGTERM (and
the gang ends "interrupted"); terminate stops every rank. Billing is the gang's hours
(launch to its last rank's end); the placement's price is already for all N nodes.

Image jobs do not run as sandbox gangs (their container would not see the rank
environment): refused with InvalidRequest.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from providers.base import ID_PATTERN, Instance, InterruptionNotice, LaunchRequest, instance_tags
from providers.errors import InvalidRequest
from providers.gang import TAG_RANK, GangMember, gang_state, rank_environment
from providers.jobscript import container_image
from providers.sandbox.gang_record import (
    LOOPBACK,
    GangRecord,
    free_port,
    gang_records,
    load_gang,
    rank_key,
    write_gang,
)
from providers.sandbox.records import ID_PREFIX, NAME, Record, Workdir, notice_of, state_of

if TYPE_CHECKING:
    from pricing.table import OfferTable
    from providers.base import Clock
    from providers.sandbox.catalog import Index


class GangRuns:
    """The gang half of SandboxProvider: a part of it, which provides the attributes
    below and `_start`, `_observe`, `_stop`, `_interrupt_record`, `_wait_record` and
    `_limit` (each working on one ordinary record, here one rank)."""

    _dir: Workdir
    clock: Clock
    billing_scale: float
    containers: tuple[str, ...] | None
    _reported: set[str]
    _offers: OfferTable
    _index: Index | None

    # --- the Gangs capability -------------------------------------------------------------

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """As many nodes as the region may run at once (every rank is a local process),
        0 where the catalog does not sell the type there."""
        from providers.sandbox.catalog import catalog_index

        if self._index is None:
            self._index = catalog_index(self._offers)
        if (cloud, region, instance_type) not in self._index:
            return 0
        return self._limit(cloud, region)

    # --- launch --------------------------------------------------------------------------

    def _check_gang(self, request: LaunchRequest) -> None:
        """InvalidRequest for a gang the sandbox can never run: an image job, or more
        nodes than its place may ever hold."""
        if container_image(request):
            raise InvalidRequest(
                NAME, "the sandbox runs multi-node gangs of commands, not container images"
            )
        most = self.max_gang_nodes(request.cloud, request.region, request.instance_type)
        if request.nodes > most:
            raise InvalidRequest(
                NAME,
                f"a gang of {request.nodes} nodes does not fit {request.cloud}/"
                f"{request.region} (at most {most})",
            )

    def _launch_gang(self, request: LaunchRequest, zone: str, digest: str) -> Instance:
        """Start the gang's missing ranks (all of them on a first launch); under the lock.
        The gang's record goes first: a launcher killed half-way leaves a gang that the
        next launch of the attempt completes, never a rank without its gang."""
        gang = load_gang(self._dir, request.attempt_id)
        if gang is None:
            gang = GangRecord(
                attempt_id=request.attempt_id,
                request_hash=digest,
                cloud=request.cloud,
                region=request.region,
                zone=zone,
                instance_type=request.instance_type,
                market=request.market,
                nodes=request.nodes,
                tags=instance_tags(request),
                port=free_port(),
                launched_at=self.clock.now().isoformat(),
                time_scale=self.billing_scale,
            )
            write_gang(self._dir, gang)
        self._complete(gang, request, zone, digest)
        return self._gang_instance(gang)

    def _complete(self, gang: GangRecord, request: LaunchRequest, zone: str, digest: str) -> None:
        """Start every rank of `gang` that has no record yet (none, after an interrupted
        launch, if the gang already ended: its other ranks are gone)."""
        if gang.ended_at is not None or gang.interrupted_at is not None:
            return
        addresses = (LOOPBACK,) * gang.nodes
        gpus = round(request.accelerator_count)
        for rank in range(gang.nodes):
            key = rank_key(gang.attempt_id, rank)
            if self._dir.load(key) is not None:
                continue
            env = rank_environment(rank, addresses, gpus, gang.port)
            tags = (*gang.tags, (TAG_RANK, str(rank)))
            self._start(request, zone, digest, key=key, tags=tags, extra_env=env)

    # --- reading a gang ---------------------------------------------------------------------

    def _gang_of(self, instance_id: str) -> GangRecord | None:
        """The gang `instance_id` names (the gang's id, or one rank's node id), if any."""
        if not instance_id.startswith(ID_PREFIX):
            return None
        attempt = instance_id.removeprefix(ID_PREFIX).partition("/")[0]
        if not ID_PATTERN.fullmatch(attempt):
            return None
        return load_gang(self._dir, attempt)

    def _ranks(self, gang: GangRecord) -> list[Record | None]:
        """Each rank's record as a provider last saw it (None: not started yet)."""
        ranks = []
        for rank in range(gang.nodes):
            record = self._dir.load(rank_key(gang.attempt_id, rank))
            ranks.append(None if record is None else self._observe(record))
        return ranks

    def _observe_gang(self, gang: GangRecord) -> tuple[GangRecord, tuple[GangMember, ...]]:
        """The gang and its members now, its end recorded the first time every rank is
        seen ended. A failed rank stops the others at once (all or nothing)."""
        ranks = self._ranks(gang)
        members = tuple(_member(gang, rank, record) for rank, record in enumerate(ranks))
        if gang.ended_at is not None:
            return gang, members
        state, code = gang_state(members)
        if state == "failed":
            for record in ranks:
                if record is not None and record.ended_at is None:
                    self._stop(record)
            ranks = self._ranks(gang)
            members = tuple(_member(gang, rank, record) for rank, record in enumerate(ranks))
        started = [record for record in ranks if record is not None]
        # A rank never started (a launcher killed half-way) starts no more once the gang
        # is reclaimed: then the ranks that did start are the whole gang.
        complete = len(started) == len(ranks) or gang.interrupted_at is not None
        if started and complete and all(record.ended_at for record in started):
            ended = max(record.ended_at for record in started if record.ended_at)
            self._end_gang(gang, ended, *gang_state(members))
            gang = load_gang(self._dir, gang.attempt_id) or gang
        return gang, members

    def _end_gang(self, gang: GangRecord, ended: str, state: str, code: int | None) -> None:
        """Record the gang's end, once (the first provider to see it writes it)."""
        with self._dir.locked():
            current = load_gang(self._dir, gang.attempt_id) or gang
            if current.ended_at is None:
                write_gang(self._dir, replace(current, ended_at=ended, state=state, exit_code=code))

    def _gang_instance(self, gang: GangRecord) -> Instance:
        """The Instance standing for the whole gang."""
        gang, members = self._observe_gang(gang)
        if gang.ended_at is not None:
            state, code = gang.state, gang.exit_code
        else:  # the gang's end shows once every rank has ended (its checkpoint written)
            state, code = gang_state(members)
            if state not in ("pending", "running"):
                state, code = "running", None
        head = self._dir.run_dir(rank_key(gang.attempt_id, 0)) / "log.txt"
        return Instance(
            id=ID_PREFIX + gang.attempt_id,
            provider=NAME,
            cloud=gang.cloud,
            region=gang.region,
            zone=gang.zone,
            instance_type=gang.instance_type,
            market=gang.market,
            state=state,
            exit_code=code,
            tags=gang.tags,
            launched_at=datetime.fromisoformat(gang.launched_at),
            ended_at=datetime.fromisoformat(gang.ended_at) if gang.ended_at else None,
            log_path=str(head),
            nodes=gang.nodes,
            members=members,
        )

    def _gang_instances(self) -> list[Instance]:
        return [self._gang_instance(gang) for gang in gang_records(self._dir)]

    def _gang_usage(self) -> dict[tuple[str, str], int]:
        """Nodes held per (cloud, region) by gangs still running."""
        used: dict[tuple[str, str], int] = {}
        for gang in gang_records(self._dir):
            if self._observe_gang(gang)[0].ended_at is None:
                key = (gang.cloud, gang.region)
                used[key] = used.get(key, 0) + gang.nodes
        return used

    # --- ending a gang ----------------------------------------------------------------------

    def _terminate_gang(self, gang: GangRecord) -> bool:
        """Stop every rank; False when the gang had already ended."""
        gang, _ = self._observe_gang(gang)
        if gang.ended_at is not None:
            return False
        ranks = self._ranks(gang)
        for record in ranks:
            if record is not None:
                self._stop(record)
        gang, _ = self._observe_gang(gang)
        if gang.ended_at is None:  # some rank never started: none will now
            self._end_gang(gang, self.clock.now().isoformat(), "terminated", None)
        return True

    def _interrupt_gang(self, gang: GangRecord, kind: str) -> InterruptionNotice | None:
        """Play a reclaim of the whole gang: every rank gets the notice and SIGTERM."""
        gang, _ = self._observe_gang(gang)
        if gang.ended_at is not None:
            return None
        notices = [
            self._interrupt_record(record, kind)
            for record in self._ranks(gang)
            if record is not None
        ]
        first = next((n for n in notices if n is not None), None)
        with self._dir.locked():
            current = load_gang(self._dir, gang.attempt_id) or gang
            if current.interrupted_at is None and first is not None:
                deadline = first.deadline.isoformat() if first.deadline else None
                current = replace(
                    current,
                    interrupted_at=first.noticed_at.isoformat(),
                    interrupt_kind=kind,
                    interrupt_deadline=deadline,
                )
                write_gang(self._dir, current)
        return notice_of(current) if current.interrupted_at else None

    def _wait_gang(self, gang: GangRecord, timeout: float) -> Instance:
        """The gang once every rank has ended, or as it is after `timeout` seconds."""
        import time

        end = time.monotonic() + timeout
        for record in self._ranks(gang):
            if record is not None:
                self._wait_record(record, max(0.0, end - time.monotonic()))
        return self._gang_instance(gang)

    def _gang_notices(self) -> list[InterruptionNotice]:
        """Notices of interrupted gangs not reported yet (under the lock)."""
        notices = []
        for gang in gang_records(self._dir):
            if gang.interrupted_at and gang.attempt_id not in self._reported:
                self._reported.add(gang.attempt_id)
                notices.append(notice_of(gang))
        return notices


def _member(gang: GangRecord, rank: int, record: Record | None) -> GangMember:
    """One rank as a gang member (pending until its process has started)."""
    node_id = ID_PREFIX + rank_key(gang.attempt_id, rank)
    if record is None:
        return GangMember(rank=rank, node_id=node_id, zone=gang.zone)
    return GangMember(
        rank=rank,
        node_id=node_id,
        zone=gang.zone,
        address=LOOPBACK,
        state=state_of(record),
        exit_code=record.exit_code,
    )
