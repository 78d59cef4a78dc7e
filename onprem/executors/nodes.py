"""Attempts as process groups on nodes the broker reaches itself: the SSH and local executors.

`NodeExecutor` runs `onprem.executors.nodescripts` on each node through a Shell
(OpenSSH for `SshExecutor`, this machine for `LocalExecutor`). The broker allocates
the GPUs (`onprem.allocation`) and passes them in the request: each node's wrapper
exports CUDA_VISIBLE_DEVICES, and a multi-node attempt (a gang) gets the rank environment
(`providers.gang.rank_environment`: the nodes' inventory addresses, head first, and a
MASTER_PORT of the attempt's own) on every node, whose record is tagged with its rank.
Starting is all or nothing: when one node refuses, the nodes already started are
stopped before the error is raised.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from onprem.executors import nodescripts
from onprem.executors.base import AttemptRequest, AttemptStatus, NodeUnreachable
from onprem.executors.options import LocalOptions, SshOptions
from onprem.executors.shell import LocalShell, Shell, SshShell
from onprem.executors.slurm_gang import FIRST_PORT, PORTS
from providers.base import ID_PATTERN, InstanceState
from providers.errors import InvalidRequest, ProviderError
from providers.gang import TAG_RANK, rank_environment

US = "\x1f"
RECORD_FORMAT = 1
GANG_MARKER = "gang"  # a rank stopped because another rank of its gang failed
GANG_STOP_GRACE = 10.0  # seconds those ranks get between SIGTERM and SIGKILL
KILL_WAIT = 20.0  # seconds a node waits for a SIGKILLed group to be gone


@dataclass(frozen=True)
class _Seen:
    """One attempt's directory on one node, as LIST printed it."""

    host: str
    attempt_id: str
    alive: bool
    exit_code: int | None
    started: datetime | None
    ended: datetime | None
    marker: str
    record: dict


class NodeExecutor:
    """Attempts on nodes reached through `shells` (node name -> Shell); see the module
    docstring. `base_dirs`: where attempts live on each node."""

    kind = "nodes"

    def __init__(
        self, shells: Mapping[str, Shell], base_dirs: Mapping[str, str], provider: str = "onprem"
    ) -> None:
        self.shells = dict(shells)
        self.base_dirs = dict(base_dirs)
        self.provider = provider
        self._hosts_of: dict[str, tuple[str, ...]] = {}  # attempt -> its nodes, once seen

    # --- the Executor contract (docstrings in onprem.executors.base) --------------------

    def submit(self, request: AttemptRequest) -> AttemptStatus:
        hosts = request.hosts
        if not hosts or len(hosts) != request.nodes or set(hosts) - set(self.shells):
            raise InvalidRequest(
                self.provider, f"attempt {request.attempt_id}: hosts {hosts} are not this pool's"
            )
        started: list[str] = []
        try:
            for rank, host in enumerate(hosts):
                self._start(host, rank, request)
                started.append(host)
        except BaseException:
            self._stop(request.attempt_id, started, 0.0, "cancelled")
            raise
        self._hosts_of[request.attempt_id] = tuple(hosts)
        found = self.status(request.attempt_id)
        if found is None:
            raise ProviderError(self.provider, f"attempt {request.attempt_id} vanished at start")
        return found

    def status(self, attempt_id: str) -> AttemptStatus | None:
        if not ID_PATTERN.fullmatch(attempt_id):
            return None
        hosts = self._hosts_of.get(attempt_id)
        if hosts is None:
            return next((s for s in self.list_attempts() if s.attempt_id == attempt_id), None)
        seen = [item for host in hosts for item in self._list(host, attempt_id)]
        left = _left_by_a_failed_rank(seen)
        if left:  # all or nothing: one rank failed, the others stop now
            self._stop(attempt_id, left, GANG_STOP_GRACE, GANG_MARKER)
            seen = [item for host in hosts for item in self._list(host, attempt_id)]
        return _merge(attempt_id, seen) if seen else None

    def cancel(self, attempt_id: str, grace_seconds: float, *, interrupted: bool = False) -> bool:
        current = self.status(attempt_id)
        if current is None or not current.active:
            return False
        marker = "interrupted" if interrupted else "cancelled"
        return self._stop(attempt_id, current.nodes, grace_seconds, marker)

    def log(self, attempt_id: str, max_bytes: int = 65536) -> str:
        current = self.status(attempt_id)
        if current is None:
            return ""
        parts = []
        for host in current.nodes:
            done = self.shells[host].run(
                [
                    "sh",
                    "-c",
                    nodescripts.LOG,
                    "log",
                    self.base_dirs[host],
                    attempt_id,
                    str(max_bytes),
                ]
            )
            if len(current.nodes) > 1:
                parts.append(f"==> {host} <==\n")
            parts.append(done.stdout)
        return "".join(parts)[-max_bytes:]

    def list_attempts(self) -> list[AttemptStatus]:
        seen: dict[str, list[_Seen]] = {}
        for host in self.shells:
            for item in self._list(host):
                seen.setdefault(item.attempt_id, []).append(item)
        out = []
        for attempt_id, items in sorted(seen.items()):
            self._hosts_of[attempt_id] = tuple(items[0].record.get("hosts") or [items[0].host])
            out.append(_merge(attempt_id, items))
        return out

    def close(self) -> None:
        for shell in self.shells.values():
            shell.close()

    # --- on one node -------------------------------------------------------------------------

    def _start(self, host: str, rank: int, request: AttemptRequest) -> None:
        directory = f"{self.base_dirs[host]}/{request.attempt_id}"
        bundle = _bundle(rank, request, self._addresses(request.hosts), directory)
        done = self.shells[host].run(
            ["sh", "-c", nodescripts.START, "start", self.base_dirs[host], request.attempt_id],
            input=bundle,
        )
        if done.returncode != 0 or done.stdout.strip() not in ("started", "exists"):
            raise ProviderError(
                self.provider,
                f"{host}: cannot start attempt {request.attempt_id}: "
                f"{(done.stderr or done.stdout).strip()[-300:]}",
            )

    def _list(self, host: str, attempt_id: str | None = None) -> list[_Seen]:
        argv = ["sh", "-c", nodescripts.LIST, "list", self.base_dirs[host]]
        done = self.shells[host].run([*argv, attempt_id] if attempt_id else argv)
        if done.returncode != 0:
            raise NodeUnreachable(
                self.provider, f"{host}: cannot list attempts: {done.stderr[-300:]}"
            )
        return [_parse(host, line) for line in done.stdout.splitlines() if line.count(US) >= 6]

    def _stop(self, attempt_id: str, hosts: Sequence[str], grace: float, marker: str) -> bool:
        def stop(host: str) -> bool:
            tenths = str(max(0, round(grace * 10)))
            base = self.base_dirs[host]
            argv = ["sh", "-c", nodescripts.CANCEL, "cancel", base, attempt_id, tenths, marker]
            argv.append(str(round(KILL_WAIT * 10)))
            done = self.shells[host].run(argv, timeout=grace + KILL_WAIT + 30)
            return done.stdout.strip() == "stopped"

        if not hosts:
            return False
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            return any(list(pool.map(stop, hosts)))

    def _addresses(self, hosts: Sequence[str]) -> list[str]:
        out = []
        for host in hosts:
            shell = self.shells[host]
            out.append(shell.host if isinstance(shell, SshShell) else host)
        return out


class SshExecutor(NodeExecutor):
    """A pool's nodes over plain OpenSSH (`executor: {kind: ssh, user, ...}`)."""

    kind = "ssh"

    def __init__(
        self,
        nodes: Sequence[tuple[str, str, int]],
        options: SshOptions,
        provider: str = "onprem",
    ) -> None:
        """`nodes`: (name, address or "", port or 0) of each node of the pool."""
        shells = {
            name: SshShell(
                host=address or name,
                user=options.user,
                port=port or options.port,
                identity_file=options.identity_file,
                known_hosts=options.known_hosts,
                connect_timeout=options.connect_timeout,
                provider=provider,
            )
            for name, address, port in nodes
        }
        # One directory per node, also when the nodes share a home directory (NFS).
        bases = {name: f"{options.base_dir.rstrip('/')}/{name}" for name in shells}
        super().__init__(shells, bases, provider)


class LocalExecutor(NodeExecutor):
    """This machine as a pool (`executor: {kind: local}`): a workstation. Each node of
    the pool is a set of this machine's GPUs with its own attempts directory."""

    kind = "local"

    def __init__(
        self, nodes: Sequence[str], options: LocalOptions, workdir: Path, provider: str = "onprem"
    ) -> None:
        base = Path(options.base_dir or Path(workdir) / "attempts").expanduser().resolve()
        shells: dict[str, Shell] = {node: LocalShell(provider) for node in nodes}
        super().__init__(shells, {node: str(base / node) for node in nodes}, provider)


# --- what goes to a node, and what comes back ---------------------------------------------


def _bundle(rank: int, request: AttemptRequest, addresses: list[str], directory: str) -> bytes:
    """The tar START unpacks: record, wrapper, start-up script and the staged workdir."""
    host = request.hosts[rank]
    exports = list(request.env)
    if request.devices:
        exports.append(("CUDA_VISIBLE_DEVICES", ",".join(request.devices[rank])))
    if request.slices:
        exports.append(("BROKER_MIG_SLICES", ",".join(request.slices[rank])))
    port = attempt_port(request.attempt_id)
    exports += rank_environment(rank, tuple(addresses), request.gpus_per_node, port).items()
    tags = [*request.tags, (TAG_RANK, str(rank))] if request.nodes > 1 else list(request.tags)
    record = {
        "format": RECORD_FORMAT,
        "attempt_id": request.attempt_id,
        "tags": [list(pair) for pair in tags],
        "hosts": list(request.hosts),
        "host": host,
        "rank": rank,
        "devices": list(request.devices[rank]) if request.devices else [],
        "slices": list(request.slices[rank]) if request.slices else [],
        "gpus": list(request.gpus[rank]) if request.gpus else [],
        "dir": directory,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text, mode in (
            ("attempt.json", json.dumps(record, separators=(",", ":")), 0o644),
            ("run.sh", nodescripts.wrapper(exports), 0o755),
            ("startup.sh", request.script, 0o755),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        if request.workdir:
            tar.add(request.workdir, arcname="work")
    return buffer.getvalue()


def attempt_port(attempt_id: str) -> int:
    """A gang's MASTER_PORT, the same on every node and after a restart: from its id."""
    digest = hashlib.sha256(attempt_id.encode()).digest()
    return FIRST_PORT + int.from_bytes(digest[:4], "big") % PORTS


def _parse(host: str, line: str) -> _Seen:
    attempt_id, alive, code, started, ended, marker, record = line.split(US, 6)
    try:
        data = json.loads(record)
    except ValueError:
        data = {}
    return _Seen(
        host=host,
        attempt_id=attempt_id,
        alive=alive == "1",
        exit_code=int(code) if code.strip().lstrip("-").isdigit() else None,
        started=_epoch(started),
        ended=_epoch(ended),
        marker=marker,
        record=data if isinstance(data, dict) else {},
    )


def _epoch(text: str) -> datetime | None:
    """A node's `stat -c %.6Y` / `date +%s.%N` time (sub-second, so a time-scaled local
    pool bills a short job its real share); None when absent or not a time."""
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):  # empty, "nan", out of range
        return None


def _left_by_a_failed_rank(items: list[_Seen]) -> list[str]:
    """The nodes of a gang still running after one of its ranks failed by itself (a
    non-zero exit, not stopped by the broker): they are to be stopped."""
    failed = [
        i for i in items if not i.alive and i.ended is not None and i.exit_code and not i.marker
    ]
    return [i.host for i in items if i.alive] if failed and len(items) > 1 else []


def _merge(attempt_id: str, items: list[_Seen]) -> AttemptStatus:
    """One status for an attempt from its directories on its nodes (rank order)."""
    items = sorted(items, key=lambda i: i.record.get("rank", 0))
    record = items[0].record
    hosts = tuple(record.get("hosts") or [i.host for i in items])
    ended = all(i.ended is not None and not i.alive for i in items) and len(items) == len(hosts)
    state: InstanceState
    code = None
    if not ended:
        state = "running" if any(i.alive for i in items) else "pending"
        if any(i.ended is not None for i in items) and not any(i.alive for i in items):
            state = "running"  # a node has ended, another has not reported: still going
    else:
        # The code of the rank that failed, not of those its gang stopped after it.
        codes = [i.exit_code for i in items if i.marker != GANG_MARKER]
        codes += [i.exit_code for i in items if i.marker == GANG_MARKER]
        code = next((c for c in codes if c != 0), 0)
        markers = {i.marker for i in items}
        if "cancelled" in markers:
            state = "terminated"
        elif "interrupted" in markers:
            state = "interrupted"
        else:
            state = "succeeded" if code == 0 else "failed"
    held = [  # the pool's allocation: GPU indices, or MIG slot names
        (i.host, [str(g) for g in i.record.get("gpus") or []] or i.record.get("slices") or [])
        for i in items
    ]
    starts = [i.started for i in items if i.started is not None]
    ends = [i.ended for i in items if i.ended is not None]
    return AttemptStatus(
        attempt_id=attempt_id,
        handle=",".join(hosts),
        state=state,
        exit_code=code,
        started_at=min(starts) if starts else None,
        ended_at=max(ends) if ended and ends else None,
        nodes=hosts,
        node_count=len(hosts),
        gpus=sum(len(d) for _, d in held),
        gpu_ids=tuple(f"{host}:{','.join(d)}" for host, d in held if d),
        tags=tuple(tuple(p) for p in record.get("tags", []) if p[0] != TAG_RANK),  # the node's
        reason=items[0].marker,
        log_path=f"{items[0].host}:{items[0].record.get('dir', '')}/log.txt",
    )
