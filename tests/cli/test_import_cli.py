"""`broker import skypilot` and `plan/submit --format skypilot` as a user runs them, over
task files in the shapes of SkyPilot's own examples (tests/fakes/skypilot_tasks/).

Each task is imported to a file, which must pass `broker validate`; the document
written is compared whole, and the warnings must name exactly the task's fields that
the manifest does not carry."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.cli.runner import Result, run_cli
from tests.fakes.offers import write_catalog

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tests" / "fakes" / "skypilot_tasks"
HEADER = "apiVersion", "name", "team"


def warned_fields(stderr: str) -> set[str]:
    """The field of each `file:line:col: warning: field: message` line."""
    return {
        line.split(": warning: ", 1)[1].split(": ", 1)[0]
        for line in stderr.splitlines()
        if ": warning: " in line
    }


def imported(capsys, tmp_path: Path, task: str, *flags: str) -> tuple[dict, Result]:
    """Import `task` to tmp_path/jobs/, check the file with `broker validate`, read it back."""
    out = tmp_path / "jobs" / task
    result = run_cli(capsys, "import", "skypilot", str(TASKS / task), "-o", str(out), *flags)
    assert result.code == 0, result.stderr
    assert result.stdout == ""
    check = run_cli(capsys, "validate", str(out))
    assert check.code == 0, check.stderr
    assert f"{out}: ok (1 job)" in check.stdout
    return yaml.safe_load(out.read_text()), result


def job(name: str, **sections) -> dict:
    return {"apiVersion": "broker/v1", "name": name, "team": "ml", **sections}


def test_minimal_task(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "minimal.yaml", "--team", "ml")
    assert doc == job("minimal", run={"command": 'echo "Hello, SkyPilot!"\n'})
    assert warned_fields(result.stderr) == {"name"}
    assert "the job is named 'minimal' after its file" in result.stderr


def test_accelerators_as_a_set(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "accelerators_dict.yaml", "--team", "ml")
    assert doc == job(
        "bert-finetune",
        resources={"accelerators": ["A100:1", "V100:1"], "cpus": "8+"},
        run={"command": "python finetune.py --model bert-base"},
    )
    assert warned_fields(result.stderr) == set()  # unordered: the broker's cost ranking


def test_accelerators_mapping_with_counts_and_memory_units(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "accelerators_counts.yaml", "--team", "ml")
    assert doc == job(
        "llama-eval",
        resources={"accelerators": ["L4:4", "A10G:4"], "memory": "64+"},
        run={"command": "python eval.py"},
    )
    assert warned_fields(result.stderr) == set()


def test_accelerators_as_an_ordered_list(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "accelerators_list.yaml", "--team", "ml")
    assert doc["resources"] == {"accelerators": ["L4:1", "A10G:1", "T4:1"]}
    assert warned_fields(result.stderr) == {"resources.accelerators"}
    assert "their order only breaks ties" in result.stderr


def test_any_of_candidates(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "any_of.yaml", "--team", "ml")
    assert doc == job(
        "serve-batch",
        resources={"accelerators": ["H100:8", "A100-80GB:8"]},
        placement={"clouds": ["aws", "gcp"], "regions": ["us-west-2", "us-central1"]},
        run={"command": "python batch_infer.py"},
    )
    assert warned_fields(result.stderr) == {"resources.any_of"}
    assert "in every listed cloud and region" in result.stderr


def test_ordered_candidates(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "ordered.yaml", "--team", "ml")
    assert doc["placement"] == {
        "clouds": ["gcp", "aws", "azure"],
        "regions": ["europe-west4", "eu-central-1", "westeurope"],
    }
    assert doc["resources"] == {"accelerators": "A100:8"}
    assert warned_fields(result.stderr) == {"resources.ordered"}
    assert "their order only breaks ties" in result.stderr


def test_spot_with_job_recovery(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "spot_recovery.yaml", "--team", "ml")
    assert doc == job(
        "bert-qa",
        resources={"accelerators": "V100:1"},
        placement={"spot": "only"},
        run={"command": "python run_qa.py --output_dir /checkpoint/bert_qa/"},
        recovery={"max_restarts_on_error": 3, "recover_on_exit_codes": [137, 33]},
    )
    assert warned_fields(result.stderr) == {
        "resources.job_recovery.strategy",
        "file_mounts./checkpoint",
    }
    assert "creates the bucket 'bert-qa-checkpoints'" in result.stderr
    assert "mode MOUNT" in result.stderr


def test_multi_node_with_setup(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "multi_node.yaml", "--team", "ml")
    assert doc["resources"] == {
        "accelerators": "A100:8",
        "cpus": "32+",
        "memory": "256+",
        "nodes": 2,
    }
    assert doc["run"]["setup"] == "pip install torch torchvision"
    assert doc["run"]["command"].startswith('MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS"')
    assert warned_fields(result.stderr) == {"resources.network_tier"}


def test_workdir_setup_and_envs(capsys, tmp_path, monkeypatch):
    """SkyPilot takes a relative workdir from where it is run; the manifest names it
    relative to itself, and loading it gives the folder back."""
    monkeypatch.chdir(TASKS)
    doc, result = imported(capsys, tmp_path, "workdir_setup_envs.yaml", "--team", "ml")
    out = tmp_path / "jobs" / "workdir_setup_envs.yaml"
    assert doc == job(
        "hello-sky",
        resources={"accelerators": "A100:8"},
        placement={"clouds": ["aws"]},
        run={
            "command": 'echo "Hello, SkyPilot!"\n'
            'python train.py --model-size "$MODEL_SIZE" --epochs "$EPOCHS"\n',
            "setup": 'echo "Running setup."\npip install -r requirements.txt\n',
            "workdir": os.path.relpath(TASKS, out.parent),
            "env": {"MODEL_SIZE": "13b", "EPOCHS": "3", "USE_WANDB": "true"},
        },
    )
    assert warned_fields(result.stderr) == {"envs.HF_TOKEN"}
    from broker.manifest.load import load_manifests

    assert load_manifests([out]).manifests[0].spec.run.workdir == str(TASKS)


def test_file_mounts_become_data_inputs_with_the_sizes_known(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dataset" / "shard").mkdir(parents=True)
    (tmp_path / "dataset" / "shard" / "a.bin").write_bytes(b"\0" * 1_500_000)
    (tmp_path / "dataset" / "b.bin").write_bytes(b"\0" * 500_000)
    doc, result = imported(capsys, tmp_path, "file_mounts_buckets.yaml", "--team", "ml")
    assert doc["data"] == [
        {"uri": "s3://imagenet-data/train", "size_gb": 0},
        {"uri": "gs://laion-subset/shards", "size_gb": 0},
        {"uri": "az://corpus/v2", "size_gb": 0},
        {"uri": (tmp_path / "dataset").as_uri(), "size_gb": 0.002},
    ]
    assert warned_fields(result.stderr) == {
        "file_mounts./datasets-s3",
        "file_mounts./datasets-gcs",
        "file_mounts./datasets-gcs.source",
        "file_mounts./azure",
        "file_mounts./r2",
        "file_mounts./dataset",
        "file_mounts./outputs",
    }
    lines = result.stderr.splitlines()
    unknown_size = [line for line in lines if "its size is unknown" in line]
    assert len(unknown_size) == 3  # the buckets; the local folder was measured
    assert any("r2:// is not storage the broker reads" in line for line in lines)


def test_infra_string_with_a_zone(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "infra_string.yaml", "--team", "ml")
    assert doc["placement"] == {"clouds": ["aws"], "regions": ["us-east-1"]}
    assert warned_fields(result.stderr) == {"resources.infra"}
    assert "not zone us-east-1a (placed in its region us-east-1)" in result.stderr


def test_cloud_region_and_zone(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "cloud_region_zone.yaml", "--team", "ml")
    assert doc == job(
        "gcp-zone",
        resources={"accelerators": "T4:1"},
        placement={"clouds": ["gcp"], "regions": ["us-central1"]},
        run={"command": "python job.py"},
    )
    assert warned_fields(result.stderr) == {"resources.zone"}


def test_docker_image_and_memory_in_terabytes(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "docker_image.yaml", "--team", "ml")
    assert doc["run"]["image"] == "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
    assert doc["resources"] == {"accelerators": "H100:8", "memory": "1024+"}
    assert warned_fields(result.stderr) == set()


def test_every_unknown_or_unmapped_field_is_a_warning(capsys, tmp_path):
    doc, result = imported(capsys, tmp_path, "unknown_fields.yaml", "--team", "ml")
    assert doc == job(
        "with-extras", resources={"accelerators": "A10G:1"}, run={"command": "python app.py"}
    )
    assert warned_fields(result.stderr) == {
        "resources.instance_type",
        "resources.disk_size",
        "resources.ports",
        "resources.labels",
        "resources.autostop",
        "resources.image_id",
        "resources.flavor",
        "service",
        "config",
        "secrets.WANDB_API_KEY",
        "experimental_flag",
    }
    assert (
        "s3cr3t-value"
        not in result.stderr + (tmp_path / "jobs" / "unknown_fields.yaml").read_text()
    )
    lines = [line for line in result.stderr.splitlines() if ": warning: " in line]
    assert len(lines) == 11  # one line each
    assert "unknown_fields.yaml:12:3: warning: resources.flavor: " in result.stderr


def test_to_stdout_with_the_team_from_the_user_name(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LOGNAME", "Jane.Doe")
    monkeypatch.chdir(TASKS)
    result = run_cli(capsys, "import", "skypilot", "workdir_setup_envs.yaml")
    assert result.code == 0, result.stderr
    assert "the job's team is 'jane-doe' (your user name); give --team" in result.stderr
    doc = yaml.safe_load(result.stdout)
    assert doc["team"] == "jane-doe"
    assert doc["run"]["workdir"] == str(TASKS)  # no file to be relative to
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(result.stdout)
    assert run_cli(capsys, "validate", str(elsewhere)).code == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("run: [echo\n", "task.yaml:2:1: YAML syntax error"),
        ("- run: echo hi\n", "task.yaml:1:1: a SkyPilot task is a mapping of fields"),
        (
            "resources:\n  accelerators: {A1000: 8}\nrun: x\n",
            "task.yaml:2:18: resources.accelerators.A1000: unknown GPU 'A1000' "
            "(did you mean A100, A10G, H100?)",
        ),
        (
            "resources:\n  infra: gcp/us-centrl1\nrun: x\n",
            "task.yaml:2:10: resources.infra: unknown gcp region 'us-centrl1' "
            "(did you mean 'us-central1'?)",
        ),
        ("setup: pip install x\n", "task.yaml:1:1: run: the task has no run commands"),
        ("apiVersion: broker/v1\nrun: x\n", "task.yaml:1:1: apiVersion: this is a broker manifest"),
    ],
)
def test_bad_tasks_exit_2_located_and_write_nothing(capsys, tmp_path, text, expected):
    monkeypatch_dir = tmp_path
    task = monkeypatch_dir / "task.yaml"
    task.write_text(text)
    out = tmp_path / "job.yaml"
    result = run_cli(capsys, "import", "skypilot", str(task), "-o", str(out), "--team", "ml")
    assert result.code == 2
    assert f"{tmp_path}/{expected}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_bad_team_exits_2(capsys):
    result = run_cli(capsys, "import", "skypilot", str(TASKS / "minimal.yaml"), "--team", "ML Ops")
    assert result.code == 2
    assert "--team 'ML Ops' is not a name" in result.stderr


def test_a_manifest_that_would_not_validate_is_not_written(capsys, tmp_path):
    task = tmp_path / "task.yaml"
    task.write_text("workdir: ./missing\nrun: python train.py\n")
    out = tmp_path / "jobs" / "job.yaml"
    result = run_cli(capsys, "import", "skypilot", str(task), "-o", str(out), "--team", "ml")
    assert result.code == 2
    assert f"{out} (not written):" in result.stderr and "run.workdir: " in result.stderr
    assert not out.exists()


# --- plan and submit convert in memory ----------------------------------------------------------


def test_plan_format_skypilot(capsys, tmp_path):
    catalog = str(write_catalog(tmp_path / "offers.csv"))
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: ft\nresources:\n  accelerators: A100:8\n  use_spot: true\n"
        "  any_of:\n    - infra: aws/us-east-1\n    - infra: gcp/us-central1\n"
        "  job_recovery: FAILOVER\nrun: python train.py\n"
    )
    flags = ("--team", "ml", "--catalog", catalog, "-o", "json")
    result = run_cli(capsys, "plan", "--format", "skypilot", str(task), *flags)
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["job"] == "ft"
    where = [(p["cloud"], p["region"], p["market"]) for p in plan["placements"]]
    assert where == [("aws", "us-east-1", "spot"), ("gcp", "us-central1", "spot")]
    assert warned_fields(result.stderr) == {"resources.job_recovery"}


def test_submit_format_skypilot_then_unchanged(capsys, tmp_path):
    state = str(tmp_path / "state.db")
    task = str(TASKS / "accelerators_dict.yaml")
    flags = ("--format", "skypilot", "--team", "ml", "--state", state, "-o", "json")
    first = run_cli(capsys, "submit", task, *flags)
    assert first.code == 0, first.stderr
    (row,) = json.loads(first.stdout)["jobs"]
    assert (row["team"], row["name"], row["result"]) == ("ml", "bert-finetune", "new")
    again = json.loads(run_cli(capsys, "submit", task, *flags).stdout)["jobs"]
    assert again[0]["result"] == "unchanged"


def test_plan_format_skypilot_errors_of_every_task(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  accelerators: H1000:8\nrun: x\n")
    result = run_cli(
        capsys, "plan", "--format", "skypilot", str(bad), str(tmp_path), "--team", "ml"
    )
    assert result.code == 2
    assert f"{bad}:2:17: resources.accelerators: unknown GPU 'H1000'" in result.stderr
    assert f"{tmp_path}: give SkyPilot task files, not a folder" in result.stderr


def test_team_is_only_for_skypilot_tasks(capsys):
    result = run_cli(capsys, "plan", str(REPO / "examples" / "jobs"), "--team", "ml")
    assert result.code == 2
    assert "--team is for --format skypilot" in result.stderr
