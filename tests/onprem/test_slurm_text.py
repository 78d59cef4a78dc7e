"""What the Slurm executor writes for Slurm and reads back (pure functions, no cluster)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onprem.executors.base import AttemptRequest
from onprem.executors.slurm_text import (
    SQUEUE_FIELDS,
    STATES,
    US,
    _exit_pair,
    _wait_status,
    batch_script,
    config_seconds,
    expand_hostlist,
    from_sacct,
    from_squeue,
    job_name,
    parse_config,
    parse_gres,
    parse_name,
    parse_sacct,
    parse_squeue,
    stop_seconds,
)


def _request(**changes) -> AttemptRequest:
    fields = dict(
        attempt_id="a-1",
        job_id="j-1",
        script="#!/bin/sh\necho hello\n",
        tags=(("broker-id", "broker"), ("broker-team", "vision & speech")),
    )
    return AttemptRequest(**(fields | changes))


def _directives(script: str) -> list[str]:
    return [
        line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")
    ]


def test_the_batch_script_says_what_the_attempt_needs():
    script = batch_script(
        _request(
            nodes=2,
            gpus_per_node=2,
            gpu_type="a100",
            cpus_per_node=4,
            time_limit_seconds=90,
            grace_seconds=45,
            requeue=True,
            switch_wait_seconds=125,
            env=(("WANDB_MODE", "offline run"),),
        ),
        "lab",
        "/shared/attempts/a-1",
        {"partition": "low", "account": "ml", "qos": ""},
    )
    said = _directives(script)
    assert said[0] == "--job-name=broker:broker:lab:j-1:a-1"
    for expected in (
        "--nodes=2",
        "--gres=gpu:a100:2",
        "--cpus-per-task=4",
        "--time=2",  # minutes, rounded up
        "--signal=B:TERM@45",
        "--requeue",
        "--switches=1@00:02:05",
        "--partition=low",
        "--account=ml",
        "--output=/shared/attempts/a-1/log.txt",
        "--chdir=/shared/attempts/a-1/work",
    ):
        assert expected in said
    assert not any(d.startswith("--qos") for d in said)  # empty: Slurm's default
    assert "--export=NONE" not in said and any(d.startswith("--export=PATH,") for d in said)
    comment = next(d for d in said if d.startswith("--comment="))
    assert dict(parse_qsl(comment.removeprefix("--comment=")))["broker-team"] == "vision & speech"
    assert "export WANDB_MODE='offline run'" in script and "echo hello" in script


def test_mig_types_no_comment_and_no_switches_for_one_node():
    script = batch_script(
        _request(gpus_per_node=3, gpu_type="a100_1g.10gb", switch_wait_seconds=60, tags=()),
        "mig",
        "/d",
        {},
    )
    said = _directives(script)
    assert "--gres=gpu:a100_1g.10gb:3" in said and "--no-requeue" in said
    assert not any(d.startswith(("--comment", "--switches", "--time")) for d in said)


def test_names_round_trip_and_other_jobs_are_not_ours():
    assert parse_name(job_name("b", "pool", "j.1", "a_2")) == ("b", "pool", "j.1", "a_2")
    for other in ("wrap", "broker:x", "broker:b:p:j:", "mine:b:p:j:a"):
        assert parse_name(other) is None


def _squeue_line(**values) -> str:
    row = dict.fromkeys(SQUEUE_FIELDS, "")
    row.update(values)
    return US.join(row[field] for field in SQUEUE_FIELDS) + US


def test_squeue_rows_are_split_on_the_separator_not_on_columns():
    line = _squeue_line(
        JobID="41",
        Name="broker:broker:lab:j-1:a-1",
        Comment="broker-team=a+b%7Cc+d",  # spaces and a '|' in a tag value
        State="FAILED",
        Reason="NonZeroExitCode",
        exit_code="768",
        SubmitTime="2026-12-01T08:00:00",
        StartTime="2026-12-01T08:00:05",
        EndTime="2026-12-01T08:10:05",
        NodeList="n[1-2]",
        NumNodes="2",
        **{"tres-per-node": "gres:gpu:a100:2", "RestartCnt": "0"},
    )
    (row,) = parse_squeue(line + "\n")
    status = from_squeue(row, "lab")
    assert (status.attempt_id, status.handle, status.state, status.exit_code) == (
        "a-1",
        "41",
        "failed",
        3,
    )
    assert status.nodes == ("n1", "n2") and status.gpus == 4
    assert dict(status.tags)["broker-team"] == "a b|c d"
    assert status.elapsed_seconds(status.ended_at) == 600
    assert from_squeue(row, "another-pool") is None


def test_a_submission_slurm_refused_is_no_attempt():
    line = _squeue_line(
        JobID="53", Name="broker:broker:lab:j:a", State="FAILED", Reason="BadConstraints",
        exit_code="256", NodeList="", NumNodes="1",
    )  # fmt: skip
    assert from_squeue(parse_squeue(line)[0], "lab") is None
    row = dict(
        JobID="53", JobName="broker:broker:lab:j:a", State="FAILED", ExitCode="1:0",
        NodeList="(null)", Submit="", Start="", End="",
    )  # fmt: skip
    assert from_sacct(row, "lab") is None


def test_pending_jobs_have_no_start_and_no_gpus_yet():
    line = _squeue_line(
        JobID="7",
        Name="broker:broker:lab:j:a",
        State="PENDING",
        Reason="Resources",
        StartTime="2026-12-01T09:00:00",  # Slurm's guess, not a start
        NumNodes="1",
        **{"tres-per-node": "gres:gpu:a100:8", "RestartCnt": "1"},
    )
    status = from_squeue(parse_squeue(line)[0], "lab")
    assert status.state == "pending" and status.started_at is None and status.gpus == 0
    assert status.reason == "PENDING Resources" and status.restarts == 1


def test_sacct_keeps_the_last_run_of_a_requeued_job():
    text = (
        "8|broker:broker:lab:j:a|PREEMPTED|0:0|n1|2026-12-01T08:00:00|2026-12-01T08:00:01|"
        "2026-12-01T08:05:00\n"
        "8|broker:broker:lab:j:a|COMPLETED|0:0|n2|2026-12-01T08:00:00|2026-12-01T08:06:00|"
        "2026-12-01T08:07:00\n"
    )
    rows = parse_sacct(text)
    assert [from_sacct(r, "lab").state for r in rows] == ["interrupted", "succeeded"]
    assert from_sacct(rows[-1], "lab").nodes == ("n2",)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("PENDING", "pending"),
        ("REQUEUED", "pending"),
        ("RUNNING", "running"),
        ("COMPLETING", "running"),
        ("SUSPENDED", "running"),
        ("COMPLETED", "succeeded"),
        ("FAILED", "failed"),
        ("TIMEOUT", "failed"),
        ("OUT_OF_MEMORY", "failed"),
        ("DEADLINE", "failed"),
        ("CANCELLED", "terminated"),
        ("PREEMPTED", "interrupted"),
        ("NODE_FAIL", "interrupted"),
        ("BOOT_FAIL", "interrupted"),
    ],
)
def test_every_slurm_state_has_a_broker_state(state, expected):
    assert STATES[state] == expected
    row = dict(
        JobID="1",
        JobName="broker:broker:p:j:a",
        State=f"{state} by 0" if state == "CANCELLED" else state,
        ExitCode="0:0",
        NodeList="n1",
        Submit="2026-12-01T08:00:00",
        Start="2026-12-01T08:00:00",
        End="2026-12-01T08:00:09",
    )
    assert from_sacct(row, "p").state == expected


def test_exit_codes_from_both_commands():
    assert [_wait_status(t) for t in ("0", "768", "9", "15", "", "N/A")] == [
        0,
        3,
        137,
        143,
        None,
        None,
    ]
    assert [_exit_pair(t) for t in ("0:0", "3:0", "0:9", "")] == [0, 3, 137, None]


def test_host_lists_and_gres():
    assert expand_hostlist("n[1-3,5],gpu07,x[08-10]") == [
        "n1", "n2", "n3", "n5", "gpu07", "x08", "x09", "x10",
    ]  # fmt: skip
    assert expand_hostlist("(null)") == [] and expand_hostlist("") == []
    assert parse_gres("gpu:a100:8(S:0-1),gpu:a100_1g.10gb:7") == [("a100", 8), ("a100_1g.10gb", 7)]
    assert parse_gres("gpu:a100:2(IDX:0-1),mps:100") == [("a100", 2)]
    assert parse_gres("gpu:4") == [("", 4)] and parse_gres("(null)") == []


@given(st.lists(st.integers(0, 300), min_size=1, max_size=20, unique=True))
def test_host_lists_round_trip(numbers):
    text = "n[" + ",".join(str(n) for n in sorted(numbers)) + "]"
    assert expand_hostlist(text) == [f"n{n}" for n in sorted(numbers)]


def test_the_clusters_time_limits_are_read_from_scontrol_show_config():
    shown = (
        "Configuration data as of 2026-12-01T18:00:00\n"
        "AccountingStorageType   = accounting_storage/none\n"
        "KillWait                = 5 sec\n"
        "UnkillableStepProgram   = (null)\n"
        "UnkillableStepTimeout   = 60 sec\n"
        "Slurmctld(primary) at host is UP\n"
    )
    config = parse_config(shown)
    assert config["AccountingStorageType"] == "accounting_storage/none"
    assert config_seconds(config["KillWait"], 30.0) == 5.0
    assert config_seconds(config["UnkillableStepTimeout"], 60.0) == 60.0
    assert config_seconds(config["UnkillableStepProgram"], 7.0) == 7.0  # not a number
    assert config_seconds("", 30.0) == 30.0 and "Slurmctld(primary) at host is UP" not in config
    assert stop_seconds(config) == 5 + 60 + 30  # KillWait, UnkillableStepTimeout, a margin
    assert stop_seconds({}) == 30 + 60 + 30  # Slurm's defaults
