"""The validated-manifest cache: exact round trip, and no pydantic on a second load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker import spec_codec
from broker.spec import RunSpec, RuntimeEstimate
from tests.broker.test_planner import jobs
from tests.fakes.specs import job_spec

REPO = Path(__file__).resolve().parents[2]
deadlines = (
    st.none()
    | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400))
    | st.datetimes(timezones=st.just(UTC))
)


runs = st.builds(
    RunSpec,
    command=st.text(max_size=30),
    image=st.none() | st.text(min_size=1, max_size=20),
    env=st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=8)), max_size=3).map(
        tuple
    ),
    workdir=st.none() | st.text(min_size=1, max_size=30).map(lambda name: f"/{name}"),
    setup=st.text(max_size=30),
)


@settings(max_examples=150, deadline=None)
@given(jobs, deadlines, runs)
def test_encode_decode_round_trips_exactly(job, deadline, run):
    job = replace(job, runtime=RuntimeEstimate(job.runtime.estimate_hours, deadline), run=run)
    if job.checkpoint is not None:  # set at planning time, never stored: not encoded
        job = replace(job, checkpoint=replace(job.checkpoint, moves_with_job=False, saved=False))
    assert spec_codec.decode(json.loads(json.dumps(spec_codec.encode(job)))) == job


def test_a_spec_encoded_before_workdir_and_setup_decodes_with_their_defaults():
    """A state file or cache written before run.workdir and run.setup existed."""
    job = replace(job_spec(), run=RunSpec(command="python3 train.py", env=(("A", "b"),)))
    data = json.loads(json.dumps(spec_codec.encode(job)))
    assert (data["run"].pop("workdir"), data["run"].pop("setup")) == (None, "")
    assert spec_codec.decode(data).run == RunSpec("python3 train.py", None, (("A", "b"),))
    assert spec_codec.decode(data) == job


def test_a_place_encodes_as_cloud_and_region_unless_it_has_a_zone_or_country():
    """The spec JSON of every stored job keeps its shape now that Place has four fields."""
    import json
    from dataclasses import replace

    from broker.spec import Checkpoint, DataInput
    from pricing.regions import Place

    job = replace(
        _a_job(),
        checkpoint=Checkpoint("s3://b/ck/", 30, 10, Place("aws", "us-east-1")),
        data=(DataInput("gs://b/d/", 5, Place("onprem", "lab", country="DE")),),
    )
    data = json.loads(json.dumps(spec_codec.encode(job)))
    assert data["checkpoint"]["location"] == {"cloud": "aws", "region": "us-east-1"}
    assert data["data"][0]["location"] == {"cloud": "onprem", "region": "lab", "country": "DE"}
    assert spec_codec.decode(data) == job


def _a_job():
    from broker.spec import GpuAsk, JobSpec, Requirements

    return JobSpec("j", "t", Requirements(accelerators=(GpuAsk("A100", 1),)))


PROBE = """
import sys
from pathlib import Path
from broker.manifest.load import load_manifests
result = load_manifests([Path(sys.argv[1])])
assert not result.errors, result.errors
print("pydantic" in sys.modules, "yaml" in sys.modules, repr(result.manifests))
"""


def test_second_load_skips_pydantic_and_yaml_and_gives_the_same_manifests(tmp_path):
    """The first load parses YAML (and, its documents being plainly valid, reads them
    without pydantic: broker.manifest.direct); the second needs neither."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    target = str(REPO / "examples" / "jobs")
    first = subprocess.run(
        [sys.executable, "-c", PROBE, target], env=env, capture_output=True, text=True, check=True
    ).stdout.split(" ", 2)
    second = subprocess.run(
        [sys.executable, "-c", PROBE, target], env=env, capture_output=True, text=True, check=True
    ).stdout.split(" ", 2)
    assert first[:2] == ["False", "True"] and second[:2] == ["False", "False"]
    assert first[2] == second[2]  # specs, paths, document numbers, lines and digests


SOURCES_PROBE = """
import sys
from pathlib import Path
from broker.manifest.load import load_manifests
result = load_manifests([Path(sys.argv[1])])
assert not result.errors and result.manifests, result.errors
root = Path(sys.argv[2])
import broker.manifest.model  # what a document the direct path declines runs
for name, module in list(sys.modules.items()):
    file = module.__file__ or "" if name.split(".")[0] in ("broker", "pricing") else ""
    if file and not file.endswith("__init__.py"):
        print(Path(file).relative_to(root).as_posix())
"""


def test_the_cache_key_covers_every_module_that_validation_runs(tmp_path):
    """A change to any module that reads a manifest into a spec must start a fresh cache:
    every project module a (cold) validation loads is among the sources of the key."""
    from broker.manifest.spec_cache import _SOURCES

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", SOURCES_PROBE, str(REPO / "examples" / "jobs"), str(REPO)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "broker/manifest/direct.py" in out  # the probe did validate
    assert "broker/manifest/sections.py" in out  # and loaded the model
    assert sorted(set(out) - set(_SOURCES)) == []


def test_each_manifest_carries_its_own_document_as_written(tmp_path, monkeypatch):
    """What the store keeps of a manifest: its own document of a multi-document file,
    from its first key to its last line (comments inside included), the same whether the
    file was parsed or came from the cache."""
    from broker.manifest.load import load_manifests

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def body(name: str) -> str:
        text = (REPO / "examples" / "demo" / name).read_text()
        return text[text.index("apiVersion") :].strip().replace("\nrun:", "\n# inside\nrun:")

    one, two = body("eval-eu.yaml"), body("second-team.yaml")
    path = tmp_path / "jobs.yaml"
    path.write_text(f"# two jobs\n---\n{one}\n\n---\n  \n{two}\n---\n")
    for _ in range(2):  # parsed, then from the cache
        texts = [m.text for m in load_manifests([path]).manifests]
        assert texts == [one + "\n", two + "\n"]


def test_a_changed_document_is_validated_again(tmp_path, monkeypatch):
    from broker.manifest.load import load_manifests

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "job.yaml"
    text = (REPO / "examples" / "demo" / "eval-eu.yaml").read_text()
    path.write_text(text)
    assert not load_manifests([path]).errors
    path.write_text(text.replace("L4:1", "L44:1"))  # now invalid: must not come from the cache
    errors = load_manifests([path]).errors
    assert errors and "L44" in str(errors[0])


def test_cached_files_still_meet_the_checks_across_files(tmp_path, monkeypatch):
    """A file from the cache keeps where its name is: a duplicate job is still located."""
    from broker.manifest.load import load_manifests

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    text = (REPO / "examples" / "demo" / "eval-eu.yaml").read_text()
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "a.yaml").write_text(text)
    (jobs / "b.yaml").write_text("# the same job again\n" + text)
    first, second = (load_manifests([jobs]) for _ in range(2))
    assert [str(e) for e in first.errors] == [str(e) for e in second.errors]
    assert len(second.errors) == 1 and "duplicate job" in str(second.errors[0])
    assert str(second.errors[0]).startswith(f"{jobs / 'b.yaml'}:")
    assert [m.line for m in second.manifests] == [m.line for m in first.manifests]


def test_a_bulk_load_is_remembered_whole(tmp_path):
    """A folder of many manifests (far more than a person edits) is cached in one write:
    its first load needs no pydantic (plainly valid documents), its second neither YAML
    nor pydantic, and both give the same manifests."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    text = (REPO / "examples" / "jobs" / "llama-finetune.yaml").read_text()
    for i in range(300):
        (folder / f"job-{i}.yaml").write_text(text.replace("name: llama-ft", f"name: job-{i}"))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    runs = [
        subprocess.run(
            [sys.executable, "-c", PROBE, str(folder)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split(" ", 2)
        for _ in range(2)
    ]
    assert runs[0][:2] == ["False", "True"] and runs[1][:2] == ["False", "False"]
    assert runs[0][2] == runs[1][2]
    assert runs[1][2].count("Manifest(") == 300


def test_manifests_from_one_template_share_their_parts_from_the_cache(tmp_path, monkeypatch):
    """A cached folder decodes each distinct part (requirements, run, ...) once: specs
    equal to the validated ones, the same part objects where the documents agree, and
    their own where they differ."""
    from broker.manifest.load import load_manifests

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "jobs"
    folder.mkdir()
    text = (REPO / "examples" / "jobs" / "llama-finetune.yaml").read_text()
    for i in range(3):
        (folder / f"job-{i}.yaml").write_text(text.replace("name: llama-ft", f"name: job-{i}"))
    (folder / "job-3.yaml").write_text(
        text.replace("name: llama-ft", "name: job-3").replace("hours: 12", "hours: 7")
    )
    validated = [m.spec for m in load_manifests([folder]).manifests]
    cached = [m.spec for m in load_manifests([folder]).manifests]
    assert cached == validated and len(cached) == 4
    assert [s.name for s in cached] == ["job-0", "job-1", "job-2", "job-3"]
    assert all(s.requirements is cached[0].requirements for s in cached)
    assert cached[1].runtime is cached[0].runtime and cached[3].runtime is not cached[0].runtime
    assert cached[3].runtime.estimate_hours == 7 and cached[0].runtime.estimate_hours == 12


def test_a_damaged_file_row_is_parsed_again(tmp_path, monkeypatch):
    """A file's cached row that cannot be read (a part missing) costs a parse, never a
    wrong spec."""
    import sqlite3

    from broker.manifest.load import load_manifests
    from broker.manifest.spec_cache import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "job.yaml"
    path.write_text((REPO / "examples" / "jobs" / "llama-finetune.yaml").read_text())
    validated = load_manifests([path]).manifests
    with sqlite3.connect(cache_dir() / "specs.db") as conn:
        (entries,) = conn.execute("SELECT entries FROM files").fetchone()
        rows = json.loads(entries)
        del rows[0][5][1]["checkpoint"]  # the spec would otherwise lose its checkpoint
        conn.execute("UPDATE files SET entries = ?", (json.dumps(rows),))
        conn.execute("DELETE FROM specs")  # nor may the document's own entry save it
    again = load_manifests([path]).manifests
    assert again == validated and again[0].spec.checkpoint is not None
