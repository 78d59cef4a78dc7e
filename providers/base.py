"""The `Provider` interface and the plain data it speaks: LaunchRequest, Instance,
InterruptionNotice, plus the one start-up script every provider gives a job.

Every method docstring of `Provider` is a contract (Karpenter's habit): the
controller is written against these sentences, and the contract test suite
checks each provider, the sandbox and the clouds alike, against them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from providers.gang import GangMember
from providers.gangscript import gang_lines
from providers.jobscript import (
    CLOUD_RUNTIME,
    ContainerRuntime,
    container_image,
    job_body,
    workdir_lines,
)

if TYPE_CHECKING:
    from pricing.table import OfferTable

Market = Literal["spot", "on-demand"]
InstanceState = Literal["pending", "running", "succeeded", "failed", "terminated", "interrupted"]
MARKETS: tuple[str, ...] = ("spot", "on-demand")
ACTIVE_STATES: frozenset[str] = frozenset({"pending", "running"})
ENDED_STATES: frozenset[str] = frozenset({"succeeded", "failed", "terminated", "interrupted"})

# Tag keys valid on all three clouds (GCE labels: lowercase, digits, '-' and '_').
TAG_BROKER = "broker-id"
TAG_JOB = "broker-job"
TAG_ATTEMPT = "broker-attempt"
TAG_JOB_NAME = "broker-job-name"
TAG_TEAM = "broker-team"
TAG_REQUEST = "broker-request"  # request_hash: the same attempt id with another request is refused

# Ids become tags, client tokens and directory names: keep them to one safe shape.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV_PREFIX = "BROKER_"  # the broker's own variables; a manifest may not set them


class Clock(Protocol):
    """Where "now" comes from (broker.clock's clocks fit; providers may not import broker)."""

    def now(self) -> datetime: ...


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    """Everything a provider needs to start one attempt of a job on one placement.

    `checkpoint_uri` is the durable location from the manifest; `checkpoint_dir` is
    what the job sees as BROKER_CHECKPOINT_DIR (a local path synced to the URI, or
    the URI itself when empty). `resume_from` is empty on a first attempt.
    `max_price_per_hour` caps the spot price per instance-hour where a cloud takes one.
    `env` is (name, value) pairs in export order; a mapping is accepted and converted.
    `command` may be empty for a container `image`, whose entrypoint then runs. `setup`
    runs once before it. `workdir_uri` is the job's packed workdir
    (`providers.workdir`, `<sha256>.tar.gz`), delivered before setup: a `file://` URI
    where the broker runs, which a provider running jobs elsewhere uploads first.
    `time_limit_seconds` is how long the attempt may run before its engine stops it (0:
    no limit; a batch scheduler's `--time`); `interconnect` the fabric the placement
    asked for ("nvlink": one NVLink domain per node is a must); `pool` the on-prem pool
    it runs in ("" on a cloud).
    """

    attempt_id: str
    job_id: str
    cloud: str
    region: str
    instance_type: str
    command: str
    zone: str = ""
    market: Market = "on-demand"
    nodes: int = 1
    # The planned GPU: a cloud whose machine types take GPUs separately (GCE N1) needs it.
    accelerator: str = ""
    accelerator_count: float = 0.0
    job_name: str = ""
    team: str = ""
    image: str = ""
    env: tuple[tuple[str, str], ...] = ()
    checkpoint_uri: str = ""
    checkpoint_dir: str = ""
    resume_from: str = ""
    max_price_per_hour: float | None = None
    broker_id: str = "broker"  # which broker owns the instance (two may share an account)
    # Added later: out of repr, and hashed only when set (request_text), so that the
    # hash of a request without them is what it always was.
    setup: str = field(default="", repr=False)
    workdir_uri: str = field(default="", repr=False)
    time_limit_seconds: int = field(default=0, repr=False)
    interconnect: str = field(default="", repr=False)
    pool: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.env, Mapping):
            object.__setattr__(self, "env", tuple(self.env.items()))
        else:
            object.__setattr__(self, "env", tuple(tuple(pair) for pair in self.env))
        for label, value in (("attempt_id", self.attempt_id), ("job_id", self.job_id)):
            if not ID_PATTERN.fullmatch(value):
                raise ValueError(f"{label} {value!r}: use 1-63 letters, digits, '_', '.', '-'")
        if self.market not in MARKETS:
            raise ValueError(f"market {self.market!r}: expected one of {', '.join(MARKETS)}")
        if self.time_limit_seconds < 0:
            raise ValueError(f"time_limit_seconds cannot be negative: {self.time_limit_seconds}")
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, not {self.nodes}")
        if not self.command.strip() and not container_image(self):
            raise ValueError("command is empty (and no container image to run)")
        if self.setup.strip() and not self.command.strip():
            raise ValueError("setup needs a command: an image's entrypoint cannot follow it")
        for name, _ in self.env:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"env name {name!r} is not a shell variable name")
            if name.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"env name {name!r}: {RESERVED_ENV_PREFIX}* is the broker's")
        names = (self.cloud, self.region, self.zone, self.instance_type, self.image)
        if not all(text.isprintable() for text in (*names, self.job_name, self.team)):
            raise ValueError("names, image and team must be one line of printable text")
        texts = (self.command, self.checkpoint_dir, self.checkpoint_uri, self.resume_from)
        texts += (self.setup, self.workdir_uri)
        if any("\0" in text for text in (*texts, *(v for _, v in self.env))):
            raise ValueError("a NUL character cannot reach a process")


def request_text(request: LaunchRequest) -> str:
    """The request as one text to hash: its repr, then each later field that is set."""
    later = (
        ("setup", request.setup),
        ("workdir_uri", request.workdir_uri),
        ("time_limit_seconds", request.time_limit_seconds),
        ("interconnect", request.interconnect),
        ("pool", request.pool),
    )
    return repr(request) + "".join(f"; {name}={value!r}" for name, value in later if value)


def request_hash(request: LaunchRequest) -> str:
    """Which request an attempt's instance was launched for (the TAG_REQUEST tag): the
    first 16 hex digits of sha256(request_text(request)), so a relaunch of the same
    attempt with another request is caught by every provider the same way."""
    import hashlib

    return hashlib.sha256(request_text(request).encode()).hexdigest()[:16]


def instance_tags(request: LaunchRequest) -> tuple[tuple[str, str], ...]:
    """The tags every instance of `request` carries: how a restarted controller finds it."""
    tags = [
        (TAG_BROKER, request.broker_id),
        (TAG_JOB, request.job_id),
        (TAG_ATTEMPT, request.attempt_id),
    ]
    if request.job_name:
        tags.append((TAG_JOB_NAME, request.job_name))
    if request.team:
        tags.append((TAG_TEAM, request.team))
    return tuple(tags)


@dataclass(frozen=True)
class Instance:
    """What a provider reports about one launched attempt (a value, re-read by describe)."""

    id: str
    provider: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    market: str
    state: InstanceState
    exit_code: int | None = None  # None while running, or when the provider cannot know
    tags: tuple[tuple[str, str], ...] = ()
    launched_at: datetime | None = None
    ended_at: datetime | None = None  # when the provider saw it end
    log_path: str = ""
    nodes: int = 1
    members: tuple[GangMember, ...] = ()  # a gang's nodes by rank (providers.gang); () for one

    def tag(self, key: str) -> str | None:
        """The value of tag `key`, or None."""
        return next((value for k, value in self.tags if k == key), None)

    @property
    def job_id(self) -> str | None:
        return self.tag(TAG_JOB)

    @property
    def attempt_id(self) -> str | None:
        return self.tag(TAG_ATTEMPT)

    @property
    def active(self) -> bool:
        """Still pending or running (it costs money and holds capacity)."""
        return self.state in ACTIVE_STATES


def launch_to_end_hours(instance: Instance) -> float:
    """The hours between an instance's launch and its end (0 until both are known): how
    an instance is billed by a provider without a billing of its own."""
    if instance.launched_at is None or instance.ended_at is None:
        return 0.0
    return max(0.0, (instance.ended_at - instance.launched_at).total_seconds()) / 3600.0


@dataclass(frozen=True)
class InterruptionNotice:
    """A provider's warning that it is reclaiming an instance (spot reclaim, maintenance)."""

    instance_id: str
    provider: str
    kind: str  # "spot-reclaim", "maintenance", "preemption", ...
    noticed_at: datetime
    deadline: datetime | None = None  # when the provider stops the instance; None: unknown
    detail: str = field(default="", compare=False)


@runtime_checkable
class Provider(Protocol):
    """A place that rents machines by the hour. The controller knows nothing else."""

    name: str

    def offers(self) -> OfferTable:
        """What this provider can sell now, in the offers schema (pricing.schema).

        `capacity` holds how many more instances can be launched where the provider
        knows it (NaN when it does not); a price that is not sold is NaN, never 0.
        """
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Start `request` and return its instance, usually still pending.

        Idempotent per `request.attempt_id`: launching the same attempt again (after a
        timeout, a crash, a retry) returns the instance of the first launch and starts
        nothing new; the same attempt id with a different request is InvalidRequest.
        Every instance carries `instance_tags(request)`. The job runs `startup_script`.
        Raises InsufficientCapacity, QuotaExceeded, RateLimited, CredentialsError or
        InvalidRequest; never leaves a running instance behind an exception.
        """
        ...

    def describe(self, instance_id: str) -> Instance:
        """The instance as the provider sees it now; NotFound when it never existed or
        the provider has forgotten it. An ended instance keeps its exit code when known."""
        ...

    def terminate(self, instance_id: str) -> bool:
        """Stop the instance and everything it runs, giving the job SIGTERM first.

        Safe to repeat: True when this call ended a live instance, False when it had
        already ended (succeeded, failed, terminated, interrupted). NotFound when the
        provider does not know the id. Returns once the instance is stopped, or (for a
        cloud) once the provider has accepted the termination.
        """
        ...

    def list_instances(self) -> list[Instance]:
        """Every broker-tagged instance the provider still knows, live or ended: what a
        restarted controller reconciles its state against (match on the tags)."""
        ...

    def interruptions(self) -> list[InterruptionNotice]:
        """Notices that appeared since the previous call on this object, each reported
        once per provider object. A restarted controller may see a notice again for an
        instance it has not reconciled yet: acting on a notice must be idempotent."""
        ...

    def object_store(self) -> Any:
        """The ObjectStore for this provider's checkpoint URIs (providers.storage);
        may raise NotImplementedError."""
        ...


def local_path(location: str) -> str:
    """A `file://` location as the path it names (what a job on that machine opens);
    any other location as it is."""
    if not location.startswith("file://"):
        return location
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(location).path)


def job_environment(request: LaunchRequest) -> tuple[tuple[str, str], ...]:
    """The BROKER_* variables every job gets, on every provider (the job contract). A
    `file://` checkpoint location is given as its path: the job opens it as a folder."""
    return (
        ("BROKER_JOB", request.job_id),
        ("BROKER_JOB_NAME", request.job_name),
        ("BROKER_TEAM", request.team),
        ("BROKER_ATTEMPT", request.attempt_id),
        ("BROKER_CLOUD", request.cloud),
        ("BROKER_REGION", request.region),
        ("BROKER_ZONE", request.zone),
        ("BROKER_INSTANCE_TYPE", request.instance_type),
        ("BROKER_MARKET", request.market),
        ("BROKER_NODES", str(request.nodes)),
        ("BROKER_CHECKPOINT_DIR", local_path(request.checkpoint_dir or request.checkpoint_uri)),
        ("BROKER_CHECKPOINT_URI", request.checkpoint_uri),
        ("BROKER_RESUME_FROM", local_path(request.resume_from)),
    )


# How a VM learns that its cloud is reclaiming it (instance metadata, from inside):
# each snippet exits 0 once the notice is there. `$broker_md` is the metadata base URL.
NOTICE_CHECKS: dict[str, tuple[str, str]] = {
    # AWS: the spot instance-action document appears about 2 minutes before (IMDSv2).
    "aws": (
        "http://169.254.169.254",
        'broker_t=$(curl -sf -m 2 -X PUT "$broker_md/latest/api/token" '
        '-H "X-aws-ec2-metadata-token-ttl-seconds: 60") && '
        'curl -sf -m 2 -H "X-aws-ec2-metadata-token: $broker_t" '
        '"$broker_md/latest/meta-data/spot/instance-action" >/dev/null',
    ),
    # GCE: instance/preempted turns TRUE about 30 s before a spot VM stops.
    "gcp": (
        "http://metadata.google.internal",
        '[ "$(curl -sf -m 2 -H "Metadata-Flavor: Google" '
        '"$broker_md/computeMetadata/v1/instance/preempted")" = TRUE ]',
    ),
    # Azure: Scheduled Events lists a Preempt event at least 30 s before eviction.
    "azure": (
        "http://169.254.169.254",
        'curl -sf -m 2 -H "Metadata: true" '
        '"$broker_md/metadata/scheduledevents?api-version=2020-07-01" | grep -q Preempt',
    ),
}


def startup_script(
    request: LaunchRequest,
    *,
    exit_code_path: str | None = None,
    watch_notices: bool = True,
    workdir: str | None = None,
    containers: ContainerRuntime = CLOUD_RUNTIME,
    rank: int | None = None,
) -> str:
    """The job's start-up shell script: exports, the workdir, setup, then the command or
    the container image (clouds pass it as user data, the sandbox runs it with /bin/sh;
    the parts after the exports: `providers.jobscript`).

    The manifest's env comes first and the BROKER_* variables last, every value quoted.
    With `exit_code_path`, the script records the command's exit status there (atomically)
    when it ends, also after SIGTERM: the shell lets the job finish its checkpoint, then
    stops without running further commands. `workdir`: the folder the provider already
    delivered the request's workdir into; without it the script fetches the archive
    itself. `containers`: how this machine runs a container image.

    For a spot VM on a cloud (and with `watch_notices`), the job runs in its own session
    while a watcher polls the instance metadata for the cloud's reclaim notice
    (NOTICE_CHECKS, every BROKER_NOTICE_POLL seconds, default 5; base URL
    BROKER_METADATA_URL) and sends the job SIGTERM when it appears: the job contract
    (SIGTERM -> checkpoint -> exit) then runs before the VM goes away. The sandbox
    signals its jobs itself.

    `rank`: the member of a gang on a cloud VM (request.nodes > 1) this script starts;
    it then waits for the peers in the instance metadata and exports the rank
    environment (`providers.gangscript`) before the workdir.
    """
    lines = [
        "#!/bin/sh",
        f"# Generated by broker for job {request.job_id}, attempt {request.attempt_id}.",
    ]
    if request.image:
        lines.append(f"# Image: {request.image}")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in request.env]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in job_environment(request)]
    if exit_code_path is not None:
        final, tmp = shlex.quote(exit_code_path), shlex.quote(exit_code_path + ".tmp")
        lines += [
            "broker_record_exit() {",
            "  broker_status=$?",
            f"  printf '%s\\n' \"$broker_status\" > {tmp} && mv -f {tmp} {final}",
            "}",
            "trap broker_record_exit EXIT",
            "# The job gets a signal too; the shell waits for it, then exits with its status.",
            "trap 'exit $?' TERM INT HUP",
        ]
    if rank is not None and request.nodes > 1:
        gpus = round(request.accelerator_count)
        lines += gang_lines(request.cloud, rank, request.nodes, gpus)
    lines += workdir_lines(request, workdir)
    body = job_body(request, containers)
    spot = watch_notices and request.market == "spot"  # only spot VMs get reclaim notices
    notice = NOTICE_CHECKS.get(request.cloud) if spot else None
    if notice is None:
        lines.append(body)
        return "\n".join(lines) + "\n"
    base, check = notice
    lines += [
        f'broker_md="${{BROKER_METADATA_URL:-{base}}}"',
        f"broker_notice() {{ {check}; }}",
        f"setsid /bin/sh -c {shlex.quote(body)} &",
        "broker_job=$!",
        '( while kill -0 "$broker_job" 2>/dev/null; do',
        "    if broker_notice; then",
        f"      echo 'broker: {request.cloud} is reclaiming this instance: SIGTERM to the job' >&2",
        '      kill -TERM "-$broker_job" 2>/dev/null',  # the job's whole session
        "      exit 0",
        "    fi",
        '    sleep "${BROKER_NOTICE_POLL:-5}"',
        "  done ) &",
        "broker_watch=$!",
        'wait "$broker_job"; broker_status=$?',
        "# The shell running the command may end first: wait for the job's processes.",
        'while kill -0 "-$broker_job" 2>/dev/null; do sleep 0.1; done',
        'kill "$broker_watch" 2>/dev/null',
        'exit "$broker_status"',
    ]
    return "\n".join(lines) + "\n"
