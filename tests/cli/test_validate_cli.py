"""`broker validate` and `broker schema` as a user runs them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.cli.runner import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "jobs"

GOOD = """\
apiVersion: broker/v1
name: tiny
team: nlp
run:
  command: echo hi
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_examples_are_valid(capsys):
    result = run_cli(capsys, "validate", str(EXAMPLES))
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{EXAMPLES / 'eu-residency.yaml'}: ok (1 job)",
        f"{EXAMPLES / 'eval-and-serve.yaml'}: ok (2 jobs)",
        f"{EXAMPLES / 'llama-finetune.yaml'}: ok (1 job)",
        f"{EXAMPLES / 'tokenize-cpu.yaml'}: ok (1 job)",
    ]
    assert result.stderr.strip() == "5 jobs ok in 4 files"


def test_examples_as_json(capsys):
    result = run_cli(capsys, "validate", str(EXAMPLES), "--output", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"files", "jobs", "errors"}
    assert document["errors"] == []
    assert {f["status"] for f in document["files"]} == {"ok"}
    assert sum(f["jobs"] for f in document["files"]) == len(document["jobs"]) == 5
    job = next(j for j in document["jobs"] if j["name"] == "llama-ft")
    assert set(job) == {"name", "team", "file", "line", "digest"}
    assert job["team"] == "nlp" and job["file"].endswith("llama-finetune.yaml")
    assert len(job["digest"]) == 64
    multi = [j for j in document["jobs"] if j["file"].endswith("eval-and-serve.yaml")]
    assert [j["name"] for j in multi] == ["llama-eval", "batch-embed"]


def test_broken_files_exit_2_with_located_errors_on_stderr(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "jobs/good.yaml", GOOD)
    write(tmp_path, "jobs/gpu.yaml", GOOD + "resources:\n  accelerators: A1000\n")
    write(tmp_path, "jobs/key.yaml", GOOD.replace("run:", "rnu:"))
    write(tmp_path, "jobs/ci.yml", "on: push\n")
    result = run_cli(capsys, "validate", "jobs")
    assert result.code == 2
    errors = [line for line in result.stderr.splitlines() if not line.startswith("broker:")]
    assert errors == [
        "jobs/gpu.yaml:7:17: resources.accelerators: unknown GPU 'A1000' "
        "(did you mean A100, A10G, H100?)",
        "jobs/key.yaml:4:1: rnu: unknown field (did you mean 'run'?)",
    ]
    assert result.stderr.splitlines()[-1] == (
        "broker: error: 1 job ok in 1 file, 1 skipped (not manifests); 2 errors in 2 files"
    )
    assert result.stdout.splitlines() == [
        "jobs/ci.yml: skipped (not a job manifest)",
        "jobs/good.yaml: ok (1 job)",
        "jobs/gpu.yaml: 1 error",
        "jobs/key.yaml: 1 error",
    ]


def test_errors_in_json(capsys, tmp_path):
    bad = write(tmp_path, "bad.yaml", GOOD.replace("broker/v1", "broker/v2"))
    result = run_cli(capsys, "validate", str(bad), str(tmp_path / "missing.yaml"), "-o", "json")
    assert result.code == 2
    document = json.loads(result.stdout)
    assert document["jobs"] == []
    assert document["errors"] == [
        {
            "file": str(bad),
            "line": 1,
            "column": 13,
            "field": "apiVersion",
            "message": "unsupported apiVersion 'broker/v2': expected broker/v1",
        },
        {
            "file": str(tmp_path / "missing.yaml"),
            "line": 0,
            "column": 0,
            "field": "",
            "message": "file not found",
        },
    ]
    assert [(f["status"], f["errors"]) for f in document["files"]] == [("error", 1), ("error", 1)]
    assert f"{bad}:1:13: apiVersion: unsupported apiVersion" in result.stderr


def test_duplicate_job_across_files(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD)
    result = run_cli(capsys, "validate", "a.yaml", "b.yaml")
    assert result.code == 2
    assert "b.yaml:2:7: name: duplicate job 'tiny' in team 'nlp' (first at a.yaml:2)" in (
        result.stderr
    )


def test_explicit_non_manifest_and_empty_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "pools.yaml", "pools: []\n")
    (tmp_path / "empty").mkdir()
    result = run_cli(capsys, "validate", "pools.yaml", "empty")
    assert result.code == 2
    assert "pools.yaml:1:1: apiVersion: not a job manifest" in result.stderr
    assert "empty: no job manifests" in result.stderr


def test_markdown_output(capsys):
    result = run_cli(capsys, "validate", str(EXAMPLES / "tokenize-cpu.yaml"), "-o", "markdown")
    assert result.code == 0
    assert result.stdout.splitlines()[:2] == [
        "| file | status | jobs | errors |",
        "|---|---|---:|---:|",
    ]


def test_csv_output(capsys):
    result = run_cli(capsys, "validate", str(EXAMPLES / "tokenize-cpu.yaml"), "-o", "csv")
    assert result.code == 0
    assert result.stdout.splitlines() == [
        "file,status,jobs,errors",
        f"{EXAMPLES / 'tokenize-cpu.yaml'},ok,1,0",
    ]


def test_needs_a_path(capsys):
    assert run_cli(capsys, "validate").code == 2


def test_schema_is_json_schema(capsys):
    result = run_cli(capsys, "schema")
    assert result.code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"resources", "placement", "run", "runtime", "checkpoint", "data"} <= set(
        schema["properties"]
    )
    assert schema["properties"]["name"]["description"]
    assert result.stdout.startswith('{\n  "$schema"')  # indent 2
