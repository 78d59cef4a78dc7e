"""The provider data types, the start-up script, and the error taxonomy (with redact)."""

from __future__ import annotations

import pickle
import subprocess

import pytest

from providers.base import (
    TAG_ATTEMPT,
    TAG_BROKER,
    TAG_JOB,
    Instance,
    LaunchRequest,
    instance_tags,
    job_environment,
    startup_script,
)
from providers.errors import (
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    redact,
)

AWKWARD = {
    "SPACES": "two  words",
    "QUOTES": "it's \"quoted\" and 'single'",
    "SHELLY": "$HOME `id` $(id) \\ ; & | * ?",
    "LINES": "line one\nline two\n",
    "EMPTY": "",
}


def request(**changes) -> LaunchRequest:
    fields = dict(
        attempt_id="a-1",
        job_id="j-1",
        job_name="llama-ft",
        team="nlp",
        cloud="aws",
        region="us-east-1",
        instance_type="p4d.24xlarge",
        market="spot",
        command="echo hi",
        checkpoint_dir="/ckpt/j-1",
        checkpoint_uri="s3://bucket/j-1/",
    )
    return LaunchRequest(**(fields | changes))


def run_script(script: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "startup.sh"
    path.write_text(script)
    return subprocess.run(
        ["/bin/sh", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )


def test_script_exports_env_then_broker_variables_then_command():
    # the sandbox's form (no notice watcher: it polls the cloud's metadata service)
    script = startup_script(request(env=(("WANDB_PROJECT", "llama"),)), watch_notices=False)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[-1] == "echo hi"
    exports = [line.split("=", 1)[0] for line in lines if line.startswith("export ")]
    assert exports[0] == "export WANDB_PROJECT"
    for name in ("BROKER_JOB", "BROKER_ATTEMPT", "BROKER_CHECKPOINT_DIR", "BROKER_RESUME_FROM"):
        assert f"export {name}" in exports
    assert "export BROKER_CLOUD=aws" in lines and "export BROKER_REGION=us-east-1" in lines


def test_script_quotes_values_so_the_job_sees_them_verbatim(tmp_path):
    names = sorted(AWKWARD)
    printing = " ".join(f'"${name}"' for name in names)
    script = startup_script(
        request(env=tuple(AWKWARD.items()), command=f"printf '%s|' {printing} \"$BROKER_JOB\""),
        watch_notices=False,
    )
    out = run_script(script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "".join(f"{AWKWARD[name]}|" for name in names) + "j-1|"


def test_broker_environment_values(tmp_path):
    env = dict(job_environment(request(resume_from="")))
    assert env["BROKER_CHECKPOINT_DIR"] == "/ckpt/j-1"
    assert env["BROKER_RESUME_FROM"] == ""
    assert env["BROKER_ATTEMPT"] == "a-1" and env["BROKER_MARKET"] == "spot"
    # without a local directory, the job is given the URI itself
    env = dict(job_environment(request(checkpoint_dir="", resume_from="s3://bucket/j-1/")))
    assert env["BROKER_CHECKPOINT_DIR"] == "s3://bucket/j-1/"
    assert env["BROKER_RESUME_FROM"] == "s3://bucket/j-1/"


@pytest.mark.parametrize("command, code", [("true", 0), ("exit 3", 3), ("false; exit 5", 5)])
def test_script_records_the_exit_code(tmp_path, command, code):
    target = tmp_path / "odd dir's" / "exit_code"
    target.parent.mkdir()
    out = run_script(
        startup_script(request(command=command), exit_code_path=str(target), watch_notices=False),
        tmp_path,
    )
    assert out.returncode == code
    assert target.read_text() == f"{code}\n"
    assert not target.with_name("exit_code.tmp").exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"attempt_id": "../etc"}, "attempt_id"),
        ({"job_id": ""}, "job_id"),
        ({"market": "reserved"}, "market"),
        ({"nodes": 0}, "nodes"),
        ({"command": "  "}, "command"),
        ({"env": (("1BAD", "x"),)}, "shell variable"),
        ({"env": (("BROKER_JOB", "x"),)}, "broker's"),
        ({"env": (("OK", "a\0b"),)}, "NUL"),
        ({"image": "img\nrm -rf ~"}, "one line"),
        ({"team": "a\tb"}, "one line"),
    ],
)
def test_launch_request_rejects_bad_values(changes, message):
    with pytest.raises(ValueError, match=message):
        request(**changes)


def test_launch_request_is_a_frozen_value():
    one = request(env={"B": "2", "A": "1"})
    assert one.env == (("B", "2"), ("A", "1"))
    assert one == request(env=(("B", "2"), ("A", "1")))
    with pytest.raises(AttributeError):
        one.market = "on-demand"  # type: ignore[misc]


def test_tags_identify_broker_job_and_attempt():
    tags = instance_tags(request(broker_id="ci"))
    assert (TAG_BROKER, "ci") in tags and (TAG_JOB, "j-1") in tags and (TAG_ATTEMPT, "a-1") in tags
    where = dict(cloud="aws", region="us-east-1", zone="", instance_type="p4d.24xlarge")
    instance = Instance(
        id="i-1", provider="aws", market="spot", state="running", tags=tags, **where
    )
    assert instance.job_id == "j-1" and instance.attempt_id == "a-1" and instance.active
    assert instance.tag("missing") is None


# --- errors ------------------------------------------------------------------------------

SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
    "ya29.a0AfH6SMBx-secret-oauth-token",
    "AIzaSyD-1234567890abcdefghijklmnopqrstu",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "Q2hhbmdlTWVOb3dQbGVhc2VYWVoxMjM0NTY3ODkw",
    "hunter2hunter2",
    "sv=2024&sig=abc%2Bdef%3D",
]
TEXTS = [
    "AccessDenied for key AKIAIOSFODNN7EXAMPLE in us-east-1",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
    "token ya29.a0AfH6SMBx-secret-oauth-token expired",
    "GET https://compute.googleapis.com/?key=AIzaSyD-1234567890abcdefghijklmnopqrstu failed",
    "push failed: ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Q2hhbmdlTWVOb3dQbGVhc2VYWVoxMjM0NTY3ODkw;",
    'config {"password": "hunter2hunter2", "user": "admin"}',
    "https://admin:hunter2hunter2@db.example.com/state",
    "blob https://acme.blob.core.windows.net/ckpt?sv=2024&sig=abc%2Bdef%3D denied",
]


@pytest.mark.parametrize("text", TEXTS)
def test_redact_masks_secrets(text):
    cleaned = redact(text)
    assert "***" in cleaned
    for secret in SECRETS:
        assert secret not in cleaned, (secret, cleaned)


def test_redact_keeps_what_helps_debugging():
    text = (
        "InsufficientInstanceCapacity: no p4d.24xlarge in us-east-1a for instance "
        "i-0123456789abcdef0, request 3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b, "
        "path /tmp/pytest-of-root/test_sandbox0/a-1/log.txt, key=checkpoints/step-100"
    )
    assert redact(text) == text


def test_redact_keeps_quotes_around_masked_values():
    assert redact('{"client_secret": "abc"}') == '{"client_secret": "***"}'
    assert redact("PASSWORD=abc rest") == "PASSWORD=*** rest"


def test_provider_error_redacts_and_keeps_context():
    error = QuotaExceeded(
        "aws", "quota for AKIAIOSFODNN7EXAMPLE exceeded", code="VcpuLimitExceeded"
    )
    assert isinstance(error, ProviderError)
    assert str(error) == "aws: quota for *** exceeded [VcpuLimitExceeded]"
    assert error.provider == "aws" and not error.retryable
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is QuotaExceeded and str(copy) == str(error)


def test_retryable_defaults_and_override():
    assert InsufficientCapacity("gcp", "x").retryable
    assert RateLimited("azure", "x").retryable
    assert not NotFound("aws", "x").retryable and not InvalidRequest("aws", "x").retryable
    assert NotFound("aws", "x", retryable=True).retryable
