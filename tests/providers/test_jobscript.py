"""The start-up script's workdir, setup and container parts (providers.jobscript), run
for real with /bin/sh where they run on this machine."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path

import pytest

from providers.base import LaunchRequest, request_hash, startup_script
from providers.jobscript import ContainerRuntime, container_image, fetch_command
from providers.workdir import pack_workdir


def request(**changes) -> LaunchRequest:
    fields = dict(
        attempt_id="a-1",
        job_id="j-1",
        cloud="aws",
        region="us-east-1",
        instance_type="g4dn.xlarge",
        command="echo hi",
    )
    return LaunchRequest(**(fields | changes))


def packed(tmp_path: Path, files: dict[str, str]):
    folder = tmp_path / "src"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return pack_workdir(folder, tmp_path / "archives", 10_000_000)


def run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    path = tmp_path / "startup.sh"
    path.write_text(script)
    return subprocess.run(
        ["/bin/sh", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=tmp_path,
        timeout=60,
    )


def test_request_hash_of_a_request_without_the_later_fields_is_unchanged():
    """Instances launched before setup/workdir existed keep matching their attempts."""
    plain = request()
    assert request_hash(plain) == hashlib.sha256(repr(plain).encode()).hexdigest()[:16]
    assert request_hash(request(setup="make")) != request_hash(plain)
    uri = f"file:///w/{'0' * 64}.tar.gz"
    assert request_hash(request(workdir_uri=uri)) != request_hash(plain)
    assert request_hash(request(workdir_uri=uri)) == request_hash(request(workdir_uri=uri))


def test_the_script_fetches_the_workdir_runs_setup_once_then_the_command(tmp_path):
    """A file:// archive, fetched by the script itself (no provider delivered it)."""
    archive = packed(tmp_path, {"train.py": "print(open('setup.log').read().strip())\n"})
    job = request(
        workdir_uri=archive.uri,
        setup="echo 'set up' >> setup.log",
        command="python3 train.py && pwd",
    )
    out = run(startup_script(job, watch_notices=False), tmp_path, TMPDIR=str(tmp_path))
    assert out.returncode == 0, out.stderr
    here = tmp_path / "broker" / "a-1" / "workdir"
    assert out.stdout.splitlines() == ["set up", str(here)]
    assert (here / "setup.log").read_text() == "set up\n"  # once


def test_a_failing_setup_is_the_jobs_failure_and_the_command_never_runs(tmp_path):
    archive = packed(tmp_path, {"x": "x"})
    job = request(workdir_uri=archive.uri, setup="exit 7", command="touch ran")
    target = tmp_path / "exit_code"
    script = startup_script(job, exit_code_path=str(target), watch_notices=False)
    out = run(script, tmp_path, BROKER_WORKDIR=str(tmp_path / "w"))
    assert out.returncode == 7 and target.read_text() == "7\n"
    assert "setup failed with status 7" in out.stderr
    assert not (tmp_path / "w" / "ran").exists()


def test_an_archive_that_does_not_match_its_name_is_never_run(tmp_path):
    archive = packed(tmp_path, {"train.py": "print(1)\n"})
    forged = tmp_path / "forged" / archive.archive.name
    forged.parent.mkdir()
    forged.write_bytes(packed(tmp_path / "other", {"train.py": "print(2)\n"}).archive.read_bytes())
    job = request(workdir_uri=forged.as_uri(), command="python3 train.py")
    out = run(startup_script(job, watch_notices=False), tmp_path, TMPDIR=str(tmp_path))
    assert out.returncode == 1 and out.stdout == ""
    assert "does not match its sha256" in out.stderr


def test_a_delivered_workdir_is_entered_not_fetched(tmp_path):
    (tmp_path / "there").mkdir()
    job = request(workdir_uri=f"file:///nowhere/{'a' * 64}.tar.gz", command="pwd")
    script = startup_script(job, watch_notices=False, workdir=str(tmp_path / "there"))
    assert "sha256sum" not in script
    out = run(script, tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / "there")


def test_cloud_fetch_commands_use_the_machines_own_credentials(monkeypatch):
    name = f"{'b' * 64}.tar.gz"
    assert fetch_command(f"s3://stage/w/{name}").startswith("aws s3 cp --only-show-errors s3:")
    assert fetch_command(f"gs://stage/{name}").startswith("gcloud storage cp")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "acme")
    az = fetch_command(f"az://stage/w/{name}")
    assert az.startswith("az login --identity") and "--auth-mode login" in az
    assert "--account-name acme --container-name stage --name w/" in az
    with pytest.raises(ValueError, match="no way to fetch"):
        fetch_command(f"https://example.com/{name}")


def test_machine_images_boot_the_vm_and_other_images_are_containers():
    assert container_image(request(image="ami-0123456789abcdef0")) == ""
    assert container_image(request(image="projects/p/global/images/family/f")) == ""
    assert container_image(request(image="ghcr.io/acme/train:1.4")) == "ghcr.io/acme/train:1.4"


def test_an_image_without_a_command_runs_its_entrypoint_under_docker_with_the_gpus():
    job = request(
        image="ghcr.io/acme/train:1.4",
        command="",
        accelerator="T4",
        accelerator_count=1.0,
        env=(("WANDB_PROJECT", "x y"),),
        checkpoint_dir="/ckpt/j-1",
        workdir_uri=f"s3://stage/{'c' * 64}.tar.gz",
    )
    last = startup_script(job, watch_notices=False).splitlines()[-1]
    words = shlex.split(last)
    assert words[:3] == ["docker", "run", "--rm"] and words[-1] == "ghcr.io/acme/train:1.4"
    assert "--gpus" in words and words[words.index("--gpus") + 1] == "all"
    passed = {words[i + 1] for i, w in enumerate(words) if w == "-e"}
    assert {"WANDB_PROJECT", "BROKER_CHECKPOINT_DIR", "BROKER_WORKDIR", "BROKER_JOB"} <= passed
    assert "x y" not in last  # values stay exported in the script, passed by name
    assert "/ckpt/j-1:/ckpt/j-1" in words and "$BROKER_WORKDIR:$BROKER_WORKDIR" in words
    assert words[words.index("-w") + 1] == "$BROKER_WORKDIR"


def test_an_image_with_setup_and_command_runs_both_inside_it_and_nothing_on_the_host():
    job = request(image="python:3.12", command="python3 train.py", setup="pip install -e .")
    script = startup_script(job, containers=ContainerRuntime(("podman",), gpus=False))
    start = script.index("podman run")
    words = shlex.split(script[start:])
    assert words[:2] == ["podman", "run"] and "--gpus" not in words
    assert words[words.index("--entrypoint") + 1] == "/bin/sh"
    assert words[words.index("python:3.12") + 1] == "-c"
    inner = words[-1]
    assert inner.index("pip install -e .") < inner.index("python3 train.py")
    assert "python3 train.py" not in script[:start]  # nothing of the job before the container


def test_setup_needs_a_command_and_an_empty_command_needs_an_image():
    with pytest.raises(ValueError, match="no container image"):
        request(command="")
    with pytest.raises(ValueError, match="no container image"):
        request(command="", image="ami-0123456789abcdef0")
    with pytest.raises(ValueError, match="setup needs a command"):
        request(command="", image="python:3.12", setup="pip install x")
