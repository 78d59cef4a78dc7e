"""Files loaded as copies of a template (broker.manifest.templates) load exactly as parsed.

Drawn folders mix copies of two example manifests with changed names, teams, queues,
spot and interconnect values (valid ones, bad labels, words YAML reads as booleans or
numbers, quoted, commented, with an anchor), copies with a changed command, image or
price (parsed in full), duplicates, a broken file, a non-manifest and CRLF line ends.
Each folder is loaded with templates and with them switched off, each time with an
empty spec cache: the manifests, errors, skipped files and the `broker plan` output
(table and JSON, stdout, stderr and exit code) must be the same.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.manifest import templates
from broker.manifest.load import load_manifests
from tests.cli.runner import run_cli

REPO = Path(__file__).resolve().parents[2]
LLAMA = (REPO / "examples" / "jobs" / "llama-finetune.yaml").read_text()
CPU = (REPO / "examples" / "jobs" / "tokenize-cpu.yaml").read_text()

labels = st.sampled_from(
    ["job-a", "job-b", "x", "a1", "llama-ft", "Bad", "a_b", "-x", "true", "null", "on", "~",
     "123", "0x1f", "1e3", "2026-01-01", "a" * 64, '"job-q"', "'job-s'", "job-c  # note",
     "job-d   ", "&n job-e", "job-f:g", "é-x", "job-g #x"]
)  # fmt: skip
spots = st.sampled_from(["prefer", "only", "never", "bogus", "yes", '"only"'])
interconnects = st.sampled_from(["nvlink", "efa", "infiniband", "pcie", "nvlink # n"])


@st.composite
def llama_copy(draw) -> str:
    text = LLAMA.replace("name: llama-ft", f"name: {draw(labels)}")
    if draw(st.booleans()):
        text = text.replace("team: nlp", f"team: {draw(labels)}")
    if draw(st.booleans()):
        text = text.replace("queue: research", f"queue: {draw(labels)}")
    if draw(st.booleans()):
        text = text.replace("spot: prefer", f"spot: {draw(spots)}")
    if draw(st.booleans()):
        text = text.replace("interconnect: nvlink", f"interconnect: {draw(interconnects)}")
    change = draw(st.sampled_from(["", "command", "image", "price", "gpus", "line", "crlf"]))
    if change == "command":
        text = text.replace("python train.py", "python3 train.py")
    elif change == "image":
        text = text.replace("train:1.4", "train:1.5")
    elif change == "price":
        text = text.replace("max_price_per_hour: 40", "max_price_per_hour: 0.01")  # infeasible
    elif change == "gpus":
        text = text.replace("[H100:8, A100-80GB:8, A100:8]", "[T4:64]")
    elif change == "line":
        text = text.replace("nodes: 1\n", "nodes: 1\n  # a comment line\n")
    elif change == "crlf":
        text = text.replace("\n", "\r\n")
    return text


cpu_copies = labels.map(lambda name: CPU.replace("name: tokenize", f"name: {name}"))
others = st.sampled_from(
    [
        "apiVersion: broker/v1\nname: [broken\n",  # a syntax error
        "kind: Pod\nmetadata: {name: x}\n",  # not a manifest: skipped
        "apiVersion: broker/v2\nname: job-v2\n",  # another version: an error
        LLAMA + "---\n" + CPU,  # two documents: never a template
    ]
)
files = st.lists(
    st.one_of(llama_copy(), cpu_copies, others, st.just(LLAMA)), min_size=1, max_size=9
)


def _write(folder: Path, texts: list[str]) -> None:
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"job-{i:02d}.yaml").write_bytes(text.encode())


def _loaded(folder: Path, monkeypatch, plain: bool):
    with tempfile.TemporaryDirectory() as cache, monkeypatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", cache)
        if plain:
            patch.setattr(templates.Templates, "derive", lambda self, path, text: None)
        result = load_manifests([folder])
    return (
        result.manifests,
        [str(error) for error in result.errors],
        result.skipped,
        result.files,
    )


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(files)
def test_a_folder_loads_the_same_with_templates_and_without(monkeypatch, texts):
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "jobs"
        _write(folder, texts)
        assert _loaded(folder, monkeypatch, False) == _loaded(folder, monkeypatch, True)


def _planned(capsys, monkeypatch, folder: Path, plain: bool, *flags: str):
    with tempfile.TemporaryDirectory() as cache, monkeypatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", cache)
        if plain:
            patch.setattr(templates.Templates, "derive", lambda self, path, text: None)
        return run_cli(capsys, "plan", str(folder), *flags)


@pytest.mark.parametrize("flags", [(), ("-o", "json")])
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=files)
def test_broker_plan_of_a_folder_prints_the_same_with_templates_and_without(
    capsys, monkeypatch, flags, texts
):
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "jobs"
        _write(folder, texts)
        fast = _planned(capsys, monkeypatch, folder, False, *flags)
        plain = _planned(capsys, monkeypatch, folder, True, *flags)
    assert fast == plain


def test_copies_are_derived_not_parsed(tmp_path, monkeypatch):
    """The point of it: a folder of copies parses one file (the rest are derived), and
    a changed command, which is no plain value, is parsed."""
    folder = tmp_path / "jobs"
    _write(folder, [LLAMA.replace("name: llama-ft", f"name: job-{i}") for i in range(5)])
    (folder / "other.yaml").write_text(LLAMA.replace("python train.py", "python3 train.py"))
    parsed = []
    real = templates.Templates.add

    def add(self, doc, *rest):
        parsed.append(doc.path)
        return real(self, doc, *rest)

    monkeypatch.setattr(templates.Templates, "add", add)
    result = load_manifests([folder])
    assert len(result.manifests) == 6 and not result.errors
    assert [path.name for path in parsed] == ["job-00.yaml", "other.yaml"]


@given(st.text(alphabet="abcyesnoNOTrueFLSEnul~0123456789.-_/:x", min_size=1, max_size=8))
def test_a_value_is_taken_as_a_string_only_when_yaml_reads_one(value):
    import yaml

    line = f"name: {value}"
    taken = templates._new_value(line, "name: job", templates.Slot(("name",), 6, 9))
    if taken is not None:
        assert yaml.safe_load(line) == {"name": taken}


@pytest.mark.parametrize("spelled", ["jobs", "jobs/", "./jobs", "jobs/../jobs", "ABS"])
def test_files_of_a_folder_are_keyed_by_their_absolute_path(tmp_path, monkeypatch, spelled):
    """The walk's paths and keys, joined without os.path.join and abspath per file, are
    what those give (a folder named with a trailing slash, `.`, `..`, absolutely)."""
    import os

    from broker.manifest.files import keyed_files

    monkeypatch.chdir(tmp_path)
    for name in ("jobs/a.yaml", "jobs/sub/b.yml", "jobs/sub/deeper/c.yaml", "jobs/x.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    folder = Path(str(tmp_path / "jobs") if spelled == "ABS" else spelled)
    keyed = keyed_files(folder)
    assert [key for _, key in keyed] == [os.path.abspath(file) for file, _ in keyed]
    assert [str(file) for file, _ in keyed] == [
        os.path.join(str(folder), *parts)
        for parts in (("a.yaml",), ("sub", "b.yml"), ("sub", "deeper", "c.yaml"))
    ]


def test_a_template_holding_a_password_is_not_kept_in_the_cache(tmp_path, monkeypatch):
    """The cache keeps a spec's URIs without their user part: a template's data, which
    holds them as written, is not kept when `redact` would mask any of it; its copies
    load the same again (parsed, then derived from the parsed one)."""
    from broker.manifest.spec_cache import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    secret = LLAMA.replace("s3://acme-ckpt/", "s3://ops:HunterPass42@acme-ckpt/")
    folder = tmp_path / "jobs"
    _write(folder, [secret.replace("name: llama-ft", f"name: job-{i}") for i in range(4)])
    first, again = load_manifests([folder]).manifests, load_manifests([folder]).manifests
    assert len(first) == 4 and again == first
    stored = b"".join(path.read_bytes() for path in cache_dir().iterdir())
    assert b"HunterPass42" not in stored and b"acme-ckpt" in stored
