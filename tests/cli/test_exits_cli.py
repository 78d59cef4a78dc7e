"""Exits as documented, through the real entry point: every command walked with a
failing provider (AWS through boto3 against moto, its credentials gone) says one line and
exits 5 when it needs the provider; Ctrl-C exits 130; a closed stdout ends quietly; usage
errors exit 2; `logs` of a job on a cloud says where its output is."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker.cli.main import COMMANDS
from tests.cli.runner import run_cli
from tests.fakes import aws as fakes
from tests.fakes.offers import write_catalog
from tests.waiting import wait_until

moto_server = fakes.moto_server
aws_clients = fakes.aws_clients
aws_env = fakes.aws_env

REPO = Path(__file__).resolve().parents[2]
JOB = """\
apiVersion: broker/v1
name: t4-smoke
team: nlp
resources:
  accelerators: T4:1
placement:
  clouds: [aws]
run:
  command: sleep 600
runtime:
  estimate_hours: 1
"""
PROVIDER, FAILED, BAD_INPUT, OK = 5, 1, 2, 0


def walk(tmp_path: Path, job: str) -> dict[str, tuple[tuple[str, ...], int]]:
    """One invocation of every command and the exit it must give with a failing
    provider: 5 for those that need the provider, their usual code otherwise."""
    state = ("--state", str(tmp_path / "state.db"))
    catalog = ("--catalog", str(tmp_path / "offers.csv"))
    jobs = str(REPO / "examples" / "jobs")
    return {
        "offers": (("offers", "--live", "--gpu", "T4", *catalog), PROVIDER),
        "validate": (("validate", jobs), OK),
        "schema": (("schema",), OK),
        "import": (("import", "skypilot", "--help"), OK),
        "plan": (("plan", job, *catalog), OK),
        "estimate": (("estimate", job, *catalog), OK),
        "ci": (("ci", "--help"), OK),
        "submit": (("submit", job, *state), OK),
        "rerun": (("rerun", "t4-smoke", *state), FAILED),  # it has not finished
        "jobs": (("jobs", "--state-file", state[1]), OK),
        "queue": (("queue", *state, *catalog), PROVIDER),
        "status": (("status", "t4-smoke", *state), OK),  # the store only
        "cancel": (("cancel", "t4-smoke", *state, *catalog), PROVIDER),
        "logs": (("logs", "t4-smoke", *state, *catalog), PROVIDER),
        "run": (("run", *state, *catalog), PROVIDER),
        "demo": (("demo", "--help"), OK),  # sandbox only (tests/cli/test_jobs_cli.py)
        "cost-report": (("cost-report", *state), OK),
        "check": (("check", "--cloud", "aws", "--timeout", "5"), FAILED),  # none usable
        "pricing": (("pricing", "status"), OK),
        "sandbox": (("sandbox", "interrupt", "t4-smoke", *state, *catalog), BAD_INPUT),  # aws
        "pools": (("pools", "import", "--help"), OK),  # Slurm's, not a cloud's
        "metrics": (("metrics", "serve", "--help"), OK),  # the state only (test_metrics_cli.py)
        "simulate": (("simulate", "--help"), OK),
        # the store only; a target that is no postgresql:// URL is refused
        "state": (("state", "migrate", "--from", state[1], "--to", state[1]), BAD_INPUT),
    }


def test_every_command_with_a_failing_provider_exits_as_documented(
    capsys, aws_env, tmp_path, monkeypatch
):
    write_catalog(tmp_path / "offers.csv")
    job = tmp_path / "t4.yaml"
    job.write_text(JOB)
    monkeypatch.setenv("BROKER_CLOUDS", "aws")
    monkeypatch.setenv("BROKER_AWS_IMAGE_ID", aws_env.image_id)
    state = ("--state", str(tmp_path / "state.db"))
    catalog = ("--catalog", str(tmp_path / "offers.csv"))
    assert run_cli(capsys, "submit", str(job), *state).code == 0
    launched = run_cli(capsys, "run", "--once", *state, *catalog)
    assert launched.code == 0, launched.stderr
    where = run_cli(capsys, "logs", "t4-smoke", *state, *catalog)  # a cloud keeps its logs
    assert where.code == 0 and "ran on aws (us-east-1" in where.stderr
    assert "aws ec2 get-console-output --region us-east-1 --instance-id i-" in where.stderr
    waiting = tmp_path / "waiting.yaml"  # a queued job: `queue` must ask for offers
    waiting.write_text(JOB.replace("t4-smoke", "t4-waiting"))
    assert run_cli(capsys, "submit", str(waiting), *state).code == 0
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    cases = walk(tmp_path, str(job))
    assert set(cases) == set(COMMANDS), "every command is walked: add the new one here"
    for args, expected in cases.values():
        result = run_cli(capsys, *args)
        said = f"broker {' '.join(args)} -> {result.code}: {result.stderr[-600:]}"
        assert result.code == expected, said
        assert "Traceback" not in result.stderr, said
        if expected == PROVIDER:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("broker: error: "), said
            assert "credentials" in lines[0].lower(), said
            assert fakes.FAKE_SECRET not in result.stdout + result.stderr


def broker(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="100")
    return subprocess.Popen([sys.executable, "-m", "broker", *args], env=env, text=True, **kwargs)


def test_ctrl_c_exits_130_for_a_long_command(tmp_path):
    job = tmp_path / "sleepy.yaml"
    sleepy = JOB.replace("placement:\n  clouds: [aws]\n", "").replace("t4-smoke", "zz")
    job.write_text(sleepy.replace("sleep 600", "echo started; sleep 600"))
    state = str(tmp_path / "state.db")
    subprocess.run(
        [sys.executable, "-m", "broker", "submit", str(job), "--state", state],
        check=True,
        capture_output=True,
    )
    running = broker(
        "run", "--poll", "0.05", "--state", state, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # Ready once the store knows the instance and the job has printed: what `logs` needs.
    # (A record in the sandbox's folder alone is not: the controller may not have stored
    # the instance yet when Ctrl-C stops it, and `logs` would then find no attempt.)
    assert wait_until(lambda: "started" in _logs(state), timeout=120), _logs(state)
    running.send_signal(signal.SIGINT)
    out, err = running.communicate(timeout=60)
    assert running.returncode == 130, err
    assert "interrupted: stopped; running jobs keep running" in err and "Traceback" not in err
    follow = broker(
        "logs", "zz", "-f", "--state", state, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert follow.stdout is not None
    ready, _, _ = select.select([follow.stdout], [], [], 60)
    assert ready and follow.stdout.readline() == "started\n"  # it follows the log now
    follow.send_signal(signal.SIGINT)
    assert follow.wait(timeout=60) == 130
    assert follow.stderr is not None and "Traceback" not in follow.stderr.read()
    subprocess.run(
        [sys.executable, "-m", "broker", "cancel", "zz", "--state", state],
        check=True,
        capture_output=True,
    )


def _logs(state: str) -> str:
    """What `broker logs zz` prints now ("" while the store knows no instance of it)."""
    done = subprocess.run(
        [sys.executable, "-m", "broker", "logs", "zz", "--state", state],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout


def test_ctrl_c_exits_130_for_the_demo(tmp_path):
    demo = broker(
        "demo", "--state", str(tmp_path / "d.db"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert demo.stderr is not None
    said = ""
    while "launched" not in said:  # it is running jobs now
        ready, _, _ = select.select([demo.stderr], [], [], 60)
        assert ready, said
        said += demo.stderr.readline()
    demo.send_signal(signal.SIGINT)
    assert demo.wait(timeout=60) == 130
    assert "Traceback" not in demo.stderr.read()


def test_a_closed_stdout_ends_quietly():
    reader = subprocess.Popen(["head", "-n", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    writer = broker("offers", "--limit", "0", stdout=reader.stdin, stderr=subprocess.PIPE)
    assert reader.stdin is not None
    reader.stdin.close()
    _, err = writer.communicate(timeout=120)
    assert reader.wait(timeout=10) == 0
    assert writer.returncode == 0, err
    assert err.strip().startswith("bundled snapshot") or not err.strip()
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("plan",), "Missing argument"),
        (("bogus",), "No such command"),
        (("offers", "--sort", "cheap"), "--sort must be"),
        (("queue", "--output", "yaml"), "Invalid value"),
    ],
)
def test_usage_errors_exit_2(capsys, args, said):
    result = run_cli(capsys, *args)
    assert result.code == 2 and said in result.stderr and "Traceback" not in result.stderr


def test_a_followed_log_prints_a_character_split_between_two_reads_whole(tmp_path):
    from broker.cli.status import LogTail

    log = tmp_path / "log.txt"
    tail = LogTail(log)
    assert tail.read() == ""  # no log yet
    log.write_bytes("café ".encode() + "é".encode()[:1])  # the job's write stops mid-character
    assert tail.read() == "café "
    with log.open("ab") as handle:
        handle.write("é".encode()[1:] + b"\n")
    assert tail.read() == "é\n" and tail.read() == ""
    with log.open("ab") as handle:
        handle.write(b"\xc3")  # the job ended mid-character
    assert tail.read() == "" and tail.rest() == "\ufffd"
