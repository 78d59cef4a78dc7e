"""broker.manifest.skypilot: a SkyPilot task in, a broker/v1 manifest and its warnings out.

The CLI tests (tests/cli/test_import_cli.py) go through task files; these go through
the pure conversion, over the forms SkyPilot documents for each field and over
generated tasks, whose manifests must load as the JobSpec the task describes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.manifest.load import parse_manifest_text
from broker.manifest.skypilot import Converted, convert_task, label, to_yaml
from broker.spec import GpuAsk
from pricing.gpus import gpu_names
from pricing.regions import REGION_COUNTRY
from pricing.userio.errors import UserInputError
from pricing.userio.yaml_reader import parse_yaml_documents

PROJECT = Path("/srv/proj")


def convert(text: str, manifest_dir: Path | None = None, sizes: dict | None = None) -> Converted:
    """The conversion of `text` (named `t` unless it has a name)."""
    text = textwrap.dedent(text)
    text = text if text.startswith("name:") or "\nname:" in text else f"name: t\n{text}"
    doc = parse_yaml_documents(text, Path("task.yaml"))[0]
    return convert_task(
        doc,
        team="ml",
        paths_from=PROJECT,
        manifest_dir=manifest_dir,
        size_of=lambda path: (sizes or {}).get(path),
    )


def fields(converted: Converted) -> set[str]:
    return {warning.field for warning in converted.warnings}


def errors(text: str) -> list[str]:
    with pytest.raises(UserInputError) as info:
        convert(text)
    return [error.one_line() for error in info.value.errors]


@pytest.mark.parametrize(
    ("written", "cpus", "memory"),
    [
        ("cpus: 4+\n  memory: 32+", "4+", "32+"),
        ("cpus: 16\n  memory: 64", 16, 64),
        ("cpus: '8'\n  memory: 64GB", 8, 64),
        ("cpus: 2.5+\n  memory: 1024MB+", "2.5+", "1+"),
        ("cpus: 1\n  memory: 0.5TB+", 1, "512+"),
        ("cpus: 1\n  memory: 512 mb", 1, 0.5),
    ],
)
def test_cpus_and_memory(written, cpus, memory):
    resources = convert(f"resources:\n  {written}\nrun: x\n").document["resources"]
    assert resources == {"cpus": cpus, "memory": memory}


@pytest.mark.parametrize(
    "written",
    [
        "A100:8",
        "[A100:8]",
        "{A100: 8}",
        "{A100:8}",  # YAML: the key "A100:8" without a value
        "\"{'A100:8'}\"",  # the set written as a string
        "a100:8",
    ],
)
def test_every_form_of_one_accelerator(written):
    converted = convert(f"resources:\n  accelerators: {written}\nrun: x\n")
    assert converted.document["resources"] == {"accelerators": "A100:8"}
    assert fields(converted) == set()


def test_gpu_counts_and_aliases_come_out_canonical():
    converted = convert("resources:\n  accelerators: {a100-80gb: 8, H100: 0.5, L4: null}\nrun: x\n")
    assert converted.document["resources"]["accelerators"] == ["A100-80GB:8", "H100:0.5", "L4:1"]


@pytest.mark.parametrize(
    ("infra", "placement", "warned"),
    [
        ("aws", {"clouds": ["aws"]}, set()),
        ("AWS/us-east-1", {"clouds": ["aws"], "regions": ["us-east-1"]}, set()),
        ("*/us-east-1", {"regions": ["us-east-1"]}, set()),
        ("*", {}, set()),
        ("aws/*/us-west-2b", {"clouds": ["aws"], "regions": ["us-west-2"]}, {"resources.infra"}),
        ("gcp/europe-west4/europe-west4-a", {"clouds": ["gcp"], "regions": ["europe-west4"]},
         {"resources.infra"}),
        ("k8s/my-context", {}, {"resources.infra"}),
        ("lambda/us-east-1", {}, {"resources.infra"}),
    ],
)  # fmt: skip
def test_infra(infra, placement, warned):
    converted = convert(f"resources:\n  infra: '{infra}'\nrun: x\n")
    assert converted.document.get("placement", {}) == placement
    assert fields(converted) == warned


def test_candidates_override_the_fields_around_them():
    converted = convert(
        """\
        resources:
          cloud: aws
          accelerators: A100:8
          use_spot: true
          any_of:
            - region: us-east-1
            - region: us-west-2
              use_spot: false
            - infra: gcp/us-central1
        run: x
        """
    )
    assert converted.document["placement"] == {
        "clouds": ["aws", "gcp"],
        "regions": ["us-east-1", "us-west-2", "us-central1"],
        "spot": "prefer",
    }
    assert fields(converted) == {"resources.any_of"}  # some candidates use spot


def test_a_candidate_without_a_place_leaves_the_place_open():
    converted = convert(
        "resources:\n  any_of:\n    - {infra: aws/us-east-1, accelerators: L4}\n"
        "    - {accelerators: T4}\nrun: x\n"
    )
    assert "placement" not in converted.document
    assert converted.document["resources"] == {"accelerators": ["L4:1", "T4:1"]}


@pytest.mark.parametrize(
    ("recovery", "expected", "warned"),
    [
        ("job_recovery: FAILOVER", {}, {"resources.job_recovery"}),
        ("spot_recovery: failover", {}, {"resources.spot_recovery"}),
        ("job_recovery: {max_restarts_on_errors: 2, recover_on_exit_codes: 137}",
         {"max_restarts_on_error": 2, "recover_on_exit_codes": [137]}, set()),
        ("job_recovery: {strategy: null, recover_on_exit_codes: [1, 255], foo: 1}",
         {"recover_on_exit_codes": [1, 255]},
         {"resources.job_recovery.strategy", "resources.job_recovery.foo"}),
    ],
)  # fmt: skip
def test_job_recovery(recovery, expected, warned):
    converted = convert(f"resources:\n  {recovery}\nrun: x\n")
    assert converted.document.get("recovery", {}) == expected
    assert fields(converted) == warned


def test_workdir_as_the_manifest_will_find_it():
    task = "workdir: {}\nrun: x\n"
    at = {
        written: convert(task.format(written), manifest_dir=PROJECT / "jobs").document["run"]
        for written in (".", "src/..", "/abs/code", "~/code")
    }
    assert {written: run["workdir"] for written, run in at.items()} == {
        ".": "..",
        "src/..": "..",
        "/abs/code": "/abs/code",
        "~/code": "~/code",
    }
    assert convert(task.format("code")).document["run"]["workdir"] == str(PROJECT / "code")
    git = convert("workdir: {url: 'https://github.com/x/y', ref: main}\nrun: x\n")
    assert "workdir" not in git.document["run"] and fields(git) == {"workdir"}


def test_local_mounts_are_data_inputs_with_their_size():
    converted = convert("file_mounts:\n  /data: data\nrun: x\n", sizes={PROJECT / "data": 1.5})
    assert converted.document["data"] == [{"uri": "file:///srv/proj/data", "size_gb": 1.5}]
    assert "size is unknown" not in str(converted.warnings[0])


def test_every_mistake_is_located_at_once():
    assert errors(
        """\
        name: 7
        num_nodes: 0
        resources:
          accelerators: [A100:8, B9000:1]
          cpus: lots
          memory: 3 apples
          use_spot: maybe
          region: us-east-1
          infra: aws
        envs: {1X: a}
        run: x
        """
    ) == [
        "task.yaml:1:7: name: expected a task name, got 7",
        "task.yaml:2:12: num_nodes: expected a number of nodes of at least 1, got 0",
        "task.yaml:4:26: resources.accelerators[1]: unknown GPU 'B9000' (did you mean B200, B300?)",
        "task.yaml:5:9: resources.cpus: 'lots' is not a vCPU count: write N or N+ (e.g. 4+)",
        "task.yaml:6:11: resources.memory: '3 apples' is not a memory size: write N, N+ or "
        "e.g. 64GB (GiB)",
        "task.yaml:7:13: resources.use_spot: expected true or false, got 'maybe'",
        "task.yaml:8:11: resources.region: give infra or cloud/region/zone, not both",
        "task.yaml:10:8: envs.1X: '1X' is not an environment variable name",
    ]


def test_label():
    assert label("My_Train.Job v2") == "my-train-job-v2"
    assert label("--x--") == "x"
    assert label("ü") == ""
    assert len(label("a" * 80)) == 63


# --- generated tasks: their manifests load as the job they describe ----------------------------

GPUS = st.sampled_from(gpu_names())
PLACES = st.sampled_from(sorted((c, r) for c, r in REGION_COUNTRY if c in ("aws", "gcp", "azure")))
UNKNOWN = st.from_regex(r"x[a-z_]{1,12}", fullmatch=True)
SECRET = st.text("αβγδεζηθικλμ", min_size=8, max_size=16)  # letters no output has otherwise


@st.composite
def tasks(draw) -> tuple[dict, dict]:
    """A SkyPilot task and what its manifest must say."""
    asks = draw(st.lists(st.tuples(GPUS, st.integers(1, 8)), max_size=3, unique_by=lambda a: a[0]))
    resources: dict = {}
    if asks:
        resources["accelerators"] = {gpu: count for gpu, count in asks}
    places = draw(st.lists(PLACES, max_size=3, unique=True))
    if len(places) == 1:
        resources["infra"] = "/".join(places[0])
    elif places:
        resources["any_of"] = [{"cloud": c, "region": r} for c, r in places]
    spot = draw(st.booleans())
    if spot:
        resources["use_spot"] = True
    nodes = draw(st.integers(1, 4))
    unknown = draw(st.lists(UNKNOWN, max_size=3, unique=True))
    task = {"name": draw(st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True))}
    task |= {"num_nodes": nodes, "resources": resources, "run": "python train.py"}
    task |= {key: 1 for key in unknown}
    secrets = draw(st.dictionaries(st.from_regex(r"[A-Z]{2,8}", fullmatch=True), SECRET))
    if secrets:
        task["secrets"] = secrets
    expected = {
        "accelerators": tuple(GpuAsk(gpu, float(count)) for gpu, count in asks),
        "nodes": nodes,
        "spot": "only" if spot else "never",
        "clouds": tuple(dict.fromkeys(c for c, _ in places)),
        "regions": tuple(dict.fromkeys(r for _, r in places)),
        "warned": {*unknown, *(f"secrets.{name}" for name in secrets)},
        "secrets": list(secrets.values()),
    }
    return task, expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tasks())
def test_generated_tasks_load_as_the_job_they_describe(generated):
    task, expected = generated
    converted = convert(yaml.safe_dump(task, sort_keys=False))
    text = to_yaml(converted, "task.yaml")
    (manifest,) = parse_manifest_text(text, Path("job.yaml"))
    req = manifest.spec.requirements
    assert req.accelerators == expected["accelerators"]
    assert (req.nodes, req.spot) == (expected["nodes"], expected["spot"])
    assert (req.clouds, req.regions) == (expected["clouds"], expected["regions"])
    assert expected["warned"] <= fields(converted)
    shown = text + "\n".join(map(str, converted.warnings))
    assert not any(secret in shown for secret in expected["secrets"])
