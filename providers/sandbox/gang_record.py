"""A sandbox gang on disk: `<workdir>/<attempt_id>/gang.json` for the gang, and one
ordinary record per rank in `<workdir>/<attempt_id>/rank-<r>/` (instance.json, script,
log, exit code), each rank a local process of its own.

The gang's record is written before any rank starts, and a rank runs only once its
own record is on disk (the gate of processes.py): a launcher killed half-way leaves
a gang with some ranks, which the next launch of the same attempt completes. The
rank folders sit one level down, so `Workdir.records()` never lists a rank as an
instance of its own.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pricing.userio.atomic import atomic_write_text
from providers.sandbox.records import Workdir, decode_record, encode_record

GANG = "gang.json"
GANG_FORMAT = 1
LOOPBACK = "127.0.0.1"  # every rank of a sandbox gang runs on this machine


@dataclass(frozen=True)
class GangRecord:
    """The contents of gang.json: what the gang was launched with and how it ended.
    `port` is its MASTER_PORT, chosen free when the gang was first launched."""

    attempt_id: str
    request_hash: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    nodes: int
    tags: tuple[tuple[str, str], ...]
    port: int
    launched_at: str
    time_scale: float
    ended_at: str | None = None  # once every rank has ended
    state: str = ""  # the gang's state once ended (providers.gang.gang_state)
    exit_code: int | None = None
    interrupted_at: str | None = None  # a played reclaim of the gang or of one rank
    interrupt_kind: str = ""
    interrupt_deadline: str | None = None

    @classmethod
    def from_json(cls, text: str) -> GangRecord | None:
        return decode_record(cls, text, GANG_FORMAT)

    def to_json(self) -> str:
        return encode_record(self, GANG_FORMAT)


def rank_key(attempt_id: str, rank: int) -> str:
    """The key a rank's record lives under: its folder relative to the workdir."""
    return f"{attempt_id}/rank-{rank}"


def load_gang(workdir: Workdir, attempt_id: str) -> GangRecord | None:
    """The attempt's gang record, or None when the attempt is not a gang."""
    try:
        return GangRecord.from_json((workdir.run_dir(attempt_id) / GANG).read_text())
    except FileNotFoundError:
        return None


def write_gang(workdir: Workdir, gang: GangRecord) -> None:
    """Replace the gang's record, atomically (its folder is made on first write)."""
    folder = workdir.run_dir(gang.attempt_id)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / GANG, gang.to_json(), durable=False)


def gang_records(workdir: Workdir) -> list[GangRecord]:
    """Every gang's record, by folder name."""
    found = []
    for name in workdir.folders():
        if workdir.holds_record(name):  # a single-node attempt's folder: not a gang
            continue
        gang = load_gang(workdir, name)
        if gang is not None:
            found.append(gang)
    return found


def free_port() -> int:
    """A TCP port free on the loopback now: a gang's MASTER_PORT. Another process may
    take it before rank 0 listens; the gang then fails and is planned again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])
