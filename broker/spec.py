"""JobSpec and its parts: a validated manifest, as frozen plain data.

Built by `broker.manifest` from YAML (pydantic at the edge); read by the
planner, the queue and the controller. Nothing here parses or prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from pricing.regions import Place

SpotPolicy = Literal["never", "prefer", "only"]


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """One acceptable accelerator: canonical GPU name and count per node."""

    gpu: str
    count: float


@dataclass(frozen=True, slots=True)
class Amount:
    """A "N" (exactly N) or "N+" (at least N) figure for vCPUs or memory."""

    value: float
    at_least: bool = True

    def admits(self, offered: float) -> bool:
        return offered >= self.value if self.at_least else offered == self.value


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a placement must satisfy. Empty tuples mean "no constraint"."""

    accelerators: tuple[GpuAsk, ...] = ()  # any-of, in preference order; () = CPU-only job
    cpus: Amount | None = None
    memory_gib: Amount | None = None
    nodes: int = 1
    interconnect: str | None = None  # nvlink | infiniband | efa
    clouds: tuple[str, ...] = ()  # allow-list
    exclude_clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()  # globs
    countries: tuple[str, ...] = ()  # ISO codes, upper case
    spot: SpotPolicy = "never"
    max_price_per_hour: float | None = None  # USD for the whole job (all nodes)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What to run: `setup` once, then `command` (or the image's entrypoint), in `workdir`."""

    command: str = ""
    image: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None  # absolute folder to deliver to each node and run in
    setup: str = ""  # run once before command, in the workdir
    # The workdir as packed at submit (file:// URI of <sha256>.tar.gz; broker.workdirs):
    # every attempt of this version runs these files, whatever the folder holds later.
    workdir_archive: str = ""


MANIFEST = "manifest"  # the source of an estimate the manifest gives
DEFAULT_HOURS = 1.0  # what a job without an estimate and without history is planned for
NO_HISTORY = f"default {DEFAULT_HOURS:g} h: no finished run of this job or a similar one"


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """How long the job takes on its first-choice GPU, and when it must be done.

    `auto`: the manifest left the estimate to the broker (`estimate_hours` omitted or
    `auto`): `broker.learned_runtime` learns it from the team's finished runs before
    anything plans with it, and says where the figure came from in `source`."""

    estimate_hours: float = DEFAULT_HOURS
    deadline: timedelta | datetime | None = None  # relative to submission, or absolute (UTC)
    auto: bool = False
    source: str = MANIFEST  # why `estimate_hours` is what it is, for --explain and status

    def deadline_at(self, submitted: datetime) -> datetime | None:
        if self.deadline is None:
            return None
        if isinstance(self.deadline, timedelta):
            return submitted + self.deadline
        return self.deadline


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where the job checkpoints, how often and how big each checkpoint is.

    The last two fields are not in manifests: the controller sets them before planning
    (`broker.recovery.with_checkpoint_at`), so the planner prices moving a checkpoint as
    the ledger bills it (docs/planner.md, "Checkpoint egress")."""

    uri: str
    interval_minutes: float = 30.0
    size_gb: float = 0.0
    location: Place | None = None  # the bucket's region, when known
    # kept in the store of the place the job runs in (copied once when it moves), not
    # in one bucket; `location` is then where it lies now
    moves_with_job: bool = False
    saved: bool = False  # a checkpoint exists: the next attempt restores it


@dataclass(frozen=True, slots=True)
class DataInput:
    """An input the job reads once at start."""

    uri: str
    size_gb: float
    location: Place | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    max_cost: float | None = None  # USD for the whole job


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated `broker/v1` manifest."""

    name: str
    team: str
    requirements: Requirements
    queue: str = "default"
    priority: int = 0
    run: RunSpec = field(default_factory=RunSpec)
    runtime: RuntimeEstimate = field(default_factory=RuntimeEstimate)
    checkpoint: Checkpoint | None = None
    data: tuple[DataInput, ...] = ()
    budget: Budget = field(default_factory=Budget)
    max_restarts_on_error: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()
