"""The validated-manifest cache: exact round trip, and no pydantic on a second load."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.manifest import spec_cache
from broker.spec import Runtime
from tests.broker.test_planner import jobs

REPO = Path(__file__).resolve().parents[2]
deadlines = (
    st.none()
    | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400))
    | st.datetimes(timezones=st.just(UTC))
)


@settings(max_examples=150, deadline=None)
@given(jobs, deadlines)
def test_encode_decode_round_trips_exactly(job, deadline):
    from dataclasses import replace

    job = replace(job, runtime=Runtime(job.runtime.estimate_hours, deadline))
    import json

    assert spec_cache.decode(json.loads(json.dumps(spec_cache.encode(job)))) == job


PROBE = """
import sys
from pathlib import Path
from broker.manifest.load import load_manifests
result = load_manifests([Path(sys.argv[1])])
assert not result.errors, result.errors
print("pydantic" in sys.modules, "yaml" in sys.modules, repr(result.manifests))
"""


def test_second_load_skips_pydantic_and_yaml_and_gives_the_same_manifests(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    target = str(REPO / "examples" / "jobs")
    first = subprocess.run(
        [sys.executable, "-c", PROBE, target], env=env, capture_output=True, text=True, check=True
    ).stdout.split(" ", 2)
    second = subprocess.run(
        [sys.executable, "-c", PROBE, target], env=env, capture_output=True, text=True, check=True
    ).stdout.split(" ", 2)
    assert first[:2] == ["True", "True"] and second[:2] == ["False", "False"]
    assert first[2] == second[2]  # specs, paths, document numbers, lines and digests


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
