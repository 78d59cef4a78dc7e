"""What some providers can do beyond the `Provider` contract, as small protocols.

A provider declares each ability it has by inheriting its protocol (`class
SandboxProvider(Capacity, Billing, ...)`), and the broker asks with `isinstance`,
once, when it is given the provider: never by probing for a method name. Each
method's docstring is a contract, checked by the capability suites in
`tests/providers/contract.py` for every provider that declares it.

| protocol | who has it | what the broker does with it |
|---|---|---|
| `Capacity` | sandbox, simulator, on-prem pools | skips full places within one pass |
| `PoolShares` | on-prem pools | counts a pool's room in GPUs, not nodes (shares of a node) |
| `Billing` | sandbox, simulator, on-prem pools | bills its own hours (a time scale, the engine's) |
| `CheckpointStores` | sandbox, simulator | copies a checkpoint between places |
| `Restrictions` | AWS, GCP, Azure | says why an offer is not for sale (`offers --live`) |
| `PlayedReclaims` | sandbox | plays a spot reclaim or crunch (the demo, `sandbox interrupt`) |
| `SpotMarket` | simulator | tells the spot policy whether spot is on sale at all now |
| `Gangs` | providers that launch N-node gangs | plans `nodes: N` only where one fits |

Without `Gangs`, a provider refuses a launch of more than one node (InvalidRequest).
Without `Billing`, an instance is billed from its launch to its end; without
`CheckpointStores`, a job reads and writes its manifest's checkpoint URI in place.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from providers.base import Instance, InterruptionNotice
    from providers.cloud import Unavailable


@runtime_checkable
class Capacity(Protocol):
    """A provider that knows how many more nodes each place can take now."""

    def free_nodes(self) -> dict[tuple[str, str], int]:
        """Nodes that can still be launched now per (cloud, region) this provider limits.

        A place that is not listed is not limited by this provider (a cloud's capacity
        shows only when a launch fails). Read once per pass: the count does not follow
        launches made after the call.
        """
        ...


@runtime_checkable
class PoolShares(Protocol):
    """A provider whose places sell shares of a node (on-prem pools: a 2-GPU job on an
    8-GPU node), so that their room is counted in GPUs, not in whole nodes."""

    def free_gpus(self) -> dict[tuple[str, str], int]:
        """Whole GPUs that can still be launched now per (cloud, pool), the pool being
        the offers' `zone`. A launch of k GPUs on each of n nodes takes k x n, its end
        gives them back. Pools not listed (MIG-sliced ones) keep `Capacity`'s whole-node
        count. Read once per pass, as `Capacity.free_nodes`."""
        ...


@runtime_checkable
class Billing(Protocol):
    """A provider that bills instance time its own way (e.g. a sandbox time scale)."""

    def billed_hours(self, instance: Instance) -> float:
        """Hours to bill for `instance`: from its launch to its end, or to now while it
        runs; never negative, and 0 for an instance that never started."""
        ...

    def time_scale(self, cloud: str, pool: str = "") -> float:
        """Billed seconds per second of this provider's clock for an instance launched
        on `cloud` (in on-prem pool `pool`) now (1 where time is billed as it passes;
        the sandbox's fast clock bills more); always positive. Recorded with each
        attempt, so that reports say which hours were not wall hours."""
        ...


@runtime_checkable
class CheckpointStores(Protocol):
    """A provider that keeps each job's checkpoints in a store per place (a bucket per
    region, played locally by the sandbox), rather than in the manifest's URI."""

    def checkpoint_store(self, job_id: str, cloud: str, region: str) -> str | None:
        """Where an attempt of `job_id` placed in (cloud, region) writes its checkpoints
        (its BROKER_CHECKPOINT_DIR) and resumes from: an absolute local path or a URI
        (`s3://`, `gs://`, `az://`, `file://`). The same answer for the same arguments.
        None when this provider keeps no store of its own for that place (a cloud it
        routes, whose jobs read the manifest's URI)."""
        ...

    def last_checkpoint_at(self, job_id: str, cloud: str, region: str) -> datetime | None:
        """When the job last wrote a checkpoint in that place's store, on the provider's
        clock; None when it never did (or the provider cannot tell)."""
        ...


@runtime_checkable
class Restrictions(Protocol):
    """A cloud adapter that can say why an offer of the catalog is not for sale here."""

    def unavailable(self) -> list[Unavailable]:
        """Every (place, type, market) this account cannot launch now, with the reason
        (not offered in a zone, restricted SKU, no quota): the rows `offers()` left out."""
        ...


@runtime_checkable
class PlayedReclaims(Protocol):
    """A provider on which the broker itself can play a cloud's spot market: a reclaim
    of one instance, or a capacity crunch (the demo, `broker sandbox interrupt`)."""

    def interrupt(self, instance_id: str, kind: str = "spot-reclaim") -> InterruptionNotice | None:
        """Reclaim a running instance as its cloud would: record a notice, send the job
        SIGTERM, and end it as "interrupted" (killed at the notice's deadline if it is
        still running). None when the instance had already ended; NotFound when unknown."""
        ...

    def crunch_spot(self, cloud: str) -> None:
        """From now on sell no spot on `cloud` (offers without a spot price, spot launches
        InsufficientCapacity), as when a cloud runs out of spot GPUs everywhere; for this
        object only. InvalidRequest when this provider cannot play it for that cloud."""
        ...


@runtime_checkable
class SpotMarket(Protocol):
    """A provider that knows whether spot capacity is on sale anywhere now."""

    def spot_open(self, gpus: tuple[str, ...]) -> bool:
        """Whether a spot instance with one of `gpus` could be launched somewhere now."""
        ...


@runtime_checkable
class Gangs(Protocol):
    """A provider that launches a gang of N nodes as one attempt (providers.gang): all
    in one gang domain (a placement group, one Slurm job, one pool), all or nothing."""

    def max_gang_nodes(self, cloud: str, region: str, instance_type: str) -> int:
        """The most nodes of `instance_type` one gang may have in (cloud, region): 1
        where no gang domain is offered, 0 where the type is not sold. A launch of more
        nodes raises InvalidRequest; the planner offers no such placement."""
        ...
