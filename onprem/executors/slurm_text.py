"""What the Slurm executor writes for Slurm and reads back from it, as pure functions.

Every read uses an explicit format with a field separator, never column positions:
`squeue -O field:<US>,...` and `sacct --parsable2` (fields split on "|", which
no field we ask for holds). Slurm's states map onto the broker's instance states
by `STATES`; a preemption is an interruption, not a failure.

A broker job is known to Slurm by its name, `broker:<broker id>:<pool>:<job
id>:<attempt id>` (names and ids cannot hold ':'): the name is the one tag `sacct
-c` keeps. The comment
holds every tag, URL-encoded, while squeue still knows the job.
"""

from __future__ import annotations

import math
import re
import shlex
import uuid
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import parse_qsl, urlencode

from onprem.executors.base import AttemptRequest, AttemptStatus
from onprem.executors.nodescripts import KEPT_ENV
from onprem.executors.slurm_gang import gang_start
from providers.base import TAG_ATTEMPT, TAG_BROKER, TAG_JOB, InstanceState

US = "\x1f"
NAME_PREFIX = "broker"
SQUEUE_FIELDS = (
    "JobID",
    "Name",
    "Comment",
    "State",
    "Reason",
    "exit_code",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "NodeList",
    "NumNodes",
    "tres-per-node",
    "RestartCnt",
)
SQUEUE_FORMAT = ",".join(f"{field}:{US}" for field in SQUEUE_FIELDS)
SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "NodeList", "Submit", "Start", "End")
SACCT_FORMAT = ",".join(SACCT_FIELDS)

# Slurm job states (squeue's long names; sacct's too, with "CANCELLED by <uid>") ->
# the broker's instance states.
STATES: dict[str, InstanceState] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",  # the script ended; epilogs still run
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "RESIZING": "running",
    "SUSPENDED": "running",  # holds its allocation
    "STOPPED": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "TIMEOUT": "failed",  # hit --time (it had TERM at --signal's grace first)
    "OUT_OF_MEMORY": "failed",
    "DEADLINE": "failed",
    "SPECIAL_EXIT": "failed",
    "CANCELLED": "terminated",
    "REVOKED": "terminated",
    "PREEMPTED": "interrupted",  # a higher partition took the nodes
    "NODE_FAIL": "interrupted",  # the node died under the job: not the job's fault
    "BOOT_FAIL": "interrupted",
}
# Slurm's defaults for KillWait and UnkillableStepTimeout (seconds), where the config
# cannot be read, and the time beyond them for slurmd's reports to reach slurmctld.
KILL_WAIT_DEFAULT, UNKILLABLE_DEFAULT, REPORT_MARGIN_SECONDS = 30.0, 60.0, 30.0
# PENDING reasons that no wait will satisfy: reported in `reason` for the broker to act.
HOPELESS_REASONS = frozenset(
    {
        "BadConstraints",
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "PartitionConfig",
    }
)


def job_name(broker_id: str, pool: str, job_id: str, attempt_id: str) -> str:
    return f"{NAME_PREFIX}:{broker_id}:{pool}:{job_id}:{attempt_id}"


def parse_name(name: str) -> tuple[str, str, str, str] | None:
    """(broker id, pool, job id, attempt id) of a broker job's name; None for other jobs."""
    parts = name.split(":")
    if len(parts) != 5 or parts[0] != NAME_PREFIX or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3], parts[4]


def comment(tags: tuple[tuple[str, str], ...]) -> str:
    return urlencode(tags)


def batch_script(
    request: AttemptRequest, pool: str, directory: str, options: Mapping[str, str]
) -> str:
    """The sbatch script of `request`: #SBATCH directives, then the start-up script run in
    its own session, with SIGTERM (from --signal before the time limit, or scancel)
    passed on to its whole process group. `options`: partition, account, qos (empty =
    Slurm's default). `directory` is the attempt's directory on the cluster."""
    name = job_name(request.broker_id, pool, request.job_id, request.attempt_id)
    lines = [
        "#!/bin/sh",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --output={directory}/log.txt",
        "#SBATCH --open-mode=append",
        f"#SBATCH --chdir={directory}/work",
        # A few plain variables, never the broker's own environment (its credentials);
        # not NONE, which makes slurmd read a login environment first (`su -`, seconds).
        f"#SBATCH --export={','.join(KEPT_ENV)}",
        f"#SBATCH --nodes={request.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --{'requeue' if request.requeue else 'no-requeue'}",
        f"#SBATCH --signal=B:TERM@{max(1, request.grace_seconds)}",
    ]
    for key in ("partition", "account", "qos"):
        if options.get(key):
            lines.append(f"#SBATCH --{key}={options[key]}")
    if request.gpus_per_node:
        typed = f"{request.gpu_type}:" if request.gpu_type else ""
        lines.append(f"#SBATCH --gres=gpu:{typed}{request.gpus_per_node}")
    if request.cpus_per_node:
        lines.append(f"#SBATCH --cpus-per-task={request.cpus_per_node}")
    if request.memory_mib_per_node:
        lines.append(f"#SBATCH --mem={request.memory_mib_per_node}M")
    if request.time_limit_seconds:
        lines.append(f"#SBATCH --time={math.ceil(request.time_limit_seconds / 60)}")
    if request.switch_wait_seconds and request.nodes > 1:
        lines.append(f"#SBATCH --switches=1@{_hms(request.switch_wait_seconds)}")
    if request.tags:  # an empty --comment= would end sbatch's reading of the directives
        lines.append(f"#SBATCH --comment={comment(request.tags)}")
    end = f"BROKER_{uuid.uuid4().hex}"
    start = ['setsid /bin/sh -c "$broker_script" &']
    if request.nodes > 1:  # a gang: one task per node, each with its rank (slurm_gang)
        start = gang_start(request.gpus_per_node, f"{end}_TASK")
    lines += [f"export {k}={shlex.quote(v)}" for k, v in request.env]
    lines += [
        # SIGTERM (--signal, scancel) goes to the job's whole session, once: the trap is
        # set first, so one that arrives while the job starts is passed on too.
        "broker_job=",
        "broker_term=",
        "broker_timer=",
        "broker_pass() {",
        '  kill -TERM "-$broker_job" 2>/dev/null || kill -TERM "$broker_job" 2>/dev/null',
        "}",
        "broker_on_term() {",
        "  broker_woke=1",
        '  [ -z "$broker_term" ] || return 0',
        "  broker_term=1",
        '  [ -z "$broker_job" ] || broker_pass',
        "}",
        "trap broker_on_term TERM INT",
        f"broker_script=$(cat <<'{end}'",
        request.script.rstrip("\n"),
        end,
        ")",
        *start,
        "broker_job=$!",
        '[ -z "$broker_term" ] || broker_pass',  # SIGTERM came while the job was starting
        # A trap interrupts `wait` (status > 128, the job maybe gone already): wait again
        # for the job's own status. 127 after an earlier status: that one was the job's.
        "broker_rc=",
        "while :; do",
        "  broker_woke=",
        '  wait "$broker_job"; broker_status=$?',
        '  if [ -n "$broker_rc" ] && [ "$broker_status" -eq 127 ]; then break; fi',
        "  broker_rc=$broker_status",
        '  [ -n "$broker_woke" ] || break',
        "done",
        '[ -z "$broker_timer" ] || kill "$broker_timer" 2>/dev/null',
        'exit "$broker_rc"',
    ]
    if request.time_limit_seconds:
        # slurmctld sends --signal from a check every 30 s, and loses it when that check
        # comes before the batch shell exists; this timer sends it all the same.
        warn = max(1, request.time_limit_seconds - max(1, request.grace_seconds))
        at = lines.index('[ -z "$broker_term" ] || broker_pass')
        timer = f"trap 'kill $s 2>/dev/null; exit 0' TERM; sleep {warn} & s=$!; wait $s"
        lines[at:at] = [f"( {timer} && kill -TERM $$ ) &", "broker_timer=$!"]
    return "\n".join(lines) + "\n"


def parse_squeue(text: str) -> list[dict[str, str]]:
    """The rows of `squeue -h -O SQUEUE_FORMAT`, as field -> value."""
    rows = []
    for line in text.splitlines():
        values = line.split(US)
        if len(values) >= len(SQUEUE_FIELDS):
            rows.append(dict(zip(SQUEUE_FIELDS, (v.strip() for v in values), strict=False)))
    return rows


def parse_sacct(text: str) -> list[dict[str, str]]:
    """The rows of `sacct -n -X --parsable2 -o SACCT_FORMAT`; a requeued job has one row
    per run, the last one last."""
    rows = []
    for line in text.splitlines():
        values = line.split("|")
        if len(values) == len(SACCT_FIELDS):
            rows.append(dict(zip(SACCT_FIELDS, values, strict=True)))
    return rows


def from_squeue(row: Mapping[str, str], pool: str) -> AttemptStatus | None:
    """An AttemptStatus from one squeue row of a broker job of `pool` (None for others)."""
    named = parse_name(row["Name"])
    if named is None or named[1] != pool:
        return None
    broker_id, _, job_id, attempt_id = named
    state_name = row["State"].split()[0] if row["State"] else "PENDING"
    state = STATES.get(state_name, "pending")
    if _refused(state, row["NodeList"]):
        return None
    tags = _tags(row["Comment"], broker_id, job_id, attempt_id)
    nodes = int(row["NumNodes"]) if row["NumNodes"].isdigit() else 1
    per_node = _gres_count(row["tres-per-node"])
    started = _time(row["StartTime"]) if state != "pending" else None
    return AttemptStatus(
        attempt_id=attempt_id,
        handle=row["JobID"],
        state=state,
        exit_code=_wait_status(row["exit_code"]) if state not in ("pending", "running") else None,
        submitted_at=_time(row["SubmitTime"]),
        started_at=started,
        ended_at=_time(row["EndTime"]) if state not in ("pending", "running") else None,
        nodes=tuple(expand_hostlist(row["NodeList"])),
        node_count=nodes,
        gpus=per_node * nodes if state != "pending" else 0,
        tags=tags,
        reason=state_name if row["Reason"] in ("None", "") else f"{state_name} {row['Reason']}",
        restarts=int(row["RestartCnt"]) if row["RestartCnt"].isdigit() else 0,
    )


def from_sacct(row: Mapping[str, str], pool: str) -> AttemptStatus | None:
    """An AttemptStatus from a sacct row (what is left once squeue forgot the job)."""
    named = parse_name(row["JobName"])
    if named is None or named[1] != pool:
        return None
    broker_id, _, job_id, attempt_id = named
    state_name = row["State"].split()[0]
    state = STATES.get(state_name, "pending")
    if _refused(state, row["NodeList"]):
        return None
    ended = state not in ("pending", "running")
    return AttemptStatus(
        attempt_id=attempt_id,
        handle=row["JobID"],
        state=state,
        exit_code=_exit_pair(row["ExitCode"]) if ended else None,
        submitted_at=_time(row["Submit"]),
        started_at=_time(row["Start"]),
        ended_at=_time(row["End"]) if ended else None,
        nodes=tuple(expand_hostlist(row["NodeList"])),
        tags=_tags("", broker_id, job_id, attempt_id),
        reason=state_name,
    )


def _refused(state: str, nodes: str) -> bool:
    """A job that FAILED without ever having a node: sbatch refused it ("Requested node
    configuration is not available") and Slurm kept a record. It never ran, so the
    attempt may be submitted again."""
    return state == "failed" and not expand_hostlist(nodes)


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config` ("Name = value" lines) as name -> value."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and " " not in name.strip():
            out[name.strip()] = value.strip()
    return out


def stop_seconds(config: Mapping[str, str]) -> float:
    """How long a cancelled job may take to end, by the cluster's own limits: KillWait
    (TERM to KILL), then UnkillableStepTimeout (KILL to giving up on the node), and a
    margin for the nodes' reports to reach slurmctld; Slurm's defaults where unread."""
    kill_wait = config_seconds(config.get("KillWait", ""), KILL_WAIT_DEFAULT)
    unkillable = config_seconds(config.get("UnkillableStepTimeout", ""), UNKILLABLE_DEFAULT)
    return kill_wait + unkillable + REPORT_MARGIN_SECONDS


def config_seconds(value: str, default: float) -> float:
    """Seconds of a config value such as "5 sec" (KillWait); `default` when not a number."""
    first = value.split()[0] if value.split() else ""
    return float(first) if first.isdigit() else default


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list ("n[1-3,5],gpu7") as names; "" and "(null)" give []."""
    text = text.strip()
    if not text or text in ("(null)", "None", "N/A"):
        return []
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not match:
            names.append(part)
            continue
        head, ranges, tail = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{head}{number:0{width}d}{tail}")
    return names


def parse_gres(text: str) -> list[tuple[str, int]]:
    """(type, count) of each GPU gres in sinfo's %G / Gres ("gpu:a100:8(S:0-1),gpu:2");
    an untyped GPU gres has type ""."""
    out = []
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*?\)", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        if not count.isdigit():
            continue
        out.append((parts[1] if len(parts) == 3 else "", int(count)))
    return out


def _gres_count(text: str) -> int:
    """GPUs per node in squeue's tres-per-node ("gres:gpu:a100:2", "gres/gpu=2")."""
    return sum(count for _, count in tres_gpus(text))


def tres_gpus(text: str) -> list[tuple[str, int]]:
    """(type, GPUs per node) of squeue's tres-per-node: "gres:gpu:a100:2" gives
    [("a100", 2)], "gres/gpu=2" and "gres:gpu:2" give [("", 2)]."""
    out = []
    for item in text.split(","):
        item = item.removeprefix("gres:").removeprefix("gres/")
        if not item.startswith("gpu"):
            continue
        parts = re.split(r"[:=]", item)
        count = int(parts[-1]) if parts[-1].isdigit() else 1
        kind = parts[1] if len(parts) == 3 else ""
        out.append((kind, count))
    return out


def _tags(text: str, broker_id: str, job_id: str, attempt_id: str) -> tuple[tuple[str, str], ...]:
    known = {TAG_BROKER: broker_id, TAG_JOB: job_id, TAG_ATTEMPT: attempt_id}
    extra = [(k, v) for k, v in parse_qsl(text if text != "(null)" else "") if k not in known]
    return (*known.items(), *extra)


def _time(text: str) -> datetime | None:
    """Slurm's local ISO time; None for Unknown, N/A, None, NONE."""
    try:
        return datetime.fromisoformat(text.strip()).astimezone()
    except ValueError:
        return None


def _wait_status(text: str) -> int | None:
    """squeue's exit_code is a wait status: 768 is exit 3, 9 is signal 9 (137)."""
    if not text.strip().isdigit():
        return None
    status = int(text)
    return 128 + (status & 0x7F) if status & 0x7F else status >> 8


def _exit_pair(text: str) -> int | None:
    """sacct's "code:signal" as one exit code (128 + signal when a signal ended it)."""
    code, _, sig = text.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(sig) if sig.isdigit() and int(sig) else int(code)


def _hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
