"""The hostile cases: every kind of file broker reads from a user, broken in every way
the issue lists (and more), crossed with every command that reads that kind.

A `Case` is data: the files of its folder, the command line (`{f}` the bad file, `{d}`
the case's folder, `{m}` a good manifest beside it), extra environment, and what must
happen: the exit codes allowed (2 for bad input; 1 for an operation that failed; 0 for
inputs that are only suspicious, such as an unknown settings key or a corrupt cache),
the file the message must name, and whether it must name a line too.

`all_cases()` gives the whole set; `sample(cases)` one case per (kind, fault family,
command), which the suite also runs as real subprocesses of the `broker` executable.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from tests.hostile import good, values


@dataclass(frozen=True)
class Fifo:
    """A named pipe: a reader that opens it waits for a writer that never comes."""


@dataclass(frozen=True)
class Folder:
    """A directory where a file is expected."""


@dataclass(frozen=True)
class Link:
    """A symbolic link (to /dev/zero: an endless file that is no file)."""

    target: str


Content = bytes | Fifo | Folder | Link


@dataclass(frozen=True)
class Case:
    id: str  # kind/fault/command, unique
    kind: str
    fault: str  # the family of fault (for the sample)
    argv: tuple[str, ...]
    files: tuple[tuple[str, Content], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    expect: tuple[int, ...] = (2,)
    names: str = ""  # a file name the error must name ("" : none)
    located: bool = False  # the error must name a line of it too
    needs: str = ""  # what the test prepares: "state:<kind>", "cache", "git"

    @property
    def command(self) -> str:
        return self.argv[0] if self.argv[0] != "pricing" else "pricing " + self.argv[1]


# kind -> (file name, command lines reading it). `{f}` is the file, `{m}` a good manifest.
TARGETS: dict[str, tuple[str, tuple[tuple[str, ...], ...]]] = {
    "manifest": (
        "job.yaml",
        (
            ("validate", "{f}"),
            ("plan", "{f}"),
            ("submit", "--state", "{d}/state.db", "{f}"),
            ("estimate", "{f}"),
        ),
    ),
    "skypilot": (
        "task.yaml",
        (("import", "skypilot", "{f}"), ("plan", "--format", "skypilot", "{f}")),
    ),
    "pools": (
        "pools.yaml",
        (
            ("offers", "--pools", "{f}"),
            ("plan", "--pools", "{f}", "{m}"),
            ("queue", "--state", "{d}/state.db", "--pools", "{f}"),
            ("run", "--once", "--state", "{d}/state.db", "--pools", "{f}"),
            ("simulate", "--jobs", "synthetic:2", "--spot", "synthetic", "--pools", "{f}"),
        ),
    ),
    "overlays": (
        "overlays.yaml",
        (("offers", "--overlays", "{f}"), ("plan", "--overlays", "{f}", "{m}")),
    ),
    "policy": (
        "policy.yaml",
        (
            ("queue", "--state", "{d}/state.db", "--policy", "{f}"),
            ("run", "--once", "--state", "{d}/state.db", "--policy", "{f}"),
        ),
    ),
    "catalog": (
        "offers.csv",
        (
            ("offers", "--catalog", "{f}"),
            ("plan", "--catalog", "{f}", "{m}"),
            ("queue", "--state", "{d}/state.db", "--catalog", "{f}"),
        ),
    ),
    "vms": ("sky/aws/vms.csv", (("pricing", "import", "{d}/sky", "--into", "{d}/out.csv"),)),
    "bill": ("bill.csv", (("cost-report", "--state", "{d}/state.db", "--actual", "{f}"),)),
    "jobs": ("jobs.csv", (("simulate", "--jobs", "{f}", "--spot", "synthetic"),)),
    "spot": (good.SPOT_NAME, (("simulate", "--jobs", "synthetic:2", "--spot", "{f}"),)),
    "config": ("broker.toml", (("offers", "--summary"), ("validate", "{m}"))),
}
YAML_KINDS = ("manifest", "skypilot", "pools", "overlays", "policy")
CAP_SETTING = {
    "catalog": "BROKER_MAX_CATALOG_BYTES",
    "vms": "BROKER_MAX_CATALOG_BYTES",
    "bill": "BROKER_MAX_BILL_BYTES",
    "jobs": "BROKER_MAX_TRACE_BYTES",
    "spot": "BROKER_MAX_TRACE_BYTES",
}


def all_cases() -> list[Case]:
    """Every case, in a stable order (ids are unique)."""
    found = [*_file_faults(), *_value_faults(), *_state_faults(), *_setting_faults()]
    ids = [case.id for case in found]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return found


def sample(cases: list[Case]) -> list[Case]:
    """One case per (kind, fault family), the commands taken in turn so that every command
    of every kind is in the sample too: every way of breaking every reader, once."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for case in cases:
        groups.setdefault((case.kind, case.fault), []).append(case)
    used: dict[tuple[str, str], int] = {}
    chosen = []
    for group in groups.values():
        case = min(group, key=lambda c: used.get((c.kind, c.command), 0))
        used[case.kind, case.command] = used.get((case.kind, case.command), 0) + 1
        chosen.append(case)
    return chosen


def _cases_for(kind: str, fault: str, name: str, contents: Content, **extra) -> Iterator[Case]:
    """The same bad file under every command that reads its kind."""
    file, commands = TARGETS[kind]
    companions = extra.pop("files", ())
    for argv in commands:
        yield Case(
            id=f"{kind}/{name}/{'-'.join(a for a in argv[:2] if not a.startswith('{'))}",
            kind=kind,
            fault=fault,
            argv=argv,
            files=((file, contents), *companions),
            names=extra.get("names", file.rsplit("/", 1)[-1]),
            **{k: v for k, v in extra.items() if k != "names"},
        )


def _file_faults() -> Iterator[Case]:
    """What is wrong with the file as a file, whatever its kind."""
    rng = random.Random(16)
    noise = bytes(rng.randrange(256) for _ in range(4096))
    for kind in TARGETS:
        text = good.good_text("manifest" if kind == "skypilot" else kind).encode()
        if kind == "config":
            text = good.TOML.encode()
        yield from _cases_for(kind, "fifo", "fifo", Fifo())
        yield from _cases_for(kind, "dir", "directory", Folder())
        yield from _cases_for(kind, "device", "dev-zero", Link("/dev/zero"))
        yield from _cases_for(kind, "binary", "random-bytes", noise)
        cut = len(text) // 2
        bad = text[:cut] + b"\xff\xfe\xc3" + text[cut:]
        yield from _cases_for(kind, "decode", "bad-utf8", bad, located=True)
        yield from _cases_for(kind, "decode", "utf16", "\ufeff".encode("utf-16-le") + text)
        yield from _cases_for(kind, "decode", "nul-bytes", text[:cut] + b"\x00\x00" + text[cut:])
        if kind in CAP_SETTING:
            env = ((CAP_SETTING[kind], str(len(text) - 1)),)
            yield from _cases_for(kind, "size", "over-cap", text, env=env)
        elif kind != "config":
            env = (("BROKER_MAX_YAML_BYTES", "4096"),)
            padded = text + b"# padding\n" * 500
            yield from _cases_for(kind, "size", "over-cap", padded, env=env)
    big = good.good_text("manifest").encode() + b"#" * (9 << 20) + b"\n"
    yield from _cases_for("manifest", "size", "nine-mib", big)
    for kind in YAML_KINDS:
        yield from _cases_for(
            kind, "depth", "deep-flow", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n"
        )
        deep = "".join(" " * i + "k:\n" for i in range(300)).encode()
        yield from _cases_for(kind, "depth", "deep-block", deep, located=True)
        yield from _cases_for(
            kind, "depth", "alias-bomb", values.alias_bomb().encode(), located=True
        )
        yield from _cases_for(kind, "syntax", "surrogate", b'name: "\\ud800x"\n', located=True)
        yield from _cases_for(kind, "syntax", "tab-indent", b"pools:\n\t- name: x\n", located=True)
        yield from _cases_for(kind, "syntax", "python-tag", b"a: !!python/object:os.system x\n")
        yield from _cases_for(kind, "syntax", "unclosed", b'name: "open\nteam: x\n', located=True)
        yield from _cases_for(kind, "syntax", "dup-key", b"a: 1\nb: 2\na: 3\n", located=True)
        yield from _cases_for(kind, "syntax", "list-key", b"? [a, b]\n: 1\n")
        yield from _cases_for(kind, "shape", "a-list", b"- 1\n- 2\n")
        yield from _cases_for(kind, "shape", "a-scalar", b"just text\n")
    for kind in ("spot",):
        yield from _cases_for(kind, "depth", "deep-json", b"[" * 100000 + b"]" * 100000)
        yield from _cases_for(kind, "syntax", "surrogate", b'{"metadata": "\\ud800"}')
        yield from _cases_for(
            kind, "syntax", "not-json", b'{"metadata": {"gap_seconds": 1},', located=True
        )


def _value_faults() -> Iterator[Case]:
    for kind, name, text, located in values.value_faults():
        yield from _cases_for(kind, "value", name, text.encode(), located=located)
    for kind, name, files, argv, env, named in values.special_cases():
        yield Case(
            id=f"{kind}/{name}", kind=kind, fault=name.split("/")[0], argv=argv, files=files,
            env=env, names=named,
        )  # fmt: skip


STATE_FAULTS = (
    "truncated", "header-only", "header-cut", "random", "text", "flipped-page", "directory",
    "newer-schema", "foreign", "foreign-id", "foreign-wal",
)  # fmt: skip
STATE_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("queue", "--state", "{d}/state.db"),
    ("status", "hostile", "--state", "{d}/state.db"),
    ("logs", "hostile", "--state", "{d}/state.db"),
    ("cancel", "hostile", "--state", "{d}/state.db"),
    ("submit", "--state", "{d}/state.db", "{m}"),
    ("run", "--once", "--state", "{d}/state.db"),
    ("cost-report", "--state", "{d}/state.db"),
)


def _state_faults() -> Iterator[Case]:
    """Each broken state file under each command that opens state (prepared by the test)."""
    for fault in STATE_FAULTS:
        for argv in STATE_COMMANDS:
            yield Case(
                id=f"state/{fault}/{argv[0]}",
                kind="state",
                fault=fault,
                argv=argv,
                names="state.db",
                needs=f"state:{fault}",
            )


def _setting_faults() -> Iterator[Case]:
    for name, text, expect, commands in values.config_faults():
        for argv in commands:
            yield Case(
                id=f"config/{name}/{argv[0]}",
                kind="config",
                fault="value",
                argv=argv,
                files=(("broker.toml", text.encode()),),
                expect=expect,
                names="broker.toml",
            )
    for variable, value, argv in values.environment_faults():
        yield Case(
            id=f"env/{variable}={value}/{argv[0]}",
            kind="env",
            fault=variable,
            argv=argv,
            env=((variable, value),),
            names=variable,
        )
    yield Case(
        id="cache/corrupt/offers",
        kind="cache",
        fault="corrupt",
        argv=("offers", "--catalog", "{f}"),
        files=(("offers.csv", good.good_text("catalog").encode()),),
        expect=(0,),
        needs="cache",
    )
    firsts: dict[str, tuple[str, str]] = {}
    for kind, name, text, _ in values.value_faults():
        if kind == "manifest":
            firsts.setdefault(name.split("=")[0], (name, text))
    for name, text in firsts.values():  # one bad value per field, changed in a git work tree
        yield Case(
            id=f"ci/{name}",
            kind="ci",
            fault=name.split("=")[0],
            argv=("ci", "--base", "main", "jobs"),
            files=(("jobs/job.yaml", text.encode()),),
            names="job.yaml",
            located=True,
            needs="git",
        )
