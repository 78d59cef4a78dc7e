"""Image jobs on the sandbox: run under a real podman (tests.fakes.containers), never on
the host; refused when there is no container runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.clock import SystemClock
from pricing.catalog import read_offer_table
from providers.base import LaunchRequest
from providers.errors import InvalidRequest
from providers.sandbox import SandboxProvider
from providers.workdir import pack_workdir
from tests.cli.runner import run_cli
from tests.fakes import containers
from tests.fakes.offers import write_catalog
from tests.waiting import wait_until

podman_image = containers.podman_image
TIMEOUT = 60.0


def request(**changes) -> LaunchRequest:
    fields = dict(
        attempt_id="a-img",
        job_id="j-img",
        cloud="aws",
        region="us-east-1",
        instance_type="g4dn.xlarge",
        image=containers.IMAGE,
        command="",
    )
    return LaunchRequest(**(fields | changes))


@pytest.fixture
def sandbox(podman_image, tmp_path, monkeypatch):
    monkeypatch.setenv("CONTAINERS_CONF", str(podman_image.conf))  # the job inherits it
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    provider = SandboxProvider(
        offers, tmp_path / "sandbox", SystemClock(), containers=podman_image.command
    )
    yield provider
    for instance in provider.list_instances():
        provider.terminate(instance.id)


def test_an_image_without_a_command_runs_its_entrypoint_in_a_container(sandbox):
    done = sandbox.wait(sandbox.launch(request()).id, TIMEOUT)
    log = Path(done.log_path).read_text()
    assert done.state == "succeeded", log
    assert containers.MARKER in log  # a file only the image holds


def test_setup_and_command_run_inside_the_image_with_workdir_and_checkpoints(sandbox, tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "input.txt").write_text("from the workdir\n")
    archive = pack_workdir(folder, tmp_path / "archives", 10_000_000)
    job = request(
        workdir_uri=archive.uri,
        setup="echo prepared > setup.log",
        command="cat /etc/broker-image-marker input.txt setup.log"
        ' && echo saved > "$BROKER_CHECKPOINT_DIR/ckpt"',
    )
    done = sandbox.wait(sandbox.launch(job).id, TIMEOUT)
    log = Path(done.log_path).read_text()
    assert done.state == "succeeded", log
    assert log.splitlines()[-3:] == [containers.MARKER, "from the workdir", "prepared"]
    store = Path(sandbox.checkpoint_store("j-img", "aws", "us-east-1"))
    assert (store / "ckpt").read_text() == "saved\n"  # the mounted checkpoint folder


def test_without_a_runtime_an_image_job_is_refused_and_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    provider = SandboxProvider(offers, tmp_path / "sandbox", SystemClock())
    assert provider.containers is None
    with pytest.raises(InvalidRequest, match="needs a container runtime"):
        provider.launch(request(command="echo on the host"))
    assert provider.list_instances() == []


def test_broker_run_runs_an_image_job_under_the_configured_runtime(
    capsys, podman_image, tmp_path, monkeypatch
):
    monkeypatch.setenv("CONTAINERS_CONF", str(podman_image.conf))
    monkeypatch.setenv("BROKER_CONTAINER_RUNTIME", podman_image.setting)
    manifest = tmp_path / "boxed.yaml"
    manifest.write_text(
        f"apiVersion: broker/v1\nname: boxed\nteam: ml\nrun:\n  image: {containers.IMAGE}\n"
    )
    state = str(tmp_path / "state.db")
    assert run_cli(capsys, "submit", str(manifest), "--state", state).code == 0
    ran = run_cli(capsys, "run", "--poll", "0.05", "--state", state)
    assert ran.code == 0 and "boxed succeeded" in ran.stderr, ran.stderr
    logs = run_cli(capsys, "logs", "boxed", "--state", state)
    assert containers.MARKER in logs.stdout


def test_terminate_leaves_no_container_behind_even_when_the_job_ignores_sigterm(
    sandbox, podman_image
):
    import os
    import subprocess

    job = request(command="trap '' TERM; echo started; sleep 60")
    instance = sandbox.launch(job)
    log = Path(sandbox.describe(instance.id).log_path)
    assert wait_until(lambda: "started" in log.read_text(), timeout=TIMEOUT)
    sandbox.terminate_grace = 1.0
    assert sandbox.terminate(instance.id) is True
    env = {**os.environ, "CONTAINERS_CONF": str(podman_image.conf)}
    listed = subprocess.run(
        [*podman_image.command, "ps", "-a", "--format", "{{.Names}}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "broker-a-img" not in listed.stdout.split()
