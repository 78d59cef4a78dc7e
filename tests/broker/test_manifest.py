"""broker.manifest: manifests read into JobSpecs, every mistake located, directories searched."""

from __future__ import annotations

import os
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.manifest.digest import manifest_digest, manifest_json_schema
from broker.manifest.load import (
    Manifest,
    find_manifest_files,
    load_manifests,
    parse_manifest_text,
)
from broker.spec import (
    NO_HISTORY,
    Amount,
    Budget,
    Checkpoint,
    DataInput,
    GpuAsk,
    JobSpec,
    Requirements,
    RunSpec,
    RuntimeEstimate,
)
from pricing.gpus import gpu_names
from pricing.regions import Place
from pricing.schema import CLOUDS
from pricing.userio.bounds import MAX_HOURS
from pricing.userio.errors import UserInputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
WHERE = Path("jobs/llama.yaml")

# The manifest of the brief; line numbers in the tests below refer to it.
FULL = """\
apiVersion: broker/v1
name: llama-ft
team: nlp
queue: research
priority: 100
resources:
  accelerators: A100:8
  cpus: 8+
  memory: 64+
  nodes: 1
  interconnect: nvlink
placement:
  clouds: [aws, gcp, onprem]
  regions: ["us-*", europe-west4]
  countries: [US, de]
  spot: prefer
  max_price_per_hour: 40
run:
  image: ghcr.io/acme/train:1.4
  command: python train.py --resume "$BROKER_RESUME_FROM"
  env: {WANDB_PROJECT: llama}
runtime:
  estimate_hours: 12
  deadline: 36h
checkpoint:
  uri: s3://acme-ckpt/llama-ft/
  interval_minutes: 30
  size_gb: 120
  location: aws:us-east-1
data:
  - {uri: s3://acme-data/pile/, size_gb: 800, location: aws:us-east-1}
budget:
  max_cost: 500
recovery:
  max_restarts_on_error: 0
  recover_on_exit_codes: [137]
"""

MINIMAL = """\
apiVersion: broker/v1
name: tiny
team: nlp
run:
  command: echo hi
"""


def parse(text: str) -> list[Manifest]:
    return parse_manifest_text(textwrap.dedent(text), WHERE)


def errors_of(text: str) -> list[str]:
    with pytest.raises(UserInputError) as info:
        parse(text)
    return [error.one_line() for error in info.value.errors]


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# --- what a manifest says ---------------------------------------------------------------------


def test_every_field_of_the_full_manifest():
    (manifest,) = parse(FULL)
    assert manifest.spec == JobSpec(
        name="llama-ft",
        team="nlp",
        queue="research",
        priority=100,
        requirements=Requirements(
            accelerators=(GpuAsk("A100", 8.0),),
            cpus=Amount(8.0, at_least=True),
            memory_gib=Amount(64.0, at_least=True),
            nodes=1,
            interconnect="nvlink",
            clouds=("aws", "gcp", "onprem"),
            exclude_clouds=(),
            regions=("us-*", "europe-west4"),
            countries=("US", "DE"),
            spot="prefer",
            max_price_per_hour=40.0,
        ),
        run=RunSpec(
            command='python train.py --resume "$BROKER_RESUME_FROM"',
            image="ghcr.io/acme/train:1.4",
            env=(("WANDB_PROJECT", "llama"),),
        ),
        runtime=RuntimeEstimate(estimate_hours=12.0, deadline=timedelta(hours=36)),
        checkpoint=Checkpoint("s3://acme-ckpt/llama-ft/", 30.0, 120.0, Place("aws", "us-east-1")),
        data=(DataInput("s3://acme-data/pile/", 800.0, Place("aws", "us-east-1")),),
        budget=Budget(max_cost=500.0),
        max_restarts_on_error=0,
        recover_on_exit_codes=(137,),
    )
    assert (manifest.path, manifest.index, manifest.line) == (WHERE, 0, 1)
    assert len(manifest.digest) == 64 and int(manifest.digest, 16) >= 0


def test_defaults():
    (manifest,) = parse(MINIMAL)
    learned = RuntimeEstimate(auto=True, source=NO_HISTORY)  # no estimate: learned from history
    assert manifest.spec == JobSpec(
        name="tiny",
        team="nlp",
        requirements=Requirements(),
        run=RunSpec(command="echo hi"),
        runtime=learned,
    )
    spec = manifest.spec
    assert (spec.queue, spec.priority, spec.requirements.spot) == ("default", 0, "never")
    assert spec.requirements.accelerators == ()  # a CPU-only job
    assert spec.runtime == RuntimeEstimate(1.0, None, auto=True, source=NO_HISTORY)
    assert spec.checkpoint is None and spec.data == () and spec.budget.max_cost is None
    assert (spec.max_restarts_on_error, spec.recover_on_exit_codes) == (0, ())


def test_alternatives_keep_their_order_and_aliases_become_canonical():
    (manifest,) = parse(FULL.replace("A100:8", "[H100:8, a100-80g:8, A100:8]"))
    assert manifest.spec.requirements.accelerators == (
        GpuAsk("H100", 8.0),
        GpuAsk("A100-80GB", 8.0),
        GpuAsk("A100", 8.0),
    )


@pytest.mark.parametrize(
    ("written", "amount"),
    [("8+", Amount(8.0, True)), ("8", Amount(8.0, False)), ("'8'", Amount(8.0, False)),
     ("0.5+", Amount(0.5, True)), ("12.5", Amount(12.5, False))],
)  # fmt: skip
def test_amounts(written, amount):
    (manifest,) = parse(FULL.replace("cpus: 8+", f"cpus: {written}"))
    assert manifest.spec.requirements.cpus == amount


@pytest.mark.parametrize(
    ("written", "deadline"),
    [
        ("90m", timedelta(minutes=90)),
        ("36h", timedelta(hours=36)),
        ("2d", timedelta(days=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("1d2h30m", timedelta(days=1, hours=2, minutes=30)),
        ("2026-07-01T18:00:00Z", datetime(2026, 7, 1, 18, tzinfo=UTC)),
        ("2026-07-01T20:00:00+02:00", datetime(2026, 7, 1, 18, tzinfo=UTC)),
        ('"2026-07-01T18:00:00Z"', datetime(2026, 7, 1, 18, tzinfo=UTC)),
    ],
)
def test_deadlines(written, deadline):
    (manifest,) = parse(FULL.replace("deadline: 36h", f"deadline: {written}"))
    assert manifest.spec.runtime.deadline == deadline
    if isinstance(deadline, datetime):
        assert manifest.spec.runtime.deadline.tzinfo == UTC
    submitted = datetime(2026, 6, 1, tzinfo=UTC)
    assert manifest.spec.runtime.deadline_at(submitted) >= submitted


def test_exclude_clouds_and_quoted_norway():
    text = FULL.replace("clouds: [aws, gcp, onprem]", "exclude_clouds: [azure]").replace(
        "countries: [US, de]", 'countries: ["NO", se]'
    )
    requirements = parse(text)[0].spec.requirements
    assert (requirements.clouds, requirements.exclude_clouds) == ((), ("azure",))
    assert requirements.countries == ("NO", "SE")


def test_image_without_command_and_env_sorted():
    text = MINIMAL.replace(
        "  command: echo hi\n", "  image: ghcr.io/a/b:1\n  env: {B: '2', A: x}\n"
    )
    run = parse(text)[0].spec.run
    assert run == RunSpec(command="", image="ghcr.io/a/b:1", env=(("A", "x"), ("B", "2")))


def test_setup_and_workdir_resolved_against_the_manifests_folder(tmp_path):
    (tmp_path / "proj" / "src").mkdir(parents=True)
    path = write(
        tmp_path / "proj",
        "jobs/train.yaml",
        MINIMAL.replace("  command: echo hi\n", "  command: python3 train.py\n")
        + "  setup: pip install -r requirements.txt\n  workdir: ..\n",
    )
    (manifest,) = load_manifests([path]).manifests
    assert manifest.spec.run == RunSpec(
        command="python3 train.py",
        workdir=str(tmp_path / "proj"),
        setup="pip install -r requirements.txt",
    )
    nested = write(tmp_path / "proj", "job.yaml", MINIMAL + "  workdir: src\n")
    assert load_manifests([nested]).manifests[0].spec.run.workdir == str(tmp_path / "proj/src")


def test_without_workdir_or_setup_the_run_has_none():
    assert parse(MINIMAL)[0].spec.run == RunSpec(command="echo hi", workdir=None, setup="")


def test_workdir_must_be_an_existing_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("not a folder")
    missing = write(tmp_path, "missing.yaml", MINIMAL + "  workdir: nope\n")
    a_file = write(tmp_path, "file.yaml", MINIMAL + "  workdir: notes.txt\n")
    errors = [e.one_line() for e in load_manifests([missing, a_file]).errors]
    assert errors == [
        f"{missing}:6:12: run.workdir: 'nope': no such folder ({tmp_path / 'nope'})",
        f"{a_file}:6:12: run.workdir: 'notes.txt' is not a folder ({tmp_path / 'notes.txt'}): "
        "workdir names a directory",
    ]


def test_setup_with_an_image_alone_is_refused():
    """The image's entrypoint would run instead of a command: nothing can follow setup."""
    text = MINIMAL.replace(
        "  command: echo hi\n", "  image: ghcr.io/acme/train:1\n  setup: pip install x\n"
    )
    (error,) = errors_of(text)
    assert error.startswith("jobs/llama.yaml:5:3: run: setup needs a command")


def test_setup_alone_is_nothing_to_run():
    assert errors_of(MINIMAL.replace("  command: echo hi\n", "  setup: pip install x\n")) == [
        "jobs/llama.yaml:5:3: run: setup runs before command, not instead of it: "
        "give a command, an image (its entrypoint runs), or both"
    ]


def test_a_cached_spec_takes_the_workdir_of_where_its_manifest_is(tmp_path):
    """The same document in two folders names two working directories, and a folder
    deleted since the spec was cached is an error again, not a stale path."""
    text = MINIMAL + "  workdir: .\n"
    one, two = write(tmp_path / "one", "job.yaml", text), write(tmp_path / "two", "job.yaml", text)
    for _ in range(2):  # validated, then from the spec cache (document and file)
        specs = [load_manifests([path]).manifests[0].spec for path in (one, two)]
        assert [s.run.workdir for s in specs] == [str(tmp_path / "one"), str(tmp_path / "two")]
    from broker.manifest.spec_cache import SpecCache, cache_dir

    (cached,) = SpecCache(cache_dir()).stored_specs()
    assert cached["run"]["workdir"] == "."  # as written: the cache serves both folders
    renamed = tmp_path / "moved"
    (tmp_path / "two").rename(renamed)
    (tmp_path / "two").mkdir()
    gone = write(tmp_path / "two", "job.yaml", MINIMAL + "  workdir: ../two/sub\n")
    assert load_manifests([renamed / "job.yaml"]).manifests[0].spec.run.workdir == str(renamed)
    assert "run.workdir: '../two/sub': no such folder" in str(load_manifests([gone]).errors[0])
    (tmp_path / "two" / "sub").mkdir()
    assert load_manifests([gone]).manifests[0].spec.run.workdir == str(tmp_path / "two" / "sub")
    (tmp_path / "two" / "sub").rmdir()  # the spec is cached now: the folder is checked again
    assert "no such folder" in str(load_manifests([gone]).errors[0])


def test_multi_document_file():
    text = MINIMAL + "---\n" + MINIMAL.replace("tiny", "small") + "---\n"
    manifests = parse(text)
    assert [(m.spec.name, m.index, m.line) for m in manifests] == [("tiny", 0, 1), ("small", 1, 7)]


def test_examples_validate():
    result = load_manifests([EXAMPLES])
    assert result.errors == [] and result.skipped == []
    names = {m.spec.name for m in result.manifests}
    assert names == {"llama-ft", "llama-eval", "batch-embed", "tokenize-pile", "clinical-ner"}
    by_name = {m.spec.name: m.spec for m in result.manifests}
    assert by_name["tokenize-pile"].requirements.accelerators == ()
    assert by_name["clinical-ner"].requirements.countries == ("DE", "NL", "FR")
    assert by_name["llama-ft"].requirements.spot == "prefer"


# --- every mistake, located -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "resources:",
            "resorces:",
            "jobs/llama.yaml:6:1: resorces: unknown field (did you mean 'resources'?)",
        ),
        (
            "A100:8",
            "A1000",
            "jobs/llama.yaml:7:17: resources.accelerators: unknown GPU 'A1000' "
            "(did you mean A100, A10G, H100?)",
        ),
        (
            "A100:8",
            "[H100:8, A1000:8]",
            "jobs/llama.yaml:7:26: resources.accelerators[1]: unknown GPU 'A1000' "
            "(did you mean A100, A10G, H100?)",
        ),
        (
            "cpus: 8+",
            "cpus: 8++",
            "jobs/llama.yaml:8:9: resources.cpus: '8++' is not an amount: "
            "write N for exactly N, or N+ for at least N (e.g. 8+)",
        ),
        (
            "  clouds: [aws, gcp, onprem]",
            "  clouds: [aws]\n  exclude_clouds: [gcp]",
            "jobs/llama.yaml:14:19: placement.exclude_clouds: "
            "give either clouds (an allow-list) or exclude_clouds, not both",
        ),
        (
            "deadline: 36h",
            "deadline: 36x",
            "jobs/llama.yaml:24:13: runtime.deadline: '36x' is not a deadline: write a duration "
            "such as 90m, 36h, 2d or 1d12h, or an RFC 3339 time such as 2026-07-01T18:00:00Z",
        ),
        (
            "deadline: 36h",
            "deadline: 2026-07-01T18:00:00",
            "jobs/llama.yaml:24:13: runtime.deadline: '2026-07-01T18:00:00' has no timezone: "
            "add Z for UTC or an offset such as +02:00",
        ),
        (
            "  location: aws:us-east-1\ndata",
            "  location: aws:us-east-7\ndata",
            "jobs/llama.yaml:29:13: checkpoint.location: unknown aws region 'us-east-7' "
            "(did you mean 'us-east-1'?)",
        ),
        (
            "location: aws:us-east-1}",
            "location: amazon:us-east-1}",
            "jobs/llama.yaml:31:57: data[0].location: unknown cloud 'amazon' in "
            "'amazon:us-east-1': one of aws, gcp, azure, onprem",
        ),
        (
            "apiVersion: broker/v1",
            "apiVersion: broker/v2",
            "jobs/llama.yaml:1:13: apiVersion: unsupported apiVersion 'broker/v2': "
            "expected broker/v1",
        ),
        (
            "  env: {WANDB_PROJECT: llama}",
            "  env: {WANDB_PROJECT: llama",
            "jobs/llama.yaml:22:8: YAML syntax error: expected ',' or '}', but got ':' "
            "(while parsing a flow mapping at line 21, column 8)",
        ),
        (
            "spot: prefer",
            "spot: prefered",
            "jobs/llama.yaml:16:9: placement.spot: 'prefered' is not one of never, prefer, only "
            "(did you mean 'prefer'?)",
        ),
        (
            "clouds: [aws, gcp, onprem]",
            "clouds: [aws, gpc]",
            "jobs/llama.yaml:13:17: placement.clouds[1]: 'gpc' is not one of aws, gcp, azure, "
            "onprem (did you mean 'gcp'?)",
        ),
        (
            "interconnect: nvlink",
            "interconnect: nvlnk",
            "jobs/llama.yaml:11:17: resources.interconnect: 'nvlnk' is not one of nvlink, "
            "infiniband, efa (did you mean 'nvlink'?)",
        ),
    ],
)
def test_errors(old, new, expected):
    assert old in FULL
    assert errors_of(FULL.replace(old, new, 1)) == [expected]


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        ("name: llama-ft", "name: Llama_FT", "2:7: name", "'Llama_FT' is not a valid name"),
        ("team: nlp", f"team: {'a' * 64}", "3:7: team", "is not a valid name"),
        ("priority: 100", "priority: high", "5:11: priority", "valid integer"),
        ("A100:8", "[]", "7:17: resources.accelerators", "list at least one GPU"),
        ("A100:8", "[A100:8, a100-40gb:4]", "7:17: resources.accelerators", "A100 is listed twice"),
        ("A100:8", "8", "7:17: resources.accelerators", "expected a GPU such as A100:8"),
        ("A100:8", "A100:lots", "7:17: resources.accelerators", "bad GPU count"),
        ("cpus: 8+", "cpus: 0", "8:9: resources.cpus", "must be more than 0"),
        ("cpus: 8+", "cpus: yes", "8:9: resources.cpus", "True is not an amount"),
        ("nodes: 1", "nodes: 0", "10:10: resources.nodes", "greater than or equal to 1"),
        ("countries: [US, de]", "countries: [US, NO]", "15:19: placement.countries[1]",
         'quote it ("NO")'),
        ("countries: [US, de]", "countries: [UK]", "15:15: placement.countries[0]", "is GB"),
        ("countries: [US, de]", "countries: [USA]", "15:15: placement.countries[0]",
         "two-letter ISO 3166"),
        ("spot: prefer", "spot: no", "16:9: placement.spot", "write never, prefer or only"),
        ("clouds: [aws, gcp, onprem]", "clouds: []", "13:11: placement.clouds",
         "an empty allow-list"),
        ("clouds: [aws, gcp, onprem]", "exclude_clouds: [aws, gcp, azure, onprem]",
         "13:19: placement.exclude_clouds", "every cloud is excluded"),
        ('regions: ["us-*", europe-west4]', "regions: [aws:us-east-1]",
         "14:13: placement.regions[0]", "choose clouds with placement.clouds"),
        ("max_price_per_hour: 40", "max_price_per_hour: 0", "17:23: placement.max_price_per_hour",
         "greater than 0"),
        ("WANDB_PROJECT: llama", "EPOCHS: 3", "21:17: run.env.EPOCHS", "quote it (YAML read 3)"),
        ("WANDB_PROJECT: llama", "BROKER_X: a", "21:8: run.env", "set by the broker"),
        ("estimate_hours: 12", "estimate_hours: .inf", "23:19: runtime.estimate_hours", "finite"),
        ("deadline: 36h", "deadline: 2026-07-01", "24:13: runtime.deadline",
         "a date without a time"),
        ("deadline: 36h", "deadline: 36", "24:13: runtime.deadline", "36 has no unit"),
        ("deadline: 36h", "deadline: 0h", "24:13: runtime.deadline", "after submission"),
        ("uri: s3://acme-ckpt/llama-ft/", "uri: s4://acme-ckpt/", "26:8: checkpoint.uri",
         "(did you mean 's3'?)"),
        ("uri: s3://acme-ckpt/llama-ft/", "uri: s3:///x", "26:8: checkpoint.uri", "no bucket"),
        ("uri: s3://acme-ckpt/llama-ft/", "uri: file://rel/path", "26:8: checkpoint.uri",
         "absolute path"),
        ("size_gb: 800,", "size_gb: -1,", "31:42: data[0].size_gb", "greater than or equal to 0"),
        ("max_cost: 500", "max_cost: -5", "33:13: budget.max_cost", "greater than 0"),
        ("max_restarts_on_error: 0", "max_restarts_on_error: -1",
         "35:26: recovery.max_restarts_on_error", "greater than or equal to 0"),
        ("[137]", "[137, 0]", "36:32: recovery.recover_on_exit_codes[1]",
         "greater than or equal to 1"),
    ],
)  # fmt: skip
def test_field_rules(old, new, where, message):
    assert old in FULL
    (error,) = errors_of(FULL.replace(old, new, 1))
    assert error.startswith(f"jobs/llama.yaml:{where}: "), error
    assert message in error


def test_run_needs_a_command_or_an_image():
    assert errors_of(MINIMAL.replace("  command: echo hi\n", "  env: {A: b}\n")) == [
        "jobs/llama.yaml:5:3: run: give a command, an image (its entrypoint runs), or both"
    ]
    assert errors_of(MINIMAL.replace("run:\n  command: echo hi\n", "")) == [
        "jobs/llama.yaml:1:1: run: field required"
    ]


def test_missing_or_misspelt_api_version_is_the_only_error():
    assert errors_of("name: x\nteam: y\nrezources: {}\n") == [
        "jobs/llama.yaml:1:1: apiVersion: not a job manifest: apiVersion: broker/v1 is missing"
    ]
    assert errors_of(MINIMAL.replace("apiVersion", "apiversion")) == [
        "jobs/llama.yaml:1:1: apiversion: unknown field (did you mean 'apiVersion'?)"
    ]


def test_every_mistake_of_a_document_is_reported():
    text = FULL.replace("A100:8", "A1000").replace("cpus: 8+", "cpus: 8++")
    text = text.replace("spot: prefer", "spot: sometimes")
    assert [e.split(": ")[1] for e in errors_of(text)] == [
        "resources.accelerators",
        "resources.cpus",
        "placement.spot",
    ]


def test_not_a_mapping():
    assert errors_of("- a\n") == [
        "jobs/llama.yaml:1:1: expected a mapping of key: value, got a list"
    ]


def test_duplicate_team_and_name_in_one_text():
    text = MINIMAL + "---\n" + MINIMAL
    assert errors_of(text) == [
        "jobs/llama.yaml:8:7: name: duplicate job 'tiny' in team 'nlp' (first at jobs/llama.yaml:2)"
    ]
    other_team = MINIMAL + "---\n" + MINIMAL.replace("team: nlp", "team: vision")
    assert len(parse(other_team)) == 2


def test_duplicate_key_is_an_error():
    assert errors_of(MINIMAL + "name: again\n") == [
        "jobs/llama.yaml:6:1: name: duplicate key 'name' (first at line 2)"
    ]


# --- files and directories --------------------------------------------------------------------


def test_duplicate_across_files_points_at_the_second_name(tmp_path):
    first = write(tmp_path, "a.yaml", MINIMAL)
    second = write(tmp_path, "b.yaml", "# the same job again\n" + MINIMAL)
    result = load_manifests([first, second])
    assert [str(e) for e in result.errors] == [
        f"{second}:3:7: name: duplicate job 'tiny' in team 'nlp' (first at {first}:2)"
    ]
    assert [m.path for m in result.manifests] == [first]


def test_every_error_of_every_file_is_collected(tmp_path):
    bad_gpu = write(tmp_path, "jobs/a.yaml", FULL.replace("A100:8", "A1000"))
    bad_both = write(tmp_path, "jobs/b.yaml", FULL.replace("cpus: 8+", "cpus: 8++") + "---\n- x\n")
    broken = write(tmp_path, "jobs/c.yaml", "apiVersion: broker/v1\nname: [\n")
    good = write(tmp_path, "jobs/d.yaml", MINIMAL)
    result = load_manifests([tmp_path / "jobs"])
    assert [(e.path, e.line, e.field) for e in result.errors] == [
        (bad_gpu, 7, "resources.accelerators"),
        (bad_both, 8, "resources.cpus"),
        (bad_both, 38, ""),
        (broken, 3, ""),
    ]
    assert [m.path for m in result.manifests] == [good]
    assert result.files == [bad_gpu, bad_both, broken, good] and not result.ok


def test_directory_skips_other_yaml_but_a_named_file_must_be_a_manifest(tmp_path):
    job = write(tmp_path, "repo/jobs/train.yaml", MINIMAL)
    ci = write(tmp_path, "repo/ci.yml", "on: push\njobs: {build: {runs-on: ubuntu}}\n")
    pools = write(tmp_path, "repo/pools.yaml", "pools: []\n")
    helm = write(tmp_path, "repo/chart/deploy.yaml", "{{- if .Values.on }}\nkind: [\n")
    kube = write(tmp_path, "repo/k8s.yaml", "apiVersion: v1\nkind: Pod\n")
    write(tmp_path, "repo/.github/workflows/x.yaml", MINIMAL.replace("tiny", "hidden"))
    write(tmp_path, "repo/notes.txt", MINIMAL.replace("tiny", "text"))
    result = load_manifests([tmp_path / "repo"])
    assert result.errors == []
    assert [m.spec.name for m in result.manifests] == ["tiny"]
    assert result.manifests[0].path == job
    assert sorted(result.skipped) == sorted([ci, pools, helm, kube])

    named = load_manifests([kube, pools])
    assert [e.one_line() for e in named.errors] == [
        f"{kube}:1:13: apiVersion: unsupported apiVersion 'v1': expected broker/v1",
        f"{pools}:1:1: apiVersion: not a job manifest: apiVersion: broker/v1 is missing",
    ]
    assert named.skipped == []


def test_a_directory_file_that_claims_to_be_a_manifest_is_checked(tmp_path):
    bad = write(tmp_path, "jobs/a.yaml", MINIMAL.replace("echo hi", "[") + "\n")
    wrong = write(tmp_path, "jobs/b.yaml", MINIMAL.replace("broker/v1", "broker/v9"))
    result = load_manifests([tmp_path / "jobs"])
    assert [(e.path, e.message.split(":")[0]) for e in result.errors] == [
        (bad, "YAML syntax error"),
        (wrong, "unsupported apiVersion 'broker/v9'"),
    ]


def test_empty_directory_missing_file_and_empty_file(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path, "other/ci.yaml", "a: 1\n")
    blank = write(tmp_path, "blank.yaml", "# nothing yet\n")
    result = load_manifests([tmp_path / "empty", tmp_path / "other", tmp_path / "nope.yaml", blank])
    assert [e.one_line() for e in result.errors] == [
        f"{tmp_path / 'empty'}: no job manifests (YAML with apiVersion: broker/v1) in this "
        "directory",
        f"{tmp_path / 'other'}: no job manifests (YAML with apiVersion: broker/v1) in this "
        "directory",
        f"{tmp_path / 'nope.yaml'}: file not found",
        f"{blank}: no job manifest in this file",
    ]


def test_find_manifest_files_sorted_recursive_without_hidden_dirs(tmp_path):
    for name in ("b.yaml", "a.yml", "c.txt", "sub/z.yaml", "sub/deeper/y.yml", ".git/x.yaml",
                 "sub/.cache/w.yaml", "a-dir/q.yaml"):  # fmt: skip
        write(tmp_path, name, "x: 1\n")
    found = find_manifest_files([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a-dir/q.yaml",
        "a.yml",
        "b.yaml",
        "sub/deeper/y.yml",
        "sub/z.yaml",
    ]
    named = tmp_path / "c.txt"
    assert find_manifest_files([named, tmp_path / "b.yaml", tmp_path])[:3] == [
        named,
        tmp_path / "b.yaml",
        tmp_path / "a-dir/q.yaml",
    ]
    assert len(find_manifest_files([tmp_path, tmp_path])) == 5


def test_a_file_reached_twice_is_loaded_once(tmp_path):
    job = write(tmp_path, "jobs/a.yaml", MINIMAL)
    result = load_manifests([job, tmp_path / "jobs"])
    assert result.errors == [] and len(result.manifests) == 1 and result.files == [job]


# --- digest -----------------------------------------------------------------------------------


def test_digest_ignores_layout_comments_and_key_order():
    (a,) = parse(MINIMAL)
    reordered = (
        "run: {command: echo hi}   # comment\nteam: nlp\nname: tiny\napiVersion: broker/v1\n"
    )
    (b,) = parse(reordered)
    assert a.digest == b.digest
    (c,) = parse(MINIMAL.replace("echo hi", "echo bye"))
    assert c.digest != a.digest
    (d,) = parse(MINIMAL + "priority: 0\n")  # the same job, written differently
    assert d.digest != a.digest


def test_digest_is_sha256_of_canonical_json():
    import hashlib

    data = {"b": [1, 2.5, None], "a": {"z": "é", "y": True}}
    canonical = '{"a":{"y":true,"z":"é"},"b":[1,2.5,null]}'
    assert manifest_digest(data) == hashlib.sha256(canonical.encode()).hexdigest()
    when = datetime(2026, 7, 1, 18, tzinfo=UTC)
    assert manifest_digest({"t": when}) == manifest_digest({"t": "2026-07-01T18:00:00+00:00"})


# --- JSON Schema ------------------------------------------------------------------------------


def test_json_schema_describes_every_field():
    schema = manifest_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] and schema["description"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"apiVersion", "name", "team", "run"}
    assert schema["properties"]["apiVersion"]["const"] == "broker/v1"
    for name, model in [("root", schema), *schema["$defs"].items()]:
        for field, prop in model["properties"].items():
            if "$ref" in prop:  # a section: described where it is defined
                prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[1]]
            assert prop.get("description"), f"{name}.{field} has no description"
    resources = schema["$defs"]["Resources"]["properties"]
    assert {"type": "string"} in resources["accelerators"]["anyOf"][0]["anyOf"]


def test_json_schema_names_each_section_as_users_know_it():
    """The section models are named `...Section` in the code; editors see plain names."""
    schema = manifest_json_schema()
    sections = ["Budget", "Checkpoint", "DataInput", "Placement", "Recovery", "Resources"]
    assert sorted(schema["$defs"]) == sorted([*sections, "Run", "Runtime"])
    assert all(definition["title"] == name for name, definition in schema["$defs"].items())
    assert schema["properties"]["placement"] == {"$ref": "#/$defs/Placement"}


def test_examples_match_the_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(manifest_json_schema())
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            # YAML reads an unquoted timestamp as a datetime; JSON has only strings
            runtime = document.get("runtime", {})
            if isinstance(runtime.get("deadline"), datetime):
                runtime["deadline"] = runtime["deadline"].isoformat()
            assert list(validator.iter_errors(document)) == [], path


# --- properties: any valid manifest reads back as what was written -----------------------------

LABELS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
PLACES = st.sampled_from(
    [("aws", "us-east-1"), ("gcp", "europe-west4"), ("azure", "westeurope"), ("onprem", "lab-1")]
)
URIS = st.builds(
    "{}://{}/{}".format,
    st.sampled_from(["s3", "gs", "az"]),
    st.from_regex(r"[a-z0-9][a-z0-9.-]{2,20}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_./-]{0,20}", fullmatch=True),
) | st.from_regex(r"file:///[a-z0-9/]{1,20}", fullmatch=True)
POSITIVE = st.floats(min_value=0.001, max_value=MAX_HOURS, allow_nan=False) | st.integers(1, 10**4)
SIZES = st.floats(min_value=0, max_value=1e6) | st.integers(0, 10**6)
# Any text but YAML 1.1's extra line breaks, which PyYAML's emitter writes raw with allow_unicode.
CHARACTERS = st.characters(
    codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x85\u2028\u2029"
)
TEXT = st.text(CHARACTERS, min_size=1, max_size=30)


@st.composite
def manifests(draw) -> tuple[dict, JobSpec]:
    """A valid manifest document (optional parts left out at random) and its JobSpec."""
    doc: dict = {"apiVersion": "broker/v1", "name": draw(LABELS), "team": draw(LABELS)}
    spec: dict = {"name": doc["name"], "team": doc["team"]}
    req: dict = {}
    if draw(st.booleans()):
        doc["queue"] = spec["queue"] = draw(LABELS)
    if draw(st.booleans()):
        doc["priority"] = spec["priority"] = draw(st.integers(-1000, 1000))

    resources: dict = {}
    gpus = draw(
        st.lists(
            st.tuples(st.sampled_from(gpu_names()), st.integers(1, 16)),
            max_size=4,
            unique_by=lambda ask: ask[0],
        )
    )
    if gpus:
        written = [f"{gpu}:{count}" for gpu, count in gpus]
        resources["accelerators"] = (
            written[0] if len(gpus) == 1 and draw(st.booleans()) else written
        )
        req["accelerators"] = tuple(GpuAsk(gpu, float(count)) for gpu, count in gpus)
    for key, field in (("cpus", "cpus"), ("memory", "memory_gib")):
        amount = draw(st.none() | st.tuples(st.integers(1, 4096), st.booleans()))
        if amount is not None:
            value, at_least = amount
            resources[key] = f"{value}+" if at_least else value
            req[field] = Amount(float(value), at_least)
    if draw(st.booleans()):
        resources["nodes"] = req["nodes"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        resources["interconnect"] = req["interconnect"] = draw(
            st.sampled_from(["nvlink", "infiniband", "efa"])
        )
    if resources or draw(st.booleans()):
        doc["resources"] = resources

    placement: dict = {}
    clouds = draw(st.lists(st.sampled_from(CLOUDS), min_size=1, max_size=3, unique=True))
    which = draw(st.sampled_from(["", "clouds", "exclude_clouds"]))
    if which:
        placement[which] = clouds
        req[which] = tuple(clouds)
    regions = draw(st.lists(st.sampled_from(["us-east-1", "us-*", "europe-west?", "lab-1"])))
    if regions:
        placement["regions"] = regions
        req["regions"] = tuple(regions)
    countries = draw(st.lists(st.sampled_from(["US", "de", "NO", "fr", "Jp"]), max_size=3))
    if countries:
        placement["countries"] = countries
        req["countries"] = tuple(c.upper() for c in countries)
    if draw(st.booleans()):
        placement["spot"] = req["spot"] = draw(st.sampled_from(["never", "prefer", "only"]))
    if draw(st.booleans()):
        placement["max_price_per_hour"] = price = draw(POSITIVE)
        req["max_price_per_hour"] = float(price)
    if placement:
        doc["placement"] = placement
    spec["requirements"] = Requirements(**req)

    run: dict = {}
    if draw(st.booleans()):
        run["image"] = draw(st.from_regex(r"[a-z0-9./-]{1,20}(:[a-z0-9.]{1,8})?", fullmatch=True))
    if "image" not in run or draw(st.booleans()):
        run["command"] = draw(TEXT)
    env = draw(
        st.dictionaries(
            st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(
                lambda name: not name.startswith("BROKER_")
            ),
            st.text(CHARACTERS, max_size=20),
            max_size=4,
        )
    )
    if env:
        run["env"] = env
    if "command" in run and draw(st.booleans()):  # setup needs a command to run after it
        run["setup"] = draw(TEXT)
    if draw(st.booleans()):  # folders that exist wherever the test runs
        run["workdir"] = draw(st.sampled_from(["/", "/tmp", "~", "/tmp/../tmp"]))
    doc["run"] = run
    workdir = run.get("workdir")
    spec["run"] = RunSpec(
        run.get("command", ""),
        run.get("image"),
        tuple(sorted(env.items())),
        workdir=None if workdir is None else os.path.abspath(os.path.expanduser(workdir)),
        setup=run.get("setup", ""),
    )

    runtime: dict = {}
    given = draw(st.sampled_from(["number", "auto", "omitted"]))
    if given == "number":
        runtime["estimate_hours"] = hours = draw(POSITIVE)
        spec_hours = float(hours)
    else:  # auto, written or not: learned from history, 1 h until then
        if given == "auto":
            runtime["estimate_hours"] = draw(st.sampled_from(["auto", "AUTO", " auto"]))
        spec_hours = 1.0
    deadline = None
    kind = draw(st.sampled_from(["", "duration", "time"]))
    if kind == "duration":
        d, h, m = draw(st.tuples(st.integers(0, 9), st.integers(0, 48), st.integers(0, 120)))
        d, h, m = (d, h, m) if d + h + m else (0, 0, 1)
        runtime["deadline"] = "".join(f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m")) if n)
        deadline = timedelta(days=d, hours=h, minutes=m)
    elif kind == "time":
        when = draw(st.datetimes(datetime(2020, 1, 1), datetime(2040, 1, 1)))
        offset = timedelta(minutes=draw(st.integers(-12 * 60, 14 * 60)))
        moment = when.replace(microsecond=0, tzinfo=timezone(offset))
        runtime["deadline"] = moment.isoformat() if draw(st.booleans()) else moment
        deadline = moment.astimezone(UTC)
    if runtime:
        doc["runtime"] = runtime
    if given == "number":
        spec["runtime"] = RuntimeEstimate(spec_hours, deadline)
    else:
        spec["runtime"] = RuntimeEstimate(spec_hours, deadline, auto=True, source=NO_HISTORY)

    if draw(st.booleans()):
        checkpoint = {"uri": draw(URIS)}
        interval, size, place = 30.0, 0.0, None
        if draw(st.booleans()):
            checkpoint["interval_minutes"] = interval = draw(POSITIVE)
        if draw(st.booleans()):
            checkpoint["size_gb"] = size = draw(SIZES)
        if draw(st.booleans()):
            place = Place(*draw(PLACES))
            checkpoint["location"] = f"{place.cloud}:{place.region}"
        doc["checkpoint"] = checkpoint
        spec["checkpoint"] = Checkpoint(checkpoint["uri"], float(interval), float(size), place)

    inputs = draw(st.lists(st.tuples(URIS, SIZES, st.none() | PLACES), max_size=3))
    if inputs:
        doc["data"] = [
            {"uri": uri, "size_gb": size, **({"location": f"{p[0]}:{p[1]}"} if p else {})}
            for uri, size, p in inputs
        ]
        spec["data"] = tuple(
            DataInput(uri, float(size), Place(*p) if p else None) for uri, size, p in inputs
        )
    if draw(st.booleans()):
        doc["budget"] = {"max_cost": (cost := draw(POSITIVE))}
        spec["budget"] = Budget(float(cost))
    if draw(st.booleans()):
        restarts = draw(st.integers(0, 10))
        codes = draw(st.lists(st.integers(1, 255), max_size=4))
        doc["recovery"] = {"max_restarts_on_error": restarts, "recover_on_exit_codes": codes}
        spec["max_restarts_on_error"], spec["recover_on_exit_codes"] = restarts, tuple(codes)
    return doc, JobSpec(**spec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.booleans())
def test_generated_manifests_read_back_as_written(generated, flow_style):
    doc, expected = generated
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow_style, allow_unicode=True)
    (manifest,) = parse_manifest_text(text, WHERE)
    assert manifest.spec == expected
    assert manifest.digest == manifest_digest(doc)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.randoms(use_true_random=False))
def test_digest_does_not_depend_on_key_order(generated, random):
    doc, _ = generated
    keys = list(doc)
    random.shuffle(keys)
    shuffled = {key: doc[key] for key in keys}
    one = parse_manifest_text(yaml.safe_dump(doc, sort_keys=False), WHERE)[0]
    other = parse_manifest_text(yaml.safe_dump(shuffled, sort_keys=False), WHERE)[0]
    assert one.digest == other.digest and one.spec == other.spec


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests(), st.sampled_from(["name", "team", "run"]))
def test_digest_changes_with_a_value(generated, key):
    doc, _ = generated
    changed = dict(doc)
    if key == "run":
        changed["run"] = {**doc["run"], "image": "changed/image:2"}
    else:
        changed[key] = doc[key] + "-x" if len(doc[key]) < 60 else "x"
    assert manifest_digest(changed) != manifest_digest(doc)
    (manifest,) = parse_manifest_text(yaml.safe_dump(changed), WHERE)
    assert manifest.digest == manifest_digest(changed)


# --- the fast YAML path (userio.yaml_reader with libyaml) builds what PyYAML's safe_load builds ---

YAML_CORNERS = [
    "a: 010\nb: 0x1f\nc: 1_000\nd: 12\ne: -3\nf: 1.5\ng: .inf\nh: yes\ni: ~\nj: 2025-01-01\n",
    "k: 2025-01-01T10:00:00Z\nl: 1:30\nm: '12'\nn: !!str 12\no: !!int '42'\np: 0\nq: +7\n",
    "base: &b {x: 1, y: [1, 2]}\nd:\n  <<: *b\n  y: 3\n",
    "a: &x [1, *x]\n",
    "s: !!set {a, b}\no: !!omap [a: 1, b: 2]\np: !!binary aGVsbG8=\n",
    "1: a\n'1': b\nnull: c\ntrue: d\n",
    "a: &s hello\nb: *s\nc: [*s, *s]\n",
    "- [a, {b: [c, {d: e}]}]\n- {}\n- []\n- ''\n---\n---\nx: 1\n",
]


@pytest.mark.parametrize("text", YAML_CORNERS)
def test_fast_yaml_builds_what_safe_load_builds(text):
    from pricing.userio.yaml_reader import parse_yaml_documents

    got = [doc.data for doc in parse_yaml_documents(text, WHERE)]
    assert repr(got) == repr(list(yaml.load_all(text, Loader=yaml.SafeLoader)))


def test_fast_yaml_errors_are_pyyaml_errors():
    from pricing.userio.yaml_reader import parse_yaml_documents

    with pytest.raises(UserInputError, match="found unhashable key") as info:
        parse_yaml_documents("ok: 1\n---\n? [1, 2]\n: x\n", WHERE)
    assert (info.value.line, info.value.column) == (3, 3)
    with pytest.raises(UserInputError) as info:
        parse_yaml_documents("é: 1\nb: \x07\n", WHERE)  # libyaml counts bytes; this counts chars
    assert (info.value.line, info.value.column) == (2, 4)
    assert "special characters are not allowed" in info.value.message
    with pytest.raises(UserInputError, match="could not determine a constructor"):
        parse_yaml_documents("a: !!python/name:os.system x\n", WHERE)


@pytest.mark.parametrize(
    ("deadline", "said"),
    [
        ("99999999d", "more than 87,660 hours (ten years) after submission"),
        ("9" * 30 + "d", "more than 87,660 hours"),
        ("9999-12-31T23:59:59-01:00", "not before the year 3000"),
        ("3000-01-01T00:00:00Z", "not before the year 3000"),
    ],
)
def test_a_deadline_the_planner_cannot_count_is_refused_at_validate(tmp_path, deadline, said):
    """`deadline: 99999999d` once validated, and every `broker queue` then died with an
    OverflowError until the job was cancelled."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: broker/v1\nname: x\nteam: t\nrun: {command: x}\n"
        f"runtime: {{estimate_hours: 1, deadline: '{deadline}'}}\n"
    )
    result = load_manifests([path])
    (error,) = result.errors
    assert error.field == "runtime.deadline" and said in error.message


def test_what_validates_never_overflows_the_planners_date_arithmetic():
    """The largest deadlines that validate, through `RuntimeEstimate.deadline_at` and the
    planner's hours left, for a job submitted as far in the future as a deadline may be."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from broker.planner.plan import _hours_left
    from broker.spec import RuntimeEstimate
    from pricing.userio.bounds import MAX_HOURS
    from tests.fakes.specs import job_spec

    far = datetime.now(UTC) + timedelta(hours=MAX_HOURS)
    for deadline in (timedelta(hours=MAX_HOURS), datetime(2999, 12, 31, 23, 59, tzinfo=UTC)):
        spec = replace(job_spec(), runtime=RuntimeEstimate(MAX_HOURS, deadline))
        assert spec.runtime.deadline_at(far) is not None
        assert 0 < _hours_left(spec, far) < float("inf")
