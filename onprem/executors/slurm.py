"""Attempts as Slurm batch jobs, through the Slurm CLI here or on a login node over SSH.

`sbatch --parsable` submits (`onprem.executors.slurm_text.batch_script`), `squeue`
and then `sacct` (`sacct -c`, the job completion file, on a cluster without
slurmdbd) say how a job is, `scancel` stops it, `sinfo` says what is free. Each
attempt has a directory `<base_dir>/<attempt id>/` on the cluster's shared storage:
the job's working directory `work/` (the staged workdir), `log.txt`, and the markers
`cancelled` / `interrupted` the executor leaves before it stops a job, so a job that
exits 0 on SIGTERM is still reported as the broker stopped it. A cancel returns once
squeue or sacct says the job ended: a cancelled job stays COMPLETING while Slurm kills
its steps, so the wait is bounded by the cluster's own KillWait and
UnkillableStepTimeout (`scontrol show config`) plus a margin, in seconds
(`providers.polling`), never by a number of polls.

Idempotency without a lookup per submit: the executor lists the broker's jobs once
(`squeue` and `sacct`, by job name) the first time it needs to, then remembers the
jobs it submits. A submit whose outcome is unknown (a timeout) forgets that list, so
the next submit looks again. Another broker process submitting the same attempt
after the list was read is not seen; the state store's claims keep two controllers
off one attempt.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from onprem.executors import slurm_text as text
from onprem.executors.base import AttemptRequest, AttemptStatus, NodeUnreachable
from onprem.executors.options import SlurmOptions
from onprem.executors.shell import LocalShell, Shell, SshShell
from providers.base import ID_PATTERN
from providers.errors import (
    CredentialsError,
    InsufficientCapacity,
    InvalidRequest,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from providers.polling import Ticker, wait_for

MARKERS = ("cancelled", "interrupted")
SACCT_LOOKBACK = "now-7days"  # how far back a restarted broker looks for ended jobs
_ERRORS: tuple[tuple[str, type[ProviderError]], ...] = (  # sbatch's words -> our classes
    ("partition not available", InsufficientCapacity),
    ("temporarily unable", RateLimited),
    ("unable to contact slurm controller", NodeUnreachable),
    ("socket timed out", NodeUnreachable),
    ("access/permission denied", CredentialsError),
    ("invalid user id", CredentialsError),
    ("authentication", CredentialsError),
    ("maxsubmit", QuotaExceeded),
    ("accounting/qos policy", QuotaExceeded),
    ("invalid", InvalidRequest),
    ("not available", InvalidRequest),
    ("more processors requested", InvalidRequest),
    ("requested time limit", InvalidRequest),
)


class SlurmExecutor:
    """One Slurm partition (or the default one) as a pool's engine; see the module docstring."""

    kind = "slurm"

    def __init__(
        self,
        options: SlurmOptions,
        pool: str,
        workdir: Path | None = None,
        provider: str = "onprem",
        ticker: Ticker | None = None,
    ) -> None:
        """`ticker`: the time a cancel's wait for Slurm is bounded on (wall time; a
        virtual one in tests, `providers.polling`)."""
        self.options = options
        self.pool = pool
        self.provider = provider
        self.shell: Shell
        if options.login:
            user, _, host = options.login.partition("@")
            self.shell = SshShell(
                host=host,
                user=user,
                port=options.port,
                identity_file=options.identity_file,
                known_hosts=options.known_hosts,
                connect_timeout=options.connect_timeout,
                provider=provider,
            )
        else:
            self.shell = LocalShell(provider)
        self._env = {"SLURM_CONF": options.slurm_conf} if options.slurm_conf else {}
        local = "" if options.login else str(_attempts(workdir) / pool)
        self._base = options.base_dir or local
        self._known: dict[str, AttemptStatus] | None = None  # attempt -> latest status
        self._lock = threading.Lock()
        self._config: dict[str, str] | None = None  # `scontrol show config`, read once
        self._ticker = ticker

    # --- the Executor contract (docstrings in onprem.executors.base) --------------------

    def submit(self, request: AttemptRequest) -> AttemptStatus:
        with self._lock:
            known = self._listing()
            if request.attempt_id in known:
                return known[request.attempt_id]
            directory = f"{self._base_dir()}/{request.attempt_id}"
            script = text.batch_script(request, self.pool, directory, self._slurm_options())
            try:
                job = self._sbatch(directory, script, request.workdir)
            except NodeUnreachable:
                self._known = None  # it may have been submitted: look again next time
                raise
            status = AttemptStatus(
                attempt_id=request.attempt_id,
                handle=job,
                state="pending",
                submitted_at=datetime.now(UTC),
                node_count=request.nodes,
                tags=request.tags,
                log_path=f"{directory}/log.txt",
            )
            known[request.attempt_id] = status
            return status

    def status(self, attempt_id: str) -> AttemptStatus | None:
        if not ID_PATTERN.fullmatch(attempt_id):
            return None
        with self._lock:
            known = self._listing()
            current = known.get(attempt_id)
            if current is None:
                return None
            if current.active:
                fresh = self._ask([current.handle]).get(attempt_id)
                if fresh is not None and not fresh.node_count:  # sacct of a job never placed
                    fresh = replace(fresh, node_count=current.node_count)
                current = fresh or current
                known[attempt_id] = current
            return current

    def cancel(self, attempt_id: str, grace_seconds: float, *, interrupted: bool = False) -> bool:
        current = self.status(attempt_id)
        if current is None or not current.active:
            return False
        directory = f"{self._base_dir()}/{attempt_id}"
        marker = "interrupted" if interrupted else "cancelled"
        self._run(["sh", "-c", 'mkdir -p "$1" && : > "$1/$2"', "mark", directory, marker])
        if current.state == "running":  # SIGTERM to the batch shell and every step
            self._run(["scancel", "--full", "--signal=TERM", current.handle])
            wait_for(lambda: self._ended(attempt_id), grace_seconds, ticker=self._ticker)
        self._run(["scancel", current.handle])  # TERM, KillWait, KILL; a pending job just goes
        # Until Slurm says it ended: a cancelled job stays COMPLETING (active) while its
        # steps are killed, for KillWait and up to UnkillableStepTimeout on a slow node.
        stopping = text.stop_seconds(self._slurm_config())
        wait_for(lambda: self._ended(attempt_id), stopping, ticker=self._ticker)
        return True

    def log(self, attempt_id: str, max_bytes: int = 65536) -> str:
        if not ID_PATTERN.fullmatch(attempt_id):
            return ""
        path = f"{self._base_dir()}/{attempt_id}/log.txt"
        done = self._run(
            ["sh", "-c", '[ -f "$1" ] && tail -c "$2" "$1"; exit 0', "log", path, str(max_bytes)]
        )
        return done.stdout

    def list_attempts(self) -> list[AttemptStatus]:
        with self._lock:
            self._known = None
            return sorted(self._listing().values(), key=lambda s: _job_number(s.handle))

    def close(self) -> None:
        self.shell.close()

    # --- what is free (offers) ---------------------------------------------------------------

    def gres_use(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Node -> gres type -> (GPUs configured, GPUs in use) from `sinfo`, for the
        partition of this pool (every partition when none is set); "" is untyped."""
        argv = [
            "sinfo",
            "-h",
            "-N",
            "-O",
            f"NodeList:{text.US},Gres:{text.US},GresUsed:{text.US},StateLong:{text.US}",
        ]
        if self.options.partition:
            argv += ["-p", self.options.partition]
        done = self._run(argv)
        if done.returncode != 0:
            raise _classified(self.provider, done.stderr)
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for line in done.stdout.splitlines():
            fields = [f.strip() for f in line.split(text.US)]
            if len(fields) < 4:
                continue
            node, gres, used, state = fields[:4]
            down = any(word in state for word in ("down", "drain", "fail", "maint", "inval"))
            counts = dict(text.parse_gres(gres))
            in_use = dict(text.parse_gres(used))
            out[node] = {
                kind: (total, total if down else min(total, in_use.get(kind, 0)))
                for kind, total in counts.items()
            }
        return out

    def pending_gres(self) -> dict[str, dict[str, int]]:
        """Job name -> gres type -> GPUs it asks for (all its nodes), for this pool's
        pending jobs: capacity that is spoken for, though sinfo does not count it yet.
        Keyed by job so a caller can tell whether a job started between two reads."""
        fields = f"Name:{text.US},tres-per-node:{text.US},NumNodes:{text.US}"
        done = self._run(["squeue", "-h", "--me", "-t", "PENDING", "-O", fields])
        if done.returncode != 0:
            raise _classified(self.provider, done.stderr)
        out: dict[str, dict[str, int]] = {}
        for line in done.stdout.splitlines():
            name, tres, nodes = ([*line.split(text.US), "", "", ""])[:3]
            named = text.parse_name(name.strip())
            if named is None or named[1] != self.pool:
                continue
            count = int(nodes) if nodes.strip().isdigit() else 1
            asks = out.setdefault(name.strip(), {})
            for kind, per_node in text.tres_gpus(tres.strip()):
                asks[kind] = asks.get(kind, 0) + per_node * count
        return out

    # --- talking to Slurm --------------------------------------------------------------------

    def _run(self, argv: Sequence[str], *, input: bytes | None = None):
        return self.shell.run(argv, input=input, env=self._env or None)

    def _slurm_options(self) -> dict[str, str]:
        o = self.options
        return {"partition": o.partition, "account": o.account, "qos": o.qos}

    def _base_dir(self) -> str:
        """The absolute attempts directory on the cluster (a login's home is resolved once)."""
        if not self._base or not self._base.startswith("/"):
            relative = self._base or ".broker/attempts"
            done = self._run(["sh", "-c", 'mkdir -p "$1" && cd "$1" && pwd', "base", relative])
            if done.returncode != 0:
                raise _classified(self.provider, done.stderr)
            self._base = done.stdout.strip()
        return self._base

    def _sbatch(self, directory: str, script: str, workdir: str | None) -> str:
        if isinstance(self.shell, LocalShell):
            work = Path(directory) / "work"
            if workdir:
                shutil.copytree(workdir, work, dirs_exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
            (Path(directory) / "batch.sh").write_text(script)
            done = self._run(["sbatch", "--parsable", f"{directory}/batch.sh"])
        else:
            bundle = _bundle(script, workdir)
            unpack = (
                'mkdir -p "$1/work" && tar -x -C "$1" -f - && exec sbatch --parsable "$1/batch.sh"'
            )
            done = self._run(["sh", "-c", unpack, "submit", directory], input=bundle)
        if done.returncode != 0:
            raise _classified(self.provider, done.stderr or done.stdout)
        job = done.stdout.strip().split(";")[0]
        if not job.isdigit():
            raise ProviderError(self.provider, f"sbatch said {done.stdout.strip()[:200]!r}")
        return job

    def _listing(self) -> dict[str, AttemptStatus]:
        """Every broker job Slurm knows, by attempt id (read once; see the module docstring)."""
        if self._known is None:
            found = self._ask(None)
            self._known = found
        return self._known

    def _ask(self, jobs: list[str] | None) -> dict[str, AttemptStatus]:
        """Statuses of `jobs` (None: all of ours) from squeue, then sacct for the rest."""
        argv = ["squeue", "-h", "-t", "all", "-O", text.SQUEUE_FORMAT]
        argv += ["-j", ",".join(jobs)] if jobs else ["--me"]
        done = self._run(argv)
        rows = text.parse_squeue(done.stdout) if done.returncode == 0 else []
        if done.returncode != 0 and "invalid job id" not in done.stderr.lower():
            raise _classified(self.provider, done.stderr)
        found: dict[str, AttemptStatus] = {}
        for row in rows:
            status = text.from_squeue(row, self.pool)
            if status is not None:
                found[status.attempt_id] = status
        seen = {status.handle for status in found.values()}
        if jobs is None or set(jobs) - seen:
            for status in self._from_accounting(None if jobs is None else sorted(set(jobs) - seen)):
                if status.attempt_id not in found:
                    found[status.attempt_id] = status
        return self._with_markers(found)

    def _from_accounting(self, jobs: list[str] | None) -> list[AttemptStatus]:
        argv = ["sacct", *self._accounting(), "-n", "-X", "--parsable2", "-o", text.SACCT_FORMAT]
        argv += ["-j", ",".join(jobs)] if jobs else ["-S", SACCT_LOOKBACK]
        done = self._run(argv)
        if done.returncode != 0:
            return []
        latest: dict[str, AttemptStatus] = {}
        for row in text.parse_sacct(done.stdout):
            status = text.from_sacct(row, self.pool)
            if status is not None:
                latest[status.attempt_id] = status  # the last run of a requeued job wins
        return list(latest.values())

    def _accounting(self) -> list[str]:
        """["-c"] when the cluster has no accounting database (read the completion file)."""
        none = self._slurm_config().get("AccountingStorageType") == "accounting_storage/none"
        return ["-c"] if none else []

    def _slurm_config(self) -> dict[str, str]:
        """`scontrol show config` as name -> value, read once ({} when it cannot be read)."""
        if self._config is None:
            done = self._run(["scontrol", "show", "config"])
            self._config = text.parse_config(done.stdout) if done.returncode == 0 else {}
        return self._config

    def _ended(self, attempt_id: str) -> bool:
        """Whether Slurm (squeue, then sacct) reports the attempt ended (or forgot it)."""
        now = self.status(attempt_id)
        return now is None or not now.active

    def _with_markers(self, found: dict[str, AttemptStatus]) -> dict[str, AttemptStatus]:
        """Ended statuses say "terminated" / "interrupted" where the broker stopped them."""
        base = self._base_dir() if found else ""
        ended = [s.attempt_id for s in found.values() if not s.active]
        marks = self._markers(base, ended) if ended else {}
        out = {}
        for attempt, status in found.items():
            state = {"cancelled": "terminated", "interrupted": "interrupted"}.get(
                marks.get(attempt, ""), status.state
            )
            out[attempt] = replace(status, state=state, log_path=f"{base}/{attempt}/log.txt")
        return out

    def _markers(self, base: str, attempts: list[str]) -> dict[str, str]:
        if isinstance(self.shell, LocalShell):
            out = {}
            for attempt in attempts:
                for marker in MARKERS:  # "cancelled" last: it wins
                    if os.path.exists(f"{base}/{attempt}/{marker}"):
                        out[attempt] = marker
            return out
        script = (
            'b=$1; shift; for a; do for m in interrupted cancelled; do [ -f "$b/$a/$m" ] '
            '&& echo "$a $m"; done; done; exit 0'
        )
        done = self._run(["sh", "-c", script, "marks", base, *attempts])
        return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def _attempts(workdir: Path | None) -> Path:
    if workdir is None:
        raise ValueError("a local Slurm executor needs base_dir or a work directory")
    return Path(workdir).resolve() / "slurm"


def _bundle(script: str, workdir: str | None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = script.encode()
        info = tarfile.TarInfo("batch.sh")
        info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
        tar.addfile(info, io.BytesIO(data))
        if workdir:
            tar.add(workdir, arcname="work")
    return buffer.getvalue()


def _classified(provider: str, stderr: str) -> ProviderError:
    said = " ".join(stderr.split())[-400:] or "no message"
    low = said.lower()
    for words, cls in _ERRORS:
        if words in low:
            return cls(provider, f"slurm: {said}")
    return ProviderError(provider, f"slurm: {said}")


def _job_number(handle: str) -> int:
    return int(handle) if handle.isdigit() else 0
