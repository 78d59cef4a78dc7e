"""A simulated job as the manifest a user would have written under a given policy."""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING

from broker.sim.model import SimJob

if TYPE_CHECKING:
    from broker.manifest.load import Manifest

GPUS_PER_NODE = 8


def label(text: str) -> str:
    """A manifest label (name, team) from any trace text."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (cleaned or "x")[:63].strip("-") or "x"


def deadline_minutes(hours: float) -> int:
    """A deadline in the manifest's whole minutes (at least one)."""
    return max(1, math.floor(hours * 60 + 1e-6))


def manifest_deadline(job: SimJob) -> float | None:
    """The job's deadline, in hours from submission, as its manifest states it."""
    return None if job.deadline_hours is None else deadline_minutes(job.deadline_hours) / 60


def manifest_text(
    job: SimJob, spot: str, clouds: tuple[str, ...] = (), name: str | None = None
) -> str:
    """The YAML of `job` with placement.spot = `spot` (one document)."""
    nodes = max(1, math.ceil(job.gpus / GPUS_PER_NODE))
    per_node = job.gpus if nodes == 1 else GPUS_PER_NODE
    lines = [
        "apiVersion: broker/v1",
        f"name: {name or label(job.name)}",
        f'team: "{label(job.team)}"',  # quoted: a numeric VC id is still a name
        f"priority: {job.priority}",
        "resources:",
        f"  accelerators: {job.gpu}:{per_node}",
    ]
    if nodes > 1:
        lines.append(f"  nodes: {nodes}")
    lines.append("placement:")
    if clouds:
        lines.append(f"  clouds: [{', '.join(clouds)}]")
    lines += [f"  spot: {spot}", "run:", "  command: simulated", "runtime:"]
    lines.append(f"  estimate_hours: {job.hours!r}")
    if job.deadline_hours is not None:
        lines.append(f"  deadline: {deadline_minutes(job.deadline_hours)}m")
    if job.checkpoint_minutes is not None:
        lines += [
            "checkpoint:",
            f"  uri: s3://sim-checkpoints/{name or label(job.name)}/",
            f"  interval_minutes: {job.checkpoint_minutes!r}",
            f"  size_gb: {job.checkpoint_gb!r}",
        ]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1 << 12)
def parsed(text: str) -> Manifest:
    """The one manifest of `text` (`parse_manifest_text`), parsed once per process: the
    runs of a benchmark submit the same few texts again, and a Manifest is frozen."""
    from broker.manifest.load import parse_manifest_text

    (manifest,) = parse_manifest_text(text)
    return manifest
