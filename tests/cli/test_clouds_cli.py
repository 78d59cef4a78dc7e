"""The clouds from the command line, end to end on AWS (boto3 over HTTP to moto):
`broker check`, `broker offers --live`, and `broker run` launching and `broker cancel`
terminating a real (emulated) EC2 instance."""

from __future__ import annotations

import json

import pytest

from tests.cli.runner import run_cli
from tests.fakes import aws as fakes
from tests.fakes.offers import write_catalog

moto_server = fakes.moto_server
aws_clients = fakes.aws_clients
aws_env = fakes.aws_env
aws_quotas = fakes.aws_quotas

JOB = """\
apiVersion: broker/v1
name: t4-smoke
team: nlp
resources:
  accelerators: T4:1
placement:
  clouds: [aws]
run:
  command: nvidia-smi && python train.py
runtime:
  estimate_hours: 1
"""


@pytest.fixture
def catalog(tmp_path):
    return str(write_catalog(tmp_path / "offers.csv"))


def broker_instances(env) -> list[dict]:
    found = env.client().describe_instances(Filters=[{"Name": "tag-key", "Values": ["broker-job"]}])
    return [i for r in found["Reservations"] for i in r["Instances"]]


def test_check_finds_aws_usable_and_says_why_others_are_not(capsys, aws_env, monkeypatch):
    monkeypatch.setenv("AZURE_CLIENT_ID", "")  # nothing for Azure's chain to find quickly
    result = run_cli(capsys, "check", "--cloud", "aws", "-o", "json", "--timeout", "10")
    assert result.code == 0, result.stderr
    (aws,) = json.loads(result.stdout)["clouds"]
    assert aws["cloud"] == "aws" and aws["usable"] and aws["reason"] == "ok"
    assert fakes.FAKE_SECRET not in result.stdout + result.stderr
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    down = run_cli(capsys, "check", "--cloud", "aws", "-o", "json", "--timeout", "2")
    assert down.code == 1
    (aws,) = json.loads(down.stdout)["clouds"]
    assert not aws["usable"] and "unreachable" in aws["reason"]


def test_offers_live_shows_what_quota_forbids(capsys, aws_env, aws_quotas, catalog, monkeypatch):
    aws_quotas.set_quota("L-DB2E81BA", 2)  # On-demand G and VT: 2 vCPUs, g4dn.xlarge has 4
    monkeypatch.setenv("BROKER_CLOUDS", "aws")
    plain = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4", "-o", "json")
    live = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4", "--live", "-o", "json")
    assert live.code == 0, live.stderr
    before = {(o["cloud"], o["instance_type"]): o for o in json.loads(plain.stdout)["offers"]}
    document = json.loads(live.stdout)
    after = {(o["cloud"], o["instance_type"]): o for o in document["offers"]}
    assert before[("aws", "g4dn.xlarge")]["price_on_demand"] == 0.526
    assert after[("aws", "g4dn.xlarge")]["price_on_demand"] is None  # not launchable on demand
    assert after[("aws", "g4dn.xlarge")]["price_spot"] == 0.2
    assert after[("gcp", "n1-standard-4")] == before[("gcp", "n1-standard-4")]  # not asked
    reasons = [u for u in document["unavailable"] if u["instance_type"] == "g4dn.xlarge"]
    assert reasons and "L-DB2E81BA" in reasons[0]["reason"] + json.dumps(reasons)
    table = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", "T4", "--live")
    assert "not launchable: aws" in table.stdout


def test_offers_live_without_clouds_is_bad_input(capsys, catalog):
    result = run_cli(capsys, "offers", "--catalog", catalog, "--live")
    assert result.code == 2 and "BROKER_CLOUDS" in result.stderr


def test_run_launches_on_aws_and_cancel_terminates(capsys, aws_env, tmp_path, catalog, monkeypatch):
    monkeypatch.setenv("BROKER_CLOUDS", "aws")
    monkeypatch.setenv("BROKER_AWS_IMAGE_ID", aws_env.image_id)
    job = tmp_path / "t4.yaml"
    job.write_text(JOB)
    state = ("--state", str(tmp_path / "state.db"))
    common = (*state, "--catalog", catalog)
    assert run_cli(capsys, "submit", str(job), *common).code == 0
    ran = run_cli(capsys, "run", "--once", *common)
    assert ran.code == 0, ran.stderr
    (instance,) = broker_instances(aws_env)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert instance["InstanceType"] == "g4dn.xlarge" and instance["State"]["Name"] == "running"
    assert tags["broker-job-name"] == "t4-smoke" and tags["broker-team"] == "nlp"
    assert "python train.py" in aws_env.user_data(instance["InstanceId"])
    status = json.loads(run_cli(capsys, "status", "t4-smoke", *state, "-o", "json").stdout)
    assert status["state"] == "running"
    assert status["attempts"][0]["where"] == "aws/us-east-1/g4dn.xlarge"
    assert run_cli(capsys, "cancel", "t4-smoke", *common).code == 0
    run_cli(capsys, "run", "--once", *common)
    (ended,) = broker_instances(aws_env)
    assert ended["State"]["Name"] in ("shutting-down", "terminated")
    after = json.loads(run_cli(capsys, "status", "t4-smoke", *state, "-o", "json").stdout)
    assert after["state"] == "cancelled"
