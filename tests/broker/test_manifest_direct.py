"""broker.manifest.direct: a plainly valid document's JobSpec without pydantic, equal to the
model's, and never a spec for a document the model rejects.

The model (`broker.manifest.model.JobManifest`) is the oracle: on generated documents,
valid and broken field by field, `direct_spec` gives exactly the model's spec or None
(the model then validates and locates the error); on valid documents it gives the spec,
so the fast path is the one that runs.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from broker.manifest.direct import FIELDS, direct_spec
from broker.manifest.load import load_manifests
from broker.manifest.model import JobManifest
from broker.manifest.workdir import MANIFEST_DIR
from pricing.userio import bounds

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "examples"  # the manifests' folder: holds jobs/ (a folder) and train.py (a file)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model_spec(document: object):
    """The model's spec of `document`, or None when the model rejects it."""
    try:
        return JobManifest.model_validate(document, context={MANIFEST_DIR: BASE}).to_spec()
    except ValidationError:
        return None


def _doc(bad: int | None = None, count: Iterator[int] | None = None) -> st.SearchStrategy[dict]:
    """Manifest documents whose every field is absent or drawn from values the model
    accepts, but for the field numbered `bad` (in the order of `pick` and `rarely`
    below), drawn from values it rejects: a wrong type, a bound just past, an unknown key."""
    count = itertools.count() if count is None else count
    broken: list[st.SearchStrategy] = []  # the broken field's strategy, and its sections'

    def rarely(good: st.SearchStrategy, wrong: list) -> st.SearchStrategy:
        if next(count) != bad:
            return good
        broken.append(st.sampled_from(wrong))
        return broken[-1]

    def pick(good: list, wrong: list) -> st.SearchStrategy:
        return rarely(st.sampled_from(good), wrong)

    def is_broken(strategy: st.SearchStrategy) -> bool:
        return any(strategy is b for b in broken)

    def section(fields: dict, required: dict | None = None) -> st.SearchStrategy:
        """A mapping of `required` and some of `fields` (always the broken one)."""
        fields = {**fields, "unknown_key": pick([None], [1])}
        required = dict(required or {})
        for key in [k for k, v in fields.items() if is_broken(v)]:
            required[key] = fields.pop(key)
        made = st.fixed_dictionaries(required, optional=fields).map(
            lambda d: {k: v for k, v in d.items() if not (k == "unknown_key" and v is None)}
        )
        if any(is_broken(v) for v in required.values()):
            broken.append(made)
        return made

    hours, money, size = bounds.MAX_HOURS, bounds.MAX_MONEY, bounds.MAX_SIZE_GB
    number_bad = [True, "2", None, math.nan, math.inf, 2**60, [1]]
    resources = section(
        {
            "accelerators": pick(
                ["A100:8", ["H100:8", "A100-80GB:8"], "T4:1", "a100:2", "L4:0.5", None],
                [[], ["A100:1", "A100:2"], "X9:1", 5, "A100:inf", "A100:2000", [3]],
            ),
            "cpus": pick([8, "8+", 2.5, "16", None], [0, -1, "x", 1e9, True, math.nan]),
            "memory": pick([64, "32+", None], ["0+", False, [64]]),
            "nodes": pick([1, 2, bounds.MAX_NODES], [0, 1.0, True, None, bounds.MAX_NODES + 1]),
            "interconnect": pick(["nvlink", "efa", "infiniband", None], ["x", 1, "NVLink"]),
        }
    )
    clouds = {
        "clouds": pick([["aws"], ["aws", "gcp"], None], [[], ["x"], "aws", [None]]),
        "exclude_clouds": pick(
            [["azure"], None], [["aws", "gcp", "azure", "onprem"], "gcp", ["nope"]]
        ),
    }
    where = {
        "regions": pick([["us-*"], ["us-east-1", "europe-*"], []], [[""], ["a:b"], "us-*"]),
        "countries": pick([["US"], ["de", " NL "], []], [["uk"], [False], ["EU"], ["USA"]]),
        "spot": pick(["never", "prefer", "only"], [False, "yes", None, "Only"]),
        "max_price_per_hour": pick([10, 2.5, money, None], [0, -1, money * 2, *number_bad]),
    }
    choices = [
        section({**where, "clouds": clouds["clouds"]}),
        section({**where, "exclude_clouds": clouds["exclude_clouds"]}),
    ]  # an allow-list or a deny-list, or (broken) both
    if next(count) == bad:
        broken.append(section({**where, **clouds}))
        choices = [broken[-1]]
    placement = st.one_of(*[c for c in choices if is_broken(c)] or choices)
    if any(map(is_broken, choices)):
        broken.append(placement)
    run_fields = {
        "command": pick(["python3 train.py"], ["", 3, ["a"], None]),
        "image": pick(["nvcr.io/pytorch:24.01", None], ["", 1]),
        "env": pick(
            [{}, {"A": "1", "B_2": ""}],
            [{"A": 1}, {"1A": "x"}, {"BROKER_X": "y"}, {3: "x"}, None, []],
        ),
        "workdir": pick([".", "jobs", None], ["nowhere", "train.py", "", 7]),
        "setup": pick(["pip install -r req.txt", None], ["", 2]),
    }
    # A command always (setup needs one), given first; now and then a bad one or none.
    command = run_fields.pop("command")
    run = section(run_fields, {"command": command})
    runtime = section(
        {
            "estimate_hours": pick([1, 2.5, hours], [0, -1, hours + 1, *number_bad]),
            "deadline": pick(
                [
                    "36h",
                    "1d12h",
                    "90m",
                    "2030-07-01T18:00:00Z",
                    datetime(2030, 7, 1, tzinfo=UTC),
                    datetime(2031, 1, 1, tzinfo=timezone(timedelta(hours=2))),
                    None,
                ],
                [
                    "0m",
                    "2030-07-01T18:00:00",
                    date(2030, 7, 1),
                    5,
                    "x",
                    "100000d",
                    "9999-12-31T23:59:59-01:00",
                    datetime(2030, 1, 1),
                ],
            ),
        }
    )
    place = pick(
        ["aws:us-east-1", "gcp:europe-west4", "onprem:lab", None],
        ["aws:nowhere", "x:y", "aws:", 3, "aws"],
    )
    uri = pick(
        ["s3://bucket/ckpt/", "gs://b/x", "file:///data/x", "s3://user:pw@b/c"],
        ["s3://", "file://x", "http://x", 3, "s3://b c"],
    )
    checkpoint = section(
        {
            "interval_minutes": pick([30, 0.5, hours * 60], [0, hours * 60 + 1, *number_bad]),
            "size_gb": pick([0, 0.0, 50, size], [-1, size + 1, *number_bad]),
            "location": place,
        },
        {"uri": uri},
    )
    data_input = section(
        {"location": place}, {"uri": uri, "size_gb": pick([0, 10, 2.5], [-1, None, True])}
    )
    recovery = section(
        {
            "max_restarts_on_error": pick(
                [0, 3, bounds.MAX_COUNT], [-1, True, 1.0, bounds.MAX_COUNT + 1]
            ),
            "recover_on_exit_codes": pick(
                [[], [137], [1, 255]], [[0], [256], [True], "137", [1.0]]
            ),
        }
    )
    label = pick(["a", "llama-ft", "team-7"], ["A", "-x", "", 3, None, True, "a" * 64])
    top = {
        "queue": label,
        "priority": pick([0, 5, -3, 2**31 - 1], [2**31, 2.0, True, None, "1"]),
        "resources": rarely(resources, [None, "A100:8"]),
        "placement": placement,
        "runtime": runtime,
        "checkpoint": rarely(
            checkpoint if is_broken(checkpoint) else st.one_of(st.none(), checkpoint),
            ["s3://b/c", []],
        ),
        "data": rarely(
            st.lists(data_input, min_size=is_broken(data_input), max_size=2),
            [None, {}, "s3://b/d"],
        ),
        "budget": section(
            {"max_cost": pick([200, 5000.5, money, None], [0, money + 1, *number_bad])}
        ),
        "recovery": recovery,
    }
    top = {"apiVersion": st.just("broker/v1"), "name": label, "team": label, "run": run} | top
    required = {key: top.pop(key) for key in ("apiVersion", "name", "team", "run")}
    return section(top, required)


def _fields_drawn() -> int:
    """How many fields `_doc` draws (each can be the broken one)."""
    count = itertools.count()
    _doc(count=count)
    return next(count)


BROKEN = st.integers(0, _fields_drawn() - 1).flatmap(lambda field: _doc(bad=field))


@settings(SETTINGS, max_examples=800)
@given(BROKEN)
def test_the_direct_spec_is_the_models_or_none(document):
    """Never a spec of its own: the model's spec, or None (always None when the model
    rejects the document)."""
    expected = _model_spec(document)
    found = direct_spec(document, BASE)
    if expected is None:
        assert found is None
    else:
        assert found is None or found == expected


@SETTINGS
@given(_doc())
def test_a_valid_document_is_read_directly_to_the_models_spec(document):
    """Every value the model accepts, each field given or left to its default (so the
    defaults and the bounds are the model's): the direct path reads it, to the same spec."""
    expected = _model_spec(document)
    assert expected is not None, document  # the strategy makes valid documents only
    assert direct_spec(document, BASE) == expected


def test_each_section_has_the_models_fields():
    def fields(model: type[BaseModel]) -> frozenset[str]:
        return frozenset(model.model_fields)

    sections = {
        "job": JobManifest,
        **{
            name: info.annotation
            for name, info in JobManifest.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        },
    }
    from broker.manifest.sections import CheckpointSection, DataInputSection

    sections |= {"checkpoint": CheckpointSection, "data": DataInputSection}
    assert {name: fields(model) for name, model in sections.items()} == FIELDS


PROBE = """
import sys
from pathlib import Path
from broker.manifest.load import load_manifests
result = load_manifests([Path(p) for p in sys.argv[1:]])
assert result.manifests, result.errors
print("pydantic" in sys.modules, len(result.manifests))
"""


def test_the_example_manifests_load_without_pydantic_to_the_models_specs(tmp_path):
    """The shipped examples are read directly (a fresh cache, a new process: no
    pydantic imported), and each spec is the model's."""
    folders = [REPO / "examples" / name for name in ("jobs", "demo", "distributed")]
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    for folder in folders:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(folder)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out[0] == "False" and int(out[1]) > 0, (folder, out)
    import yaml

    for path in sorted(p for folder in folders for p in folder.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("apiVersion") == "broker/v1":
                model = JobManifest.model_validate(
                    document, context={MANIFEST_DIR: path.parent}
                ).to_spec()
                assert direct_spec(document, path.parent) == model, path


@pytest.mark.parametrize(
    "text, where",
    [
        ("resources: {accelerators: A100:8, gpus: 2}", "resources.gpus"),
        ("runtime: {estimate_hours: 0}", "runtime.estimate_hours"),
        ("placement: {spot: no}", "placement.spot"),
    ],
)
def test_a_document_the_direct_path_declines_gets_the_models_located_error(tmp_path, text, where):
    """What the direct path declines, the model validates: its error, at file:line."""
    path = tmp_path / "job.yaml"
    path.write_text(f"apiVersion: broker/v1\nname: a\nteam: t\nrun: {{command: x}}\n{text}\n")
    result = load_manifests([path])
    assert not result.manifests and len(result.errors) == 1
    assert str(result.errors[0]).startswith(f"{path}:5:") and where in str(result.errors[0])
