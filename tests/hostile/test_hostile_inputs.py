"""The hostile-input run: over a thousand generated bad inputs of every kind broker reads
(`tests.hostile.cases`), each given to every command that reads it. Every command must
exit with the code the case allows (2 for bad input), say so in one `broker: error:`
line (or located lines) naming the file, and where it applies its line; no traceback,
no hang, and no file of the case's folder changed, created or removed.

Every case runs through the real entry point, many in one process per worker
(`tests.hostile.driver`); one case of every (kind, fault, command) also runs as a real
`broker` subprocess (all of them with HOSTILE_ALL_SUBPROCESSES=1, some minutes). The
figures of the run are printed (pytest -s shows them).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.hostile import good
from tests.hostile.cases import Case, Fifo, Folder, Link, all_cases, sample

REPO = Path(__file__).resolve().parents[2]
WORKERS = 2  # the machines have two cores
SUBPROCESS_SECONDS = 60  # a generous bound for one command that does not hang


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every case materialised under one folder, its files hashed; the environment the
    commands run in (user folders of their own, no BROKER_* setting)."""
    root = tmp_path_factory.mktemp("hostile")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    for kind in ("config", "data", "cache", "state"):
        env[f"XDG_{kind.upper()}_HOME"] = str(root / "home" / kind)
    env |= {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "NO_COLOR": "1"}
    for role in ("AUTHOR", "COMMITTER"):
        env |= {f"GIT_{role}_NAME": "Broker Test", f"GIT_{role}_EMAIL": "t@example.invalid"}
    env["COLUMNS"] = "200"
    cases = all_cases()
    states = _state_files(root / "states", env)
    folders = {}
    for number, case in enumerate(cases):
        folder = root / f"{number:04d}"
        _materialise(case, folder, states, env)
        folders[case.id] = folder
    before = {case.id: _tree(folders[case.id]) for case in cases}
    return root, env, cases, folders, before


def test_every_hostile_input_is_refused_in_one_line(world):
    root, env, cases, folders, before = world
    runs = [_run_spec(case, folders[case.id], env) for case in cases]
    started = time.monotonic()
    results = _drive(root, runs, env)
    seconds = time.monotonic() - started
    problems = []
    for case in cases:
        result = results.get(case.id)
        problems += _judge(case, result, before[case.id], folders[case.id])
    codes: dict[str, int] = {}
    for result in results.values():
        codes[str(result["code"])] = codes.get(str(result["code"]), 0) + 1
    print(f"\nhostile run: {len(cases)} cases in {seconds:.1f} s, exit codes {codes}, "
          f"{len(problems)} problem(s)")  # fmt: skip
    assert not problems, "\n".join(problems[:40])


def test_a_sample_as_real_subprocesses(world):
    """One case per (kind, fault, command) through the `broker` executable itself: what the
    in-process driver cannot stand in for (start-up, the exit path, a real hang)."""
    _, env, cases, folders, before = world
    chosen = cases if os.environ.get("HOSTILE_ALL_SUBPROCESSES") else sample(cases)
    started = time.monotonic()

    def one(case: Case) -> list[str]:
        spec = _run_spec(case, folders[case.id], env)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "broker", *spec["argv"]],
                cwd=spec["cwd"],
                env={**env, **spec["env"], "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_SECONDS,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return [f"{case.id}: no answer within {SUBPROCESS_SECONDS} s (a hang)"]
        result = {"code": done.returncode, "stderr": done.stderr, "traceback": ""}
        return _judge(case, result, before[case.id], folders[case.id])

    with ThreadPoolExecutor(WORKERS) as pool:
        problems = [p for found in pool.map(one, chosen) for p in found]
    print(f"\nhostile sample: {len(chosen)} subprocesses in {time.monotonic() - started:.1f} s")
    assert not problems, "\n".join(problems[:40])


def test_the_good_inputs_are_good(tmp_path):
    """The seeds of the mutations pass, so that each case fails for its own fault only."""
    files = {kind: good.good_text(kind) for kind in ("manifest", "pools", "overlays", "policy")}
    for kind, text in files.items():
        (tmp_path / f"{kind}.yaml").write_text(text)
    (tmp_path / "offers.csv").write_text(good.good_text("catalog"))
    (tmp_path / "jobs.csv").write_text(good.good_text("jobs"))
    (tmp_path / good.SPOT_NAME).write_text(good.good_text("spot"))
    m = str(tmp_path / "manifest.yaml")
    runs = [
        ("validate", m),
        ("plan", "--pools", str(tmp_path / "pools.yaml"), m),
        ("plan", "--overlays", str(tmp_path / "overlays.yaml"), m),
        ("plan", "--catalog", str(tmp_path / "offers.csv"), m),
        ("queue", "--state", str(tmp_path / "s.db"), "--policy", str(tmp_path / "policy.yaml")),
        ("simulate", "--jobs", str(tmp_path / "jobs.csv"), "--spot", str(tmp_path / good.SPOT_NAME),
         "--policy", "on-demand"),
    ]  # fmt: skip
    from tests.hostile.driver import run_one

    for argv in runs:
        result = run_one(list(argv), str(tmp_path), {})
        assert result["code"] == 0, (argv, result["stderr"], result["traceback"])


# --- preparing the cases ------------------------------------------------------------------


def _materialise(case: Case, folder: Path, states: dict[str, Path], env: dict[str, str]) -> None:
    folder.mkdir(parents=True)
    (folder / "good.yaml").write_text(good.good_text("manifest"))
    if case.needs == "git":
        _git_repo(folder, env)
    for name, content in case.files:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, Fifo):
            os.mkfifo(target)
        elif isinstance(content, Folder):
            target.mkdir()
        elif isinstance(content, Link):
            target.symlink_to(content.target)
    if case.needs.startswith("state:"):
        source = states[case.needs.removeprefix("state:")]
        if source.is_dir():
            (folder / "state.db").mkdir()
        else:
            shutil.copyfile(source, folder / "state.db")
    if case.needs == "cache":
        _corrupt_cache(folder / "offers.csv", env)


def _git_repo(folder: Path, env: dict[str, str]) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(folder), *args], env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (folder / "jobs").mkdir()
    (folder / "jobs" / "job.yaml").write_text(good.good_text("manifest"))
    git("add", "-A")
    git("commit", "-q", "--no-verify", "-m", "good")


def _corrupt_cache(catalog: Path, env: dict[str, str]) -> None:
    """Garbage where the compiled cache of `catalog` lives (no `.npy` array, if read as is)."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = env["XDG_CACHE_HOME"]
    try:
        from pricing.catalog import _cache_path

        cache = _cache_path(catalog)
    finally:
        if saved is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = saved
    assert cache is not None
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)


def _state_files(folder: Path, env: dict[str, str]) -> dict[str, Path]:
    """A good state file with one job, and from it each broken one of STATE_FAULTS."""
    folder.mkdir(parents=True)
    manifest = folder / "job.yaml"
    manifest.write_text(good.good_text("manifest"))
    from tests.hostile.driver import run_one

    made = run_one(["submit", "--state", str(folder / "good.db"), str(manifest)], str(folder), env)
    assert made["code"] == 0, made
    data = (folder / "good.db").read_bytes()
    rng = random.Random(4)
    out: dict[str, bytes | None] = {
        "truncated": data[: len(data) // 2 + 100],
        "header-only": data[:100],
        "header-cut": data[:16],
        "random": bytes(rng.randrange(256) for _ in range(8192)),
        "text": b"hello, I am not a database\n",
        "flipped-page": data[:100] + bytes(b ^ 0xFF for b in data[100:4096]) + data[4096:],
        "directory": None,
    }
    paths = {name: folder / f"{name}.db" for name in out}
    for name, content in out.items():
        if content is None:
            paths[name].mkdir()
        else:
            paths[name].write_bytes(content)
    shutil.copyfile(folder / "good.db", folder / "newer-schema.db")
    conn = sqlite3.connect(folder / "newer-schema.db")
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'future', '2030-01-01')")
    conn.commit()
    conn.close()  # closed: its -wal is folded back into the file that is copied
    paths["newer-schema"] = folder / "newer-schema.db"
    for name, pragmas in (
        ("foreign", ()),
        ("foreign-id", ("PRAGMA application_id = 1234",)),
        ("foreign-wal", ("PRAGMA journal_mode = WAL",)),
    ):
        conn = sqlite3.connect(folder / f"{name}.db")
        for pragma in pragmas:
            conn.execute(pragma)
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.commit()
        conn.close()
        paths[name] = folder / f"{name}.db"
    return paths


def _run_spec(case: Case, folder: Path, env: dict[str, str]) -> dict:
    file = case.files[0][0] if case.files else "good.yaml"
    mapping = {"{f}": str(folder / file), "{m}": str(folder / "good.yaml")}

    def fill(text: str) -> str:
        text = mapping.get(text, text)
        return text.replace("{d}", str(folder))

    return {
        "id": case.id,
        "argv": [fill(a) for a in case.argv],
        "cwd": str(folder),
        "env": {k: fill(v) for k, v in case.env},
    }


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (not .git) -> its kind and, for a file, its digest."""
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0] == ".git":
            continue
        if path.is_symlink():
            found[str(relative)] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            found[str(relative)] = "dir"
        elif path.is_file():
            found[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(relative)] = "special"
    return found


# --- running and judging ------------------------------------------------------------------


def _drive(root: Path, runs: list[dict], env: dict[str, str]) -> dict[str, dict]:
    """Results by case id: the runs split among WORKERS driver processes."""
    chunks = [runs[i::WORKERS] for i in range(WORKERS)]
    procs = []
    for number, chunk in enumerate(chunks):
        spec, out = root / f"runs-{number}.json", root / f"results-{number}.jsonl"
        spec.write_text(json.dumps(chunk))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.hostile.driver", str(spec), str(out)],
                cwd=REPO,
                env={**env, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    for proc in procs:
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
    results = {}
    for number in range(WORKERS):
        out = root / f"results-{number}.jsonl"
        if out.exists():
            for line in out.read_text().splitlines():
                entry = json.loads(line)
                results[entry["id"]] = entry
    return results


LOCATED = r"(?:{name}:\d+|line \d+)"


def _judge(case: Case, result: dict | None, before: dict[str, str], folder: Path) -> list[str]:
    """What is wrong with one run (nothing, when it behaved)."""
    if result is None:
        return [f"{case.id}: no result (the driver stopped: a hang or a crash)"]
    code, stderr = result["code"], result["stderr"]
    said = f"{case.id}: exit {code}: {stderr.strip()[-300:]!r}"
    problems = []
    if result["traceback"] or "Traceback (most recent call last)" in stderr:
        tail = (result["traceback"] or stderr).strip().splitlines()[-1:]
        problems.append(f"{case.id}: traceback ({code}): {tail}")
    elif code not in case.expect:
        problems.append(f"{said} (expected {case.expect})")
    elif code != 0:
        lines = [line for line in stderr.splitlines() if line.strip()]
        if not lines:
            problems.append(f"{said}: nothing said")
        if sum("broker: error:" in line for line in lines) > 1:
            problems.append(f"{said}: more than one error line")
        if case.names and case.names not in stderr:
            problems.append(f"{said}: does not name {case.names}")
        elif case.located and not re.search(LOCATED.format(name=re.escape(case.names)), stderr):
            problems.append(f"{said}: names no line of {case.names}")
    elif case.names and case.expect == (0,) and case.kind == "config" and case.names not in stderr:
        problems.append(f"{said}: the warning does not name {case.names}")
    after = _tree(folder)
    if after != before:
        changed = sorted(set(after.items()) ^ set(before.items()))[:4]
        problems.append(f"{case.id}: files changed: {changed}")
    return problems
