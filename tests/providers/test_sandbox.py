"""The sandbox provider, with real processes: examples/train.py and small shell jobs.

Synchronisation waits on processes (`SandboxProvider.wait`: Popen.wait or a pidfd) or,
for "the job has made progress", on a condition with a bounded Event-based wait.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.clock import FixedClock, SystemClock
from pricing.catalog import read_offer_table
from providers.base import TAG_ATTEMPT, TAG_JOB, LaunchRequest, Provider
from providers.errors import InsufficientCapacity, InvalidRequest, NotFound
from providers.sandbox import SandboxProvider
from tests.fakes.offers import write_catalog
from tests.waiting import wait_until

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"
TIMEOUT = 30.0


def train(*args: object) -> str:
    return shlex.join([sys.executable, str(TRAIN), *map(str, args)])


def live_members(pgid: int) -> list[int]:
    """Processes (zombies aside) in process group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def started(provider: SandboxProvider, attempt: str, processes: int) -> int:
    """The job's pid, once its group holds `processes` live processes (the shell included):
    a SIGTERM sent while the shell is still starting the command can be lost."""
    pid = json.loads((provider.workdir / attempt / "instance.json").read_text())["pid"]
    assert wait_until(lambda: len(live_members(pid)) == processes)
    return pid


def count_with_env(name: str, value: str) -> int:
    """Live processes whose environment holds name=value."""
    wanted, count = f"{name}={value}".encode(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            count += wanted in environ and state not in ("Z", "X")
    return count


def request(attempt: str = "a-1", command: str = "true", **changes) -> LaunchRequest:
    fields = dict(
        attempt_id=attempt,
        job_id="j-1",
        job_name="tiny",
        team="nlp",
        cloud="aws",
        region="us-east-1",
        instance_type="g4dn.xlarge",
        market="spot",
        command=command,
    )
    return LaunchRequest(**(fields | changes))


@pytest.fixture
def offers(tmp_path):
    return read_offer_table(write_catalog(tmp_path / "offers.csv"))


@pytest.fixture
def make(offers, tmp_path):
    """Build SandboxProviders on one workdir; every process they started is ended after."""
    made: list[SandboxProvider] = []

    def build(**options) -> SandboxProvider:
        options = {"clock": SystemClock(), "terminate_grace": 2.0} | options
        provider = SandboxProvider(offers, tmp_path / "sandbox", **options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        for instance in provider.list_instances():
            provider.terminate(instance.id)


def test_train_runs_to_completion_and_checkpoints(make):
    provider = make()
    instance = provider.launch(request(command=train("--steps", 60, "--checkpoint-every", 20)))
    assert isinstance(provider, Provider)
    assert instance.state == "running" and instance.id == "sbx-a-1"
    assert instance.zone == "" and instance.market == "spot"
    done = provider.wait(instance.id, TIMEOUT)
    log = Path(done.log_path).read_text()
    assert done.state == "succeeded" and done.exit_code == 0, log
    assert done.ended_at is not None and done.ended_at >= done.launched_at
    checkpoint = json.loads(
        (Path(provider.checkpoint_store("j-1", "aws", "us-east-1")) / "checkpoint.json").read_text()
    )
    assert checkpoint["step"] == 60 and checkpoint["done"] and len(checkpoint["weights"]) == 4
    assert "step 20/60" in log and "done at step 60" in log
    assert Path(done.log_path) == provider.workdir / "a-1" / "log.txt"


def test_job_environment(make, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "controller-secret")
    provider = make()
    env = (("GREETING", 'it\'s a "test" with  spaces'), ("DOLLARS", "$HOME"))
    instance = provider.launch(request(command="env", env=env, zone="", market="on-demand"))
    done = provider.wait(instance.id, TIMEOUT)
    lines = Path(done.log_path).read_text().splitlines()
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    assert seen["BROKER_JOB"] == "j-1" and seen["BROKER_ATTEMPT"] == "a-1"
    assert seen["BROKER_CLOUD"] == "aws" and seen["BROKER_REGION"] == "us-east-1"
    assert seen["BROKER_CHECKPOINT_DIR"] == str(
        provider.workdir / "checkpoints" / "aws" / "us-east-1" / "j-1"
    )
    assert seen["BROKER_RESUME_FROM"] == "" and seen["BROKER_MARKET"] == "on-demand"
    assert seen["GREETING"] == env[0][1] and seen["DOLLARS"] == "$HOME"
    assert "AWS_SECRET_ACCESS_KEY" not in seen  # the controller's credentials stay home
    assert done.state == "succeeded"


def test_launch_twice_returns_the_same_instance_and_one_process(make):
    provider = make()
    first = provider.launch(request(command="sleep 30"))
    again = provider.launch(request(command="sleep 30"))
    from_another = make().launch(request(command="sleep 30"))
    assert first.id == again.id == from_another.id
    assert first.launched_at == from_another.launched_at
    assert wait_until(lambda: count_with_env("BROKER_ATTEMPT", "a-1") == 1)
    assert count_with_env("BROKER_ATTEMPT", "a-1") == 1
    assert len(provider.list_instances()) == 1
    with pytest.raises(InvalidRequest, match="another request"):
        provider.launch(request(command="sleep 31"))


def test_capacity_per_region(make):
    provider = make(capacity={("aws", "us-east-1"): 1})
    before = {
        tuple(r[k] for k in ("cloud", "region")): r["capacity"] for r in provider.offers().records()
    }
    assert before[("aws", "us-east-1")] == 1 and before[("gcp", "us-central1")] == 4
    running = provider.launch(request("a-1", "sleep 30"))
    started(provider, "a-1", 2)
    with pytest.raises(InsufficientCapacity) as error:
        provider.launch(request("a-2", "sleep 30", job_id="j-2"))
    assert error.value.retryable and "us-east-1" in str(error.value)
    assert not (provider.workdir / "a-2").exists()
    gcp = dict(cloud="gcp", region="us-central1", instance_type="n1-standard-4")
    other = provider.launch(request("a-3", "true", job_id="j-3", zone="us-central1-a", **gcp))
    assert other.zone == "us-central1-a"
    after = {(r["cloud"], r["region"]): r["capacity"] for r in provider.offers().records()}
    assert after[("aws", "us-east-1")] == 0
    assert provider.terminate(running.id)
    assert provider.launch(request("a-2", "true", job_id="j-2")).state in ("running", "succeeded")


def test_requests_the_catalog_does_not_sell(make):
    provider = make()
    with pytest.raises(InvalidRequest, match=r"did you mean g4dn.xlarge"):
        provider.launch(request(instance_type="g4dn.xlarg"))
    with pytest.raises(InvalidRequest, match=r"no region aws/us-east-2"):
        provider.launch(request(region="us-east-2"))
    with pytest.raises(InvalidRequest, match="no spot price"):
        provider.launch(request(region="eu-central-1", instance_type="p4d.24xlarge"))
    with pytest.raises(InvalidRequest, match="reserved"):
        provider.launch(request("checkpoints"))
    assert provider.list_instances() == []


def test_terminate_twice_is_safe_and_leaves_no_process(make):
    provider = make()
    instance = provider.launch(request(command="sleep 30 & sleep 30; wait"))
    pid = started(provider, "a-1", 3)  # sh and both sleeps
    assert provider.terminate(instance.id) is True
    assert wait_until(lambda: live_members(pid) == [], 5)  # SIGKILL lands at once, not in sync
    assert not Path(f"/proc/{pid}").exists()
    assert provider.terminate(instance.id) is False
    assert make().terminate(instance.id) is False
    ended = provider.describe(instance.id)
    assert ended.state == "terminated" and not ended.active
    with pytest.raises(NotFound):
        provider.terminate("sbx-never-launched")
    with pytest.raises(NotFound):
        provider.describe("i-0123456789")


def test_terminate_kills_a_job_that_ignores_sigterm(make):
    provider = make(terminate_grace=0.2)
    instance = provider.launch(request(command="trap '' TERM; sleep 30"))
    pid = started(provider, "a-1", 2)
    assert provider.terminate(instance.id)
    assert wait_until(lambda: live_members(pid) == [], 5)  # SIGKILL lands at once, not in sync
    assert provider.describe(instance.id).exit_code == 137  # SIGKILL: no exit_code file


def test_a_new_provider_reconciles_running_and_ended_instances(make, tmp_path):
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    first = make()
    launched = first.launch(request(command=f"read line < {shlex.quote(str(fifo))}; exit 7"))
    restarted = make()  # a controller that restarted: same workdir, nothing in memory
    [found] = restarted.list_instances()
    assert found.id == launched.id and found.state == "running"
    assert found.tag(TAG_JOB) == "j-1" and found.tag(TAG_ATTEMPT) == "a-1"
    assert found.tags == launched.tags and found.launched_at == launched.launched_at
    with fifo.open("w") as release:
        release.write("go\n")
    done = restarted.wait(found.id, TIMEOUT)
    assert done.state == "failed" and done.exit_code == 7
    assert make().describe(found.id).exit_code == 7
    assert first.describe(found.id).ended_at == done.ended_at  # the first sighting counts


def test_a_recycled_pid_is_not_mistaken_for_the_job(make):
    provider = make()
    instance = provider.wait(provider.launch(request(command="exit 0")).id, TIMEOUT)
    path = provider.workdir / "a-1" / "instance.json"
    record = json.loads(path.read_text())
    # The job's pid now belongs to another process (this one), started at another time.
    record.update(pid=os.getpid(), ended_at=None, exit_code=None)
    path.write_text(json.dumps(record))
    again = make().describe(instance.id)
    assert again.state == "succeeded" and again.exit_code == 0


def test_interrupt_checkpoints_and_a_relaunch_resumes(make, tmp_path):
    provider = make()
    steps, every = 1500, 25
    command = train("--steps", steps, "--checkpoint-every", every, "--step-seconds", 0.002)
    first = provider.launch(request("a-1", command))
    checkpoint = Path(provider.checkpoint_store("j-1", "aws", "us-east-1")) / "checkpoint.json"
    assert wait_until(checkpoint.exists)
    notice = provider.interrupt(first.id)
    assert notice is not None and notice.kind == "spot-reclaim"
    assert notice.deadline is not None and notice.deadline > notice.noticed_at

    ended = provider.wait(first.id, TIMEOUT)
    log = Path(ended.log_path).read_text()
    assert ended.state == "interrupted" and ended.exit_code == 143, log
    saved = json.loads(checkpoint.read_text())
    assert 0 < saved["step"] < steps and not saved["done"]
    assert f"interrupted by SIGTERM at step {saved['step']}: checkpoint saved" in log
    assert [n.instance_id for n in provider.interruptions()] == [first.id]
    assert provider.interruptions() == []  # reported once
    assert provider.interrupt(first.id) is None  # already ended

    again = train("--steps", steps, "--checkpoint-every", every, "--step-seconds", 0)
    resume = request("a-2", again, resume_from=str(checkpoint.parent))
    second = provider.wait(provider.launch(resume).id, TIMEOUT)
    log = Path(second.log_path).read_text()
    assert second.state == "succeeded", log
    assert f"resumed from step {saved['step']}" in log
    progress = [int(m) for m in re.findall(r"^step (\d+)/", log, re.M)]
    assert progress and progress[0] > saved["step"] and progress[-1] == steps

    # Same weights as a run that never stopped: the resume lost and repeated nothing.
    reference = tmp_path / "reference"
    subprocess.run(
        [sys.executable, str(TRAIN), "--steps", str(steps), "--step-seconds", "0"],
        env={"BROKER_CHECKPOINT_DIR": str(reference), "PATH": os.defpath},
        check=True,
        capture_output=True,
    )
    final = json.loads(checkpoint.read_text())
    assert final == json.loads((reference / "checkpoint.json").read_text())


def test_interruption_deadline_kills_a_job_that_ignores_the_notice(make):
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    provider = make(clock=clock, notice_seconds=30)
    instance = provider.launch(request(command="trap '' TERM; sleep 30"))
    pid = started(provider, "a-1", 2)
    provider.interrupt(instance.id)
    assert provider.describe(instance.id).state == "running"  # within the notice
    clock.advance(timedelta(seconds=31))
    provider.describe(instance.id)  # past the deadline: the sandbox stops it, as a cloud would
    done = provider.wait(instance.id, TIMEOUT)
    assert done.state == "interrupted" and done.exit_code == 137
    assert wait_until(lambda: live_members(pid) == [], 5)  # SIGKILL lands at once, not in sync


def test_billed_hours_follow_the_clock_and_time_scale(make):
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    provider = make(clock=clock, time_scale=3600)
    instance = provider.launch(request(command="sleep 30"))
    started(provider, "a-1", 2)
    clock.advance(timedelta(seconds=2))
    assert provider.billed_hours(provider.describe(instance.id)) == pytest.approx(2.0)
    provider.terminate(instance.id)
    clock.advance(timedelta(seconds=5))
    ended = provider.describe(instance.id)
    assert ended.ended_at == datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    assert provider.billed_hours(ended) == pytest.approx(2.0)


def test_an_instance_is_billed_at_the_scale_it_was_launched_with(make):
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    fast = make(clock=clock, time_scale=3600)
    assert fast.time_scale("aws") == 3600
    instance = fast.launch(request(command="sleep 30"))
    started(fast, "a-1", 2)
    clock.advance(timedelta(seconds=3))
    wall = make(clock=clock)  # another session on the same workdir, at the default scale
    assert wall.time_scale("aws") == 1
    assert wall.billed_hours(wall.describe(instance.id)) == pytest.approx(3.0)
    wall.terminate(instance.id)


def test_object_store_puts_and_gets_file_uris(make, tmp_path):
    provider = make()
    store = provider.object_store()
    uri = (
        Path(provider.checkpoint_store("job-1", "aws", "us-east-1")).as_uri()
        + "/step-1/weights.bin"
    )
    assert store.put(b"weights", uri).size == 7
    assert store.exists(uri) and store.list(
        Path(provider.checkpoint_store("job-1", "aws", "us-east-1")).as_uri()
    ) == [uri]
    assert store.get(uri, tmp_path / "restored.bin").size == 7
    assert (tmp_path / "restored.bin").read_bytes() == b"weights"


def test_a_played_spot_crunch_closes_spot_on_that_cloud_only(make):
    import math

    from providers.errors import InsufficientCapacity

    provider = make()
    before = provider.offers().records()
    provider.crunch_spot("aws")
    after = provider.offers().records()
    for old, new in zip(before, after, strict=True):
        if old["cloud"] == "aws":
            assert math.isnan(new["price_spot"])
            assert new["price_on_demand"] == old["price_on_demand"]
        else:
            assert new["price_spot"] == old["price_spot"] or math.isnan(old["price_spot"])
    with pytest.raises(InsufficientCapacity, match="played capacity crunch"):
        provider.launch(request("a-spot", market="spot"))
    on_demand = provider.launch(request("a-od", market="on-demand"))
    assert provider.wait(on_demand.id, TIMEOUT).state == "succeeded"
