"""The one small interface every on-prem executor has, and the plain data it speaks.

An executor runs attempts on a pool's nodes through an engine the team already has
(local processes, OpenSSH, Slurm). `OnPremProvider` maps these verbs onto the
`Provider` contract, so the controller never learns which executor runs a pool.
Each method's docstring is a contract that `tests/onprem/test_executors.py` checks
for all three executors against real processes, a real sshd and a real Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from providers.base import InstanceState
from providers.errors import ProviderError


class NodeUnreachable(ProviderError):
    """A node (or a Slurm login node) did not answer: the job may be fine; ask again later."""

    default_retryable = True


@dataclass(frozen=True, kw_only=True)
class AttemptRequest:
    """One attempt of a job, as an executor needs it.

    `hosts`, `gpus` and `devices` are the broker's own allocation (SSH and local
    pools): the nodes, per node the GPU indices of the pool's allocation, and the
    device ids they are on the node (CUDA_VISIBLE_DEVICES); empty for Slurm, which
    allocates itself. `gpu_type` is the engine's name for the GPU
    (a Slurm gres type such as `a100` or `a100_1g.10gb`). `slices` are MIG slots the
    broker allocated per host ("<gpu>.<k>"), told to the job as BROKER_MIG_SLICES.
    `script` is the job's start-up shell script (providers.base.startup_script);
    `env` holds further exports the executor puts before it. `workdir` is a local
    directory whose files are copied into the attempt's directory, where the job
    starts. `time_limit_seconds` 0 means none; `grace_seconds` is how long the job has
    between SIGTERM and SIGKILL. `switch_wait_seconds` > 0 asks Slurm for one leaf
    switch (`--switches=1@<wait>`). `tags` are what a restarted broker finds it by.
    """

    attempt_id: str
    job_id: str
    broker_id: str = "broker"
    tags: tuple[tuple[str, str], ...] = ()
    nodes: int = 1
    hosts: tuple[str, ...] = ()
    devices: tuple[tuple[str, ...], ...] = ()
    gpus: tuple[tuple[int, ...], ...] = ()
    slices: tuple[tuple[str, ...], ...] = ()
    gpus_per_node: int = 0
    gpu_type: str = ""
    cpus_per_node: int = 0
    memory_mib_per_node: int = 0
    time_limit_seconds: int = 0
    grace_seconds: int = 30
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    script: str
    requeue: bool = False
    switch_wait_seconds: int = 0


@dataclass(frozen=True)
class AttemptStatus:
    """An attempt as its engine reports it now.

    `handle`: the engine's id (a Slurm job id; "<host>,<host>" for SSH and local).
    `state` uses the broker's instance states: a preemption is "interrupted", never
    "failed". `exit_code` is the job's (128 + n for a signal), None while it runs or
    when the engine cannot know. Times are the engine's: `started_at` is when the job
    began running (None while pending), `ended_at` when it stopped. `gpus` counts the
    GPUs (or MIG slices) the engine allocated to it over all nodes; `gpu_ids` lists
    them where the engine says which ("n1:0,1"). `restarts` counts the times the
    engine requeued it (Slurm with `--requeue`); `reason` is the engine's word for a
    pending or ended state (PENDING Resources, PREEMPTED, NODE_FAIL ...).
    """

    attempt_id: str
    handle: str
    state: InstanceState
    exit_code: int | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    nodes: tuple[str, ...] = ()
    node_count: int = 0  # nodes asked (known before `nodes` are)
    gpus: int = 0
    gpu_ids: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    restarts: int = 0
    log_path: str = ""

    @property
    def active(self) -> bool:
        return self.state in ("pending", "running")

    def elapsed_seconds(self, now: datetime) -> float:
        """Seconds the job has run (to `now` while it runs): what the pool bills."""
        if self.started_at is None:
            return 0.0
        end = self.ended_at or now
        return max(0.0, (end - self.started_at).total_seconds())


@runtime_checkable
class Executor(Protocol):
    """Runs a pool's attempts through one engine."""

    kind: str

    def submit(self, request: AttemptRequest) -> AttemptStatus:
        """Start `request` and return its status, usually pending or running.

        Idempotent per attempt id: when the engine already has an attempt of that id
        (looked up by its tag before anything is submitted), its status comes back and
        nothing new starts. Raises InsufficientCapacity when the engine refuses for
        now, InvalidRequest when it never could, CredentialsError when it refuses us,
        NodeUnreachable when it cannot be reached; leaves nothing running behind an
        exception.
        """
        ...

    def status(self, attempt_id: str) -> AttemptStatus | None:
        """The attempt as the engine sees it now; None when the engine has no attempt
        of that id. NodeUnreachable when it cannot be asked."""
        ...

    def cancel(self, attempt_id: str, grace_seconds: float, *, interrupted: bool = False) -> bool:
        """Stop the attempt: SIGTERM to all its processes, SIGKILL after `grace_seconds`.

        True when this call stopped a live attempt, False when it had already ended or
        is unknown. It then reports "terminated", or "interrupted" with `interrupted`
        (the broker's own preemption), whatever the job's exit code; returns once the
        attempt has stopped.
        """
        ...

    def log(self, attempt_id: str, max_bytes: int = 65536) -> str:
        """The last `max_bytes` of the attempt's output (stdout and stderr); "" if none."""
        ...

    def list_attempts(self) -> list[AttemptStatus]:
        """Every attempt this broker started through the engine (found by its tag) that
        the engine still knows, live or ended: what a restarted broker reconciles."""
        ...

    def close(self) -> None:
        """Release what the executor holds open (SSH connections); safe to repeat."""
        ...
