"""The canary: credentials planted in the environment, in a manifest's data and checkpoint
URIs and its comments, and an error page that quotes the request's own credentials back
(`PriceFake.echo`). Driving `pricing refresh`, `submit`, `run`, `queue`, `status`, `logs`
and `cost-report` (table, JSON, CSV, HTML) must leave no canary in any output and in no
file written anywhere (state, sandbox folder, catalog, status file, caches, report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.fakes import prices as fakes

price_fake = fakes.price_fake

KEY_ID = "AKIACANARY7EXAMPLE42"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARY42XY"
SESSION = "FwoGZXIvYXdzECANARYsessionTOKEN0123456789abcdefABCDEF/+token=="
AZURE_SECRET = "Abc8Q~CanaryAzureSecret0123456789abcdEF"
PASSWORDS = ("CanaryCkptPass42", "CanaryDataPass42", "CanaryCommentPass42")
CANARIES = (KEY_ID, SECRET, SESSION, AZURE_SECRET, fakes.GCP_KEY, *PASSWORDS)

MANIFEST = f"""\
# deploy with password={PASSWORDS[2]} and key {KEY_ID} (a careless comment)
apiVersion: broker/v1
name: canary
team: qa
resources: {{accelerators: "T4:1"}}
placement: {{clouds: [gcp]}}
run: {{command: "echo started"}}
runtime: {{estimate_hours: 1}}
checkpoint:
  uri: s3://ckuser:{PASSWORDS[0]}@ckpt-bucket/canary/
  interval_minutes: 30
  size_gb: 1
  location: aws:us-east-1
data:
  - {{uri: "s3://datauser:{PASSWORDS[1]}@data-bucket/set/", size_gb: 10, location: aws:us-east-1}}
"""


@pytest.fixture
def planted(price_fake, monkeypatch, tmp_path):
    """Cloud credentials in the environment, every price route echoing them back."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", AZURE_SECRET)
    monkeypatch.setenv("BROKER_AWS_QUOTAS_ENDPOINT", price_fake.url)
    monkeypatch.setenv("BROKER_AWS_ENDPOINT", price_fake.url)
    price_fake.echo |= {"pricing-api:0", "gcp:0", "azure:0"}
    return price_fake


def test_no_canary_leaves_the_process_or_is_written(capsys, planted, tmp_path, isolated_user_dirs):
    outputs = []

    def broker(*args: str):
        result = run_cli(capsys, *args)
        outputs.append(f"$ broker {' '.join(args)}\n{result.stdout}\n{result.stderr}")
        return result

    refreshed = broker("pricing", "refresh", "--region", "us-east-1,eastus,us-central1")
    assert refreshed.code == 1, refreshed.stderr  # every source failed, each said why
    assert "gcp-billing-catalog failed" in refreshed.stderr
    assert "denied" in refreshed.stderr and "***" in refreshed.stderr  # the echo, masked
    assert broker("pricing", "status", "-o", "json").code == 0

    state = str(tmp_path / "state.db")
    manifest = tmp_path / "canary.yaml"
    manifest.write_text(MANIFEST)
    assert broker("validate", str(manifest)).code == 0
    assert broker("submit", str(manifest), "--state", state).code == 0
    drained = broker("run", "--poll", "0.05", "--state", state)
    assert drained.code == 0, drained.stderr
    assert broker("queue", "--state", state).code == 0
    status = broker("status", "canary", "--state", state, "-o", "json")
    assert json.loads(status.stdout)["state"] == "succeeded"
    broker("status", "canary", "--state", state)
    assert broker("logs", "canary", "--state", state).code == 0
    report = broker("cost-report", "--state", state, "--by", "job", "-o", "json")
    egress = json.loads(report.stdout)["egress"]
    assert any("s3://data-bucket/set/" in row["detail"] for row in egress)  # kept, userinfo not
    for form in ("table", "csv", "markdown"):
        broker("cost-report", "--state", state, "--by", "job", "-o", form)
    html = tmp_path / "report.html"
    broker("cost-report", "--state", state, "--html", str(html))

    said = "\n".join(outputs)
    for canary in CANARIES:
        assert canary not in said, (canary, _around(said, canary))
    written = [p for p in _every_file(tmp_path) + _every_file(isolated_user_dirs) if p != manifest]
    assert any(path.name == "offers.status.json" for path in written)
    assert any(path.name == "state.db" for path in written)
    for path in written:
        data = path.read_bytes()
        for canary in CANARIES:
            assert canary.encode() not in data, (path, canary)


def _every_file(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and not path.is_symlink()]


def _around(text: str, needle: str) -> str:
    at = text.index(needle)
    return text[max(0, at - 200) : at + 100]
