"""Classes of hostile input the generated run (`tests/hostile`) did not reach, each
through the real `broker` executable: a value no Python value holds, a value so long
that quoting it back hung the error, an output path that is no file, a path the system
refuses to look up, numbers given to flags that no flag means, a CSV field the csv
module refuses. Every case must exit 2 with one line naming the file or flag, with no
traceback, and leave the folder as it was (no state created, nothing written).

Each runs as a subprocess with a timeout: a hang (a redaction that took minutes) fails
as a hang, not as a slow suite.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import good

REPO = Path(__file__).resolve().parents[2]
SKY_TASK = REPO / "tests" / "fakes" / "skypilot_tasks" / "minimal.yaml"
NO_HANG_SECONDS = 60  # a generous bound for one command that does not hang
DIGITS = "9" * 5000  # over Python's 4,300-digit limit for int("...")


def _broker(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    for kind in ("config", "data", "cache", "state"):
        env[f"XDG_{kind.upper()}_HOME"] = str(folder / ".home" / kind)
    env |= {"PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "broker", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=NO_HANG_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def _tree(folder: Path, skip: tuple[str, ...] = (".home",)) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        if relative.startswith(skip):
            continue
        if path.is_symlink() or not path.is_file():
            found[relative] = "link" if path.is_symlink() else "other"
        else:
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _refused(folder: Path, argv: tuple[str, ...], names: str) -> str:
    """Run `argv` in `folder`; assert the refusal; return stderr."""
    before = _tree(folder)
    done = _broker(folder, *argv)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, (done.returncode, done.stderr[-1000:])
    assert names in done.stderr, done.stderr[-1000:]
    assert all(len(line) < 2000 for line in done.stderr.splitlines()), "an unreadable line"
    assert _tree(folder) == before, "the command changed the folder"
    return done.stderr


def _manifest(**changes: object) -> str:
    data = dict(good.MANIFEST)
    data.update(changes)
    return good.yaml_text(data)


# --- values no Python value holds: a date that is no date, an integer of 5,000 digits ----

UNBUILDABLE = {
    "manifest-date": ("job.yaml", _manifest().replace("36h", "2026-02-30"), ("validate",)),
    "manifest-int": ("job.yaml", _manifest().replace("priority: 1", f"priority: {DIGITS}"),
                     ("validate",)),
    "pools-int": ("pools.yaml", f"pools:\n- name: {DIGITS}\n", ("offers", "--pools")),
    "skypilot-int": ("task.yaml", f"name: x\nnum_nodes: {DIGITS}\nrun: echo\n",
                     ("import", "skypilot")),
    "toml-int": ("broker.toml", f"freshness_days = {DIGITS}\n", ("offers", "--summary")),
    "spot-json-int": (good.SPOT_NAME, f'{{"metadata": {{"gap_seconds": {DIGITS}}}, "data": [1]}}',
                      ("simulate", "--jobs", "synthetic:2", "--spot")),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(UNBUILDABLE))
def test_a_value_no_python_value_holds_is_a_located_error(tmp_path, case):
    name, text, argv = UNBUILDABLE[case]
    (tmp_path / name).write_text(text)
    file_args = () if name == "broker.toml" else (str(tmp_path / name),)
    said = _refused(tmp_path, (*argv, *file_args), name)
    assert f"{name}:" in said and "Exceeds the limit" not in said, said


# --- values so long that the error line hung (redaction was quadratic) -------------------


LONG = "x" * 100_000


@pytest.mark.parametrize(
    "word", [LONG, "a." * 50_000, "password" * 12_500, "eyJ" + "a." * 50_000], ids=range(4)
)
def test_a_long_value_is_refused_in_one_short_line(tmp_path, word):
    (tmp_path / "job.yaml").write_text(_manifest(name=word))
    said = _refused(tmp_path, ("validate", str(tmp_path / "job.yaml")), "job.yaml")
    assert "characters)" in said, said[-500:]  # the value is cut, saying how long it was


def test_a_huge_catalog_cell_is_refused_in_one_short_line(tmp_path):
    header, first, *_ = good.catalog_csv().splitlines()
    row = first.split(",")
    row[0] = "x" * 20_000_000
    (tmp_path / "offers.csv").write_text(f"{header}\n{','.join(row)}\n")
    _refused(tmp_path, ("offers", "--catalog", str(tmp_path / "offers.csv")), "offers.csv")


def test_a_trace_field_over_the_csv_limit_is_a_located_error(tmp_path):
    (tmp_path / "jobs.csv").write_text(good.JOBS_TRACE + "x" * 200_000 + "\n")
    argv = ("simulate", "--jobs", str(tmp_path / "jobs.csv"), "--spot", "synthetic")
    said = _refused(tmp_path, argv, "jobs.csv")
    assert "field larger than field limit" in said


# --- output paths that are no file, or the input itself -----------------------------------


def _special(target: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
        (target / "kept").write_text("kept")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_output_that_is_no_file_is_refused_not_replaced(tmp_path, kind):
    (tmp_path / "task.yaml").write_text(SKY_TASK.read_text())
    _special(tmp_path / "out", kind)
    argv = ("import", "skypilot", str(tmp_path / "task.yaml"), "-o", str(tmp_path / "out"))
    _refused(tmp_path, argv, "out")
    sky = REPO / "tests" / "fakes" / "skypilot_small"
    _refused(tmp_path, ("pricing", "import", str(sky), "--into", str(tmp_path / "out")), "out")


def test_import_skypilot_never_writes_over_its_task(tmp_path):
    (tmp_path / "task.yaml").write_text(SKY_TASK.read_text())
    task = str(tmp_path / "task.yaml")
    _refused(tmp_path, ("import", "skypilot", task, "-o", task), "task.yaml")


# --- paths the system refuses to look up ---------------------------------------------------


def test_a_path_too_long_to_look_up_is_bad_input(tmp_path):
    _refused(tmp_path, ("validate", str(tmp_path / ("a" * 300 + ".yaml"))), "a" * 100)
    workdir = "w" * 5000
    (tmp_path / "job.yaml").write_text(
        _manifest(run={"command": "python3 train.py", "workdir": workdir})
    )
    said = _refused(tmp_path, ("validate", str(tmp_path / "job.yaml")), "job.yaml")
    assert "run.workdir" in said


# --- numbers no flag means ------------------------------------------------------------------

SIM = ("simulate", "--jobs", "synthetic:2", "--spot", "synthetic")
NUMBER_FLAGS = [
    (("plan", "{m}", "--top"), "--top"),
    (("offers", "--limit"), "--limit"),
    (("offers", "--max-price"), "--max-price"),
    (("offers", "--min-gpu-memory"), "--min-gpu-memory"),
    (("jobs", "--state-file", "{d}/state.db", "--limit"), "--limit"),
    (("run", "--once", "--state", "{d}/state.db", "--lease-seconds"), "--lease-seconds"),
    (("run", "--once", "--state", "{d}/state.db", "--poll"), "--poll"),
    (("run", "--once", "--state", "{d}/state.db", "--sandbox-reclaim-rate"),
     "--sandbox-reclaim-rate"),
    (("run", "--once", "--state", "{d}/state.db", "--sandbox-time-scale"),
     "--sandbox-time-scale"),
    ((*SIM, "--restart-hours"), "--restart-hours"),
]  # fmt: skip
BAD_NUMBERS = ["nan", "inf", "-1", "1e400", "99999999999999999999"]


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize(("argv", "flag"), NUMBER_FLAGS, ids=[" ".join(a) for a, _ in NUMBER_FLAGS])
def test_a_number_no_flag_means_exits_2_naming_the_flag(tmp_path, argv, flag, value):
    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    filled = [a.replace("{m}", str(tmp_path / "good.yaml")).replace("{d}", str(tmp_path))
              for a in argv]  # fmt: skip
    _refused(tmp_path, (*filled, value), flag)
    assert not (tmp_path / "state.db").exists(), "a refused command created the state"


@pytest.mark.parametrize("flag", ["--until", "--since"])
def test_the_last_day_of_the_calendar_is_bad_input(tmp_path, flag):
    argv = ("jobs", "--state-file", str(tmp_path / "state.db"), flag, "9999-12-31")
    done = _broker(tmp_path, *argv)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 2), done.stderr  # --since 9999-12-31 is a date, --until not
    if done.returncode == 2:
        assert flag in done.stderr


# --- settings and addresses that are no value ----------------------------------------------

GOOD = "{d}/good.yaml"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (("submit", GOOD, "--state", "postgresql://[bad"), "not a database URL"),
        (("queue", "--state", "postgresql://u:pw@h:99999/db"), "not a database URL"),
        (("state", "migrate", "--from", "{d}/s.db", "--to", "postgresql://[bad"), "[bad"),
        (("simulate", "--jobs", "synthetic:99999999999999999999", "--spot", "synthetic"),
         "--jobs"),
        (("simulate", "--jobs", "synthetic:-1", "--spot", "synthetic"), "--jobs"),
    ],
    ids=["url-ipv6", "url-port", "migrate-url", "synthetic-huge", "synthetic-negative"],
)  # fmt: skip
def test_an_address_or_count_that_is_no_value_exits_2(tmp_path, argv, names):
    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    said = _refused(tmp_path, tuple(a.replace("{d}", str(tmp_path)) for a in argv), names)
    assert "pw" not in said, "the URL's password was shown"


@pytest.mark.parametrize("value", ["'abc'", "nan", "inf", "-1"])
def test_a_workdir_limit_that_is_no_size_is_a_settings_error(tmp_path, value):
    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    (tmp_path / "broker.toml").write_text(f"workdir_limit_mb = {value}\n")
    argv = ("submit", str(tmp_path / "good.yaml"), "--state", str(tmp_path / "state.db"))
    said = _refused(tmp_path, argv, "broker.toml")
    assert "workdir_limit_mb" in said


def test_migrating_a_state_file_of_a_newer_broker_is_bad_input(tmp_path):
    import sqlite3

    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    made = _broker(tmp_path, "submit", "--state", str(tmp_path / "s.db"), "good.yaml")
    assert made.returncode == 0, made.stderr
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'future', '2030-01-01')")
    conn.commit()
    conn.close()
    argv = (
        "state",
        "migrate",
        "--from",
        str(tmp_path / "s.db"),
        "--to",
        "postgresql://u@127.0.0.1:1/db",
    )
    said = _refused(tmp_path, argv, "s.db")  # exit 1 before: the file is the fault
    assert "newer" in said


# --- every option of every command, given a value of each hostile class --------------------
#
# The commands are read from the app itself (`broker --help`'s tree), so that a command or
# option added later is swept too: each option is given every hostile value of its class
# (a path, a number, a date, a choice, free text) on a command line that is otherwise good,
# all through the real entry point in one driver process per core (tests.hostile.driver).

# The good command line of each command (`{m}` a good manifest, `{d}` the run's folder);
# a command missing here fails the test, so that none goes unswept.
BASE: dict[str, tuple[str, ...]] = {
    "offers": (),
    "validate": ("{m}",),
    "schema": (),
    "plan": ("{m}",),
    "estimate": ("{m}",),
    "ci": ("--base", "main", "jobs"),
    "submit": ("--state", "{d}/state.db", "{m}"),
    "rerun": ("hostile", "--state", "{d}/state.db"),
    "jobs": ("--state-file", "{d}/state.db"),
    "queue": ("--state", "{d}/state.db"),
    "status": ("hostile", "--state", "{d}/state.db"),
    "cancel": ("hostile", "--state", "{d}/state.db"),
    "logs": ("hostile", "--state", "{d}/state.db"),
    "run": ("--once", "--state", "{d}/state.db"),
    "demo": ("--state", "{d}/state.db"),
    "cost-report": ("--state", "{d}/state.db"),
    "check": ("--timeout", "1"),
    "simulate": ("--jobs", "synthetic:2", "--spot", "synthetic"),
    "import skypilot": ("{d}/task.yaml",),
    "pricing import": ("{sky}", "--into", "{d}/out.csv"),
    "pricing refresh": ("--catalog", "{d}/refreshed.csv"),
    "pricing status": (),
    "sandbox interrupt": ("hostile", "--state", "{d}/state.db"),
    "pools import": ("--slurm",),
    # a host that cannot be bound: a value that passes every check ends there, not serving
    "metrics serve": ("--host", "host.invalid"),
    "state migrate": ("--from", "{d}/state.db", "--to", "postgresql://u@127.0.0.1:1/db"),
}
# What each command may exit with besides 0 and 2 (DESIGN.md's exit codes, as its docs say).
EXITS: dict[str, set[int]] = {
    "plan": {3}, "estimate": {3}, "ci": {1, 3, 4}, "submit": {3, 4}, "run": {1},
    "check": {1, 5}, "pricing refresh": {1, 5}, "pools import": {1, 5}, "state migrate": {1},
    "demo": {1},
}  # fmt: skip
# Commands that only read: whatever they are given, they leave the state and the folder.
READ_ONLY = {
    "offers", "validate", "schema", "plan", "estimate", "ci", "jobs", "queue", "status",
    "logs", "cost-report", "check", "simulate", "pricing status", "metrics serve",
}  # fmt: skip
# Commands whose good line reads a state holding one job (`hostile`, queued): their
# hostile values then reach past "no state file" (a job name, a filter, a page).
WITH_A_JOB = {"status", "cancel", "logs", "rerun", "sandbox interrupt", "jobs", "queue",
              "cost-report", "metrics serve", "state migrate"}  # fmt: skip
# Options of the read-only commands that name a file to write (made with its folders).
WRITTEN = {"--html", "--comment-file", "--plot"}
# Options not swept, and why.
UNSWEPT = {
    "metrics serve --host": "an address that binds would serve until stopped",
    "pricing refresh --region": "a region passes to the network fetch (seconds a value)",
}
PATHS = ["", ".", "{d}", "{d}/missing/none.yaml", "a\x00b", "p" * 300, "ünï/コード.yaml",
         "/dev/null"]  # fmt: skip
NUMBERS = ["", "nan", "inf", "-inf", "-1", "1e400", "9" * 5000, "99999999999999999999", "١٢"]
DATES = ["", "9999-12-31", "0001-01-01", "2026-02-30", "99999-01-01", "1e9", "now"]
TEXTS = ["", "a\x00b", "ünï", "x" * 5000, "-1", "nan"]
DATE_OPTIONS = {"--since", "--until", "--as-of", "--base", "--head"}
PATH_TEXT_OPTIONS = {"--state", "--state-file", "--identity-file", "--known-hosts", "--policy",
                     "--jobs", "--spot", "--to"}  # fmt: skip


def _commands() -> dict[str, object]:
    """Every leaf command of the app by its words ("pricing import")."""
    import typer
    from typer.core import TyperGroup

    from broker.cli.main import build_app

    found = {}

    def walk(command: object, words: tuple[str, ...]) -> None:
        if not isinstance(command, TyperGroup):
            found[" ".join(words)] = command
            return
        for name, sub in command.commands.items():
            walk(sub, (*words, name))

    walk(typer.main.get_command(build_app()), ())
    return found


def _values(param: object) -> list[str]:
    """The hostile values of a parameter's class."""
    kind = type(param.type).__name__  # type: ignore[attr-defined]
    name = param.opts[0]  # type: ignore[attr-defined]
    if kind == "TyperPath" or name in PATH_TEXT_OPTIONS:
        return PATHS
    if kind in ("IntParamType", "FloatParamType"):
        return NUMBERS
    if name in DATE_OPTIONS:
        return DATES
    return TEXTS


def _sweep() -> list[tuple[str, str, tuple[str, ...]]]:
    """(command, what is hostile, argv) for every value of every swept parameter."""
    from typer.core import TyperOption

    runs = []
    for words, command in sorted(_commands().items()):
        base = BASE[words]
        for param in command.params:  # type: ignore[attr-defined]
            flag = isinstance(param, TyperOption) and param.is_flag
            if flag or param.opts[0] in ("--help", "-h"):
                continue
            if f"{words} {param.opts[0]}" in UNSWEPT:
                continue
            for number, value in enumerate(_values(param)):
                if param.param_type_name == "argument":
                    argv = _with_argument(base, value, param.nargs == -1)
                else:
                    argv = (*_without(base, param.opts), param.opts[0], value)
                runs.append((words, f"{param.opts[0]}#{number}", (*words.split(), *argv)))
    return runs


def _with_argument(base: tuple[str, ...], value: str, many: bool) -> tuple[str, ...]:
    """`base` with its (first) positional argument replaced by `value`."""
    positional = [i for i, a in enumerate(base) if not a.startswith("-")
                  and (i == 0 or not base[i - 1].startswith("-"))]  # fmt: skip
    if not positional:
        return (*base, "--", value) if many else (*base, value)
    at = positional[0]
    return (*base[:at], value, *base[at + 1 :])


def _without(base: tuple[str, ...], opts: list[str]) -> tuple[str, ...]:
    """`base` without the option `opts` names (and its value)."""
    out, skip = [], False
    for arg in base:
        if skip:
            skip = False
        elif arg in opts:
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def test_every_command_is_in_the_sweep():
    assert sorted(_commands()) == sorted(BASE), "a command has no good command line in BASE"


def _seed(folder: Path, words: str, env: dict[str, str], state: Path | None = None) -> None:
    """The good inputs a command's good line reads (a git work tree for `ci`, a copy of
    `state` for the commands of WITH_A_JOB)."""
    (folder / ".home" / "cache").mkdir(parents=True)
    (folder / "good.yaml").write_text(good.good_text("manifest"))
    (folder / "task.yaml").write_text(SKY_TASK.read_text())
    if state is not None and words in WITH_A_JOB:
        (folder / "state.db").write_bytes(state.read_bytes())
    if words == "ci":
        (folder / "jobs").mkdir()
        (folder / "jobs" / "job.yaml").write_text(good.good_text("manifest"))
        for args in (("init", "-q", "-b", "main"), ("add", "-A"),
                     ("commit", "-q", "--no-verify", "-m", "good")):  # fmt: skip
            subprocess.run(["git", "-C", str(folder), *args], env=env, check=True,
                           capture_output=True)  # fmt: skip


def _sweep_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    for kind in ("config", "data", "cache", "state"):
        env[f"XDG_{kind.upper()}_HOME"] = str(root / "home" / kind)
    env |= {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "NO_COLOR": "1",
            "COLUMNS": "200", "PYTHONPATH": str(REPO)}  # fmt: skip
    for role in ("AUTHOR", "COMMITTER"):
        env |= {f"GIT_{role}_NAME": "Broker Test", f"GIT_{role}_EMAIL": "t@example.invalid"}
    return env


def _user_tree(folder: Path) -> dict[str, str]:
    """The run's folder with its user folders (state, data, config), not its caches nor
    its git metadata."""
    return _tree(folder, skip=(".home/cache", ".git"))


def _one_job_state(root: Path, env: dict[str, str]) -> Path:
    """A state file holding the good manifest's job, queued (made once, copied)."""
    (root / "seed").mkdir(parents=True)
    (root / "seed" / "good.yaml").write_text(good.good_text("manifest"))
    argv = ["submit", "--state", str(root / "seed" / "state.db"), str(root / "seed" / "good.yaml")]
    done = subprocess.run(
        [sys.executable, "-m", "broker", *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return root / "seed" / "state.db"


def _sweep_problems(root: Path, env: dict[str, str], runs: list, with_job: bool = False):
    """Run the sweep (two driver processes) and judge each run: problems, specs, results."""
    import json

    state = _one_job_state(root, env) if with_job else None
    specs, befores = [], {}
    for number, (words, _, argv, *extra) in enumerate(runs):
        folder = root / f"{number:05d}"
        _seed(folder, words, env, state)
        own = extra[0] if extra else {}  # a run's own files (a broker.toml), environment
        for name, text in own.get("files", {}).items():
            (folder / name).write_text(text)
        fill = {"{m}": str(folder / "good.yaml"), "{sky}": str(REPO / "tests" / "fakes" /
                "skypilot_small")}  # fmt: skip
        filled = [fill.get(a, a).replace("{d}", str(folder)) for a in argv]
        homes = {f"XDG_{kind.upper()}_HOME": str(folder / ".home" / kind)
                 for kind in ("config", "data", "cache", "state")}  # fmt: skip
        homes["MPLCONFIGDIR"] = str(folder / ".home" / "cache" / "matplotlib")
        homes |= {k: v.replace("{d}", str(folder)) for k, v in own.get("env", {}).items()}
        specs.append({"id": f"{number:05d}", "argv": filled, "cwd": str(folder), "env": homes})
        befores[specs[-1]["id"]] = _user_tree(folder)
    procs = []
    for worker in range(2):
        (root / f"runs-{worker}.json").write_text(json.dumps(specs[worker::2]))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.driver", str(root / f"runs-{worker}.json"),
             str(root / f"results-{worker}.jsonl"), "--alarm", "30"],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        ))  # fmt: skip
    for proc in procs:
        proc.wait(timeout=1800)
    results = {}
    for worker in range(2):
        out = root / f"results-{worker}.jsonl"
        for line in out.read_text().splitlines() if out.exists() else ():
            entry = json.loads(line)
            results[entry["id"]] = entry
    problems = []
    for spec, (words, what, *_) in zip(specs, runs, strict=True):
        result = results.get(spec["id"])
        label = f"{words} {what} {[a[:40] for a in spec['argv']]}"
        if result is None:
            problems.append(f"{label}: no result")
            continue
        code, stderr = result["code"], result["stderr"]
        if result["traceback"] or "Traceback" in stderr:
            problems.append(f"{label}: traceback {result['traceback'].strip().splitlines()[-1:]}")
        elif code not in {0, 2} | EXITS.get(words, set()):
            problems.append(f"{label}: exit {code}: {stderr.strip()[-200:]!r}")
        elif code != 0 and not (stderr.strip() or result["stdout"].strip()):
            problems.append(f"{label}: exit {code} saying nothing")
        elif code == 2 and sum("broker: error:" in x for x in stderr.splitlines()) > 1:
            problems.append(f"{label}: more than one error line: {stderr.strip()[-300:]!r}")
        if code == 2 and any(len(x) > 2000 for x in stderr.splitlines()):
            problems.append(f"{label}: an unreadable line")
        given = [*spec["argv"], Path(spec["cwd"]).name]  # `.` is named as the folder it is
        if code == 2 and not _names_it(stderr, what.split("#")[0], given):
            problems.append(f"{label}: the error names neither the flag nor the value: "
                            f"{stderr.strip()[-300:]!r}")  # fmt: skip
        wrote = code == 0 and what.split("#")[0] in WRITTEN  # the file it was asked for
        if code == 2 or (words in READ_ONLY and not wrote):  # 1 (a failed source) may record it
            after = _user_tree(Path(spec["cwd"]))
            if after != befores[spec["id"]]:
                changed = sorted(set(after) ^ set(befores[spec["id"]]))[:3]
                problems.append(f"{label}: exit {code} changed the files: {changed}")
    return problems, specs, results


def _names_it(stderr: str, name: str, argv: list[str]) -> bool:
    """Whether a refusal names what it refused: the flag (an argument: its position), or
    a value of the command line (its start: a file, a job, the state the command needs);
    click's usage errors name the flag."""
    said = stderr.lower()
    words = [name] if name.startswith("-") else ["argument", "broker.toml", "BROKER_"]
    words += [a[:30] for a in argv[1:] if a and not a.startswith("--")]
    return "usage:" in said or any(word.lower() in said for word in words)


def test_every_option_given_a_hostile_value_exits_as_documented(tmp_path):
    env = _sweep_env(tmp_path)
    runs = _sweep()
    problems, _, _ = _sweep_problems(tmp_path, env, runs)
    print(f"\nhostile sweep: {len(runs)} runs, {len(problems)} problem(s)")
    assert not problems, "\n".join(problems[:60])


def test_every_option_given_a_hostile_value_with_a_job_in_the_state(tmp_path):
    """The commands on jobs and on the state again, over a state holding one job."""
    env = _sweep_env(tmp_path)
    runs = [run for run in _sweep() if run[0] in WITH_A_JOB]
    problems, _, _ = _sweep_problems(tmp_path, env, runs, with_job=True)
    print(f"\nhostile sweep: {len(runs)} runs, {len(problems)} problem(s)")
    assert not problems, "\n".join(problems[:60])


# --- the leftovers of the last sweep, each as its class -------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (("validate", ""), "argument 2 is empty"),
        (("plan", "--catalog", "", "good.yaml"), "--catalog: the value is empty"),
        (("offers", "--pools="), "--pools: the value is empty"),
        (("import", "skypilot", "task.yaml", "-o", ""), "-o: the value is empty"),
        (("validate", "good.yaml", "--output", "json", ""), "argument 5 is empty"),
        (("validate", "--", ""), "argument 3 is empty"),
    ],
    ids=["validate", "catalog", "equals", "short-flag", "after-a-value", "after-dashes"],
)
def test_an_empty_argument_is_refused_by_its_position_or_flag(tmp_path, argv, names):
    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    (tmp_path / "task.yaml").write_text(SKY_TASK.read_text())
    _refused(tmp_path, argv, names)


def test_a_nul_byte_in_an_argument_is_refused_before_any_command_runs():
    from tests.hostile.driver import run_one

    for argv in (["plan", "a\x00b"], ["queue", "--state", "s\x00.db"], ["offers", "--gpu=\x00"]):
        done = run_one(argv, str(REPO), {})
        assert done["code"] == 2 and not done["traceback"], done
        assert "NUL byte" in done["stderr"], done["stderr"]


@pytest.mark.parametrize(
    "argv",
    [
        ("sandbox", "interrupt", "NOSUCH"),
        ("cancel", "NOSUCH"),
        ("rerun", "NOSUCH"),
        ("sandbox", "interrupt", "NOSUCH", "--state", "{d}/new/s.db"),
    ],
    ids=["interrupt", "cancel", "rerun", "interrupt-in-a-new-folder"],
)
def test_a_command_on_jobs_creates_no_state_when_there_is_none(tmp_path, argv):
    said = _refused(tmp_path, tuple(a.replace("{d}", str(tmp_path)) for a in argv), "state")
    assert "no job to act on" in said
    assert not (tmp_path / ".home" / "state").exists(), "the default state was created"


def test_pools_import_checks_every_flag_before_it_asks_slurm(tmp_path):
    """A fake `sinfo` first on PATH leaves a mark when it runs: no refused flag may."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sinfo", "scontrol", "ssh"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {tmp_path}/ran-{tool}\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    os.environ["PATH"], saved = f"{bin_dir}:{os.environ['PATH']}", os.environ["PATH"]
    try:
        for flags, names in (
            (("--cost-per-gpu-hour", "inf"), "--cost-per-gpu-hour"),
            (("--cost-per-gpu-hour", "1e400"), "--cost-per-gpu-hour"),
            (("--country", "nan"), "--country"),
            (("--region", "a:b"), "--region"),
            (("--output", str(tmp_path / "bin" / "sinfo" / "pools.yaml")), "--output"),
            (("--login", "u@h", "--identity-file", str(tmp_path / "no-key")), "--identity-file"),
        ):
            _refused(tmp_path, ("pools", "import", "--slurm", *flags), names)
    finally:
        os.environ["PATH"] = saved
    assert not list(tmp_path.glob("ran-*")), "a refused command asked the cluster"


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01", "9999", "20260520", "2026-W21-3"])
def test_a_price_date_out_of_range_or_shape_is_refused(tmp_path, day):
    sky = REPO / "tests" / "fakes" / "skypilot_small"
    argv = ("pricing", "import", str(sky), "--into", str(tmp_path / "out.csv"), "--as-of", day)
    _refused(tmp_path, argv, "--as-of")


def test_header_only_inputs_say_so(tmp_path):
    header = good.catalog_csv().splitlines()[0]
    (tmp_path / "offers.csv").write_text(header + "\n")
    said = _refused(tmp_path, ("offers", "--catalog", str(tmp_path / "offers.csv")), "offers.csv")
    assert "no offers" in said
    (tmp_path / "sky" / "aws").mkdir(parents=True)
    (tmp_path / "sky" / "aws" / "vms.csv").write_text(good.vms_csv().splitlines()[0] + "\n")
    argv = ("pricing", "import", str(tmp_path / "sky"), "--into", str(tmp_path / "o.csv"))
    assert "no offers" in _refused(tmp_path, argv, "vms.csv")
    (tmp_path / "jobs.csv").write_text(good.JOBS_TRACE.splitlines()[0] + "\n")
    argv = ("simulate", "--jobs", str(tmp_path / "jobs.csv"), "--spot", "synthetic")
    assert "no jobs" in _refused(tmp_path, argv, "jobs.csv")


def test_a_header_only_bill_is_an_empty_reconciliation_said_on_stderr(tmp_path):
    (tmp_path / "bill.csv").write_text(good.bill_csv().splitlines()[0] + "\n")
    argv = (
        "cost-report",
        "--state",
        str(tmp_path / "s.db"),
        "--actual",
        str(tmp_path / "bill.csv"),
    )
    done = _broker(tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    assert "bill.csv: aws-cur columns and no lines" in done.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ((*SIM, "--plot", "{out}"), "--plot"),
        (("cost-report", "--state", "{d}/s.db", "--html", "{out}"), "--html"),
        (("ci", "--base", "main", "jobs", "--comment-file", "{out}"), "--comment-file"),
        (("pricing", "refresh", "--catalog", "{out}"), "--catalog"),
        (("pools", "import", "--slurm", "-o", "{out}"), "{out}"),
        (("import", "skypilot", "{d}/task.yaml", "-o", "{out}"), "--out"),
    ],
    ids=["plot", "html", "comment-file", "refresh-catalog", "pools", "skypilot"],
)
@pytest.mark.parametrize("kind", ["directory", "under-a-file", "dot"])
def test_an_output_path_that_cannot_be_a_file_is_refused_before_work(tmp_path, argv, flag, kind):
    (tmp_path / "task.yaml").write_text(SKY_TASK.read_text())
    under_a_file = str(tmp_path / "task.yaml" / "x.png")
    out = {"directory": str(tmp_path / "out"), "under-a-file": under_a_file, "dot": "."}[kind]
    if kind == "directory":
        _special(tmp_path / "out", "directory")
    filled = tuple(a.replace("{out}", out).replace("{d}", str(tmp_path)) for a in argv)
    _refused(tmp_path, filled, flag.replace("{out}", out))


def test_a_plot_of_a_kind_matplotlib_cannot_draw_is_refused_before_the_run(tmp_path):
    said = _refused(tmp_path, (*SIM, "--plot", str(tmp_path / "cost.yaml")), "--plot")
    assert ".png" in said


@pytest.mark.parametrize(("key", "argv"), [("catalog", ("offers",)), ("state", ("queue",))])
def test_a_settings_path_holding_a_nul_byte_is_a_settings_error(tmp_path, key, argv):
    (tmp_path / "broker.toml").write_text(f'{key} = "a\\u0000b"\n')
    said = _refused(tmp_path, argv, "broker.toml")
    assert f"{key}: a path cannot hold a NUL byte" in said


# --- every setting the CLI reads, given a hostile value in broker.toml ----------------------

# TOML holds what no flag can: NUL bytes, arrays, booleans, nan and inf, huge integers.
SETTING_VALUES = ['""', '"\\u0000"', "nan", "inf", "-1", "0", "1e308", "99999999999999999999",
                  '"ünï"', "[1, 2]", "true", '"/"', '"' + "x" * 5000 + '"', "{a = 1}"]  # fmt: skip
# The commands that read the settings: the planner's inputs, the queue's, a submission's.
SETTING_COMMANDS = (("plan", "{m}"), ("queue", "--state", "{d}/state.db"),
                    ("submit", "--dry-run", "--state", "{d}/state.db", "{m}"))  # fmt: skip
# Not swept: auto_refresh_days would refresh the user catalog over the network (seconds
# a run; never in CI, which the sweep's environment is not); the cloud endpoints and
# images are read only with a cloud enabled.
SWEPT_SETTINGS = ("catalog", "pools", "overlays", "policy", "state", "freshness_days", "clouds",
                  "workdir_limit_mb", "container_runtime", "max_yaml_bytes", "max_catalog_bytes",
                  "max_trace_bytes", "max_bill_bytes", "max_nesting_depth")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("cost-report", "--state", "{d}/s.db", "--actual", "{d}/bill.csv", "--html",
          "{d}/bill.csv"), "--html"),
        (("pricing", "import", "{d}/sky", "--into", "{d}/sky/aws/vms.csv"), "--into"),
        (("ci", "--base", "main", "jobs", "--policy", "{d}/policy.yaml", "--comment-file",
          "{d}/policy.yaml"), "--comment-file"),
        (("import", "skypilot", "{d}/task.yaml", "-o", "{d}/./task.yaml"), "--out"),
    ],
    ids=["html-over-the-bill", "into-over-a-source", "comment-over-the-policy", "skypilot"],
)  # fmt: skip
def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path, argv, flag):
    (tmp_path / "bill.csv").write_text(good.bill_csv())
    (tmp_path / "sky" / "aws").mkdir(parents=True)
    (tmp_path / "sky" / "aws" / "vms.csv").write_text(good.vms_csv())
    (tmp_path / "policy.yaml").write_text(good.good_text("policy"))
    (tmp_path / "task.yaml").write_text(SKY_TASK.read_text())
    said = _refused(tmp_path, tuple(a.replace("{d}", str(tmp_path)) for a in argv), flag)
    assert "also an input" in said


# An environment variable holds only text (never a NUL byte): the same settings so.
ENVIRONMENT_VALUES = ["", "nan", "inf", "-1", "0", "99999999999999999999", "ünï", "/", "{d}",
                      "x" * 5000, "{d}/missing/none.yaml"]  # fmt: skip


@pytest.mark.parametrize("given", ["broker.toml", "environment"])
def test_every_setting_given_a_hostile_value_exits_as_documented(tmp_path, given):
    from pricing.userio.settings import SETTINGS

    assert set(SWEPT_SETTINGS) <= set(SETTINGS)

    def own(key: str, value: str) -> dict:
        if given == "environment":
            return {"env": {SETTINGS[key].variable: value}}
        return {"files": {"broker.toml": f"{key} = {value}\n"}}

    values = ENVIRONMENT_VALUES if given == "environment" else SETTING_VALUES
    runs = [
        (argv[0], f"{key}#{number}", argv, own(key, value))
        for key in SWEPT_SETTINGS
        for number, value in enumerate(values)
        for argv in SETTING_COMMANDS
    ]
    problems, _, _ = _sweep_problems(tmp_path, _sweep_env(tmp_path), runs)
    print(f"\nsettings sweep ({given}): {len(runs)} runs, {len(problems)} problem(s)")
    assert not problems, "\n".join(problems[:60])


# NUL bytes cannot be in a real command line: that value is the in-process sweep's.
ARGV_PATHS = [path for path in PATHS if "\x00" not in path]


@pytest.mark.parametrize("number", range(len(ARGV_PATHS)))
def test_plan_without_typer_takes_the_same_hostile_paths(tmp_path, number):
    """`broker plan FILE` runs without typer (broker.cli.direct), which the in-process
    sweep does not reach: the real executable, each hostile path."""
    value = ARGV_PATHS[number].replace("{d}", str(tmp_path))
    (tmp_path / "good.yaml").write_text(good.good_text("manifest"))
    before = _tree(tmp_path)
    done = _broker(tmp_path, "plan", value)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 2, 3), done.stderr[-500:]
    assert _tree(tmp_path) == before
