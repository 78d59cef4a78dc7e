"""A SkyPilot task YAML as a `broker/v1` manifest: data in, manifest document and warnings out.

    document = parse_yaml_documents(text, path)[0]
    converted = convert_task(document, team="nlp", paths_from=Path.cwd(), manifest_dir=None)
    converted.document    # a broker/v1 manifest, as plain data
    converted.warnings    # what the task says that the manifest does not carry, each located

Every field of the task is either carried into the manifest or named in a
warning: nothing is dropped silently. A mistake the manifest would refuse (a GPU
the table does not know, a misspelt region, a value of the wrong type) is a
located UserInputError, every one of them at once. Relative paths in a task are
taken from the folder SkyPilot is run in (`paths_from`), as SkyPilot does; the
manifest's `run.workdir` is written relative to the folder the manifest will be in
(`manifest_dir`), or absolute when there is none. Nothing here reads files: the
size of a local folder mounted by the task comes from `size_of`, given by the caller.
The resources part is `broker.manifest.skypilot_resources`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.manifest.load import API_VERSION
from broker.manifest.skypilot_resources import convert_resources
from pricing.userio.errors import UserInputError, format_field
from pricing.userio.suggest import suggestion
from pricing.userio.yaml_reader import YamlDocument

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_AZURE_BLOB = re.compile(r"https://([a-z0-9]+)\.blob\.core\.windows\.net/([^/\s]+)(/\S*)?")
_BUCKET_SCHEMES = ("s3", "gs")
_NOT_MAPPED = {
    "secrets": "secrets stay out of manifests and the broker's state",
    "service": "the broker runs batch jobs, not services",
    "pool": "the broker runs each job on its own instances",
    "config": "the broker has its own settings (broker.toml)",
    "volumes": "the broker mounts no volumes",
    "volume_mounts": "the broker mounts no volumes",
    "event_callback": "the broker records events in its state (broker status)",
    "inputs": "give data inputs with their location in data",
    "outputs": "the manifest has no outputs",
    "file_mounts_mapping": "an internal SkyPilot field",
    "api_server_access": "the broker has no API server",
    "managed_secrets": "secrets stay out of manifests and the broker's state",
    "experimental": "the broker has its own settings (broker.toml)",
}
_TASK_FIELDS = ("name", "workdir", "num_nodes", "resources", "file_mounts", "setup", "run", "envs")


@dataclass(frozen=True)
class ImportWarning:
    """Something the task says that the manifest does not carry, and where it is."""

    path: Path
    line: int
    column: int
    field: str  # as written in the task: resources.any_of[1].disk_size
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: warning: {self.field}: {self.message}"


@dataclass(frozen=True)
class Converted:
    """The manifest document made of one task, and the warnings on the way."""

    document: dict[str, Any]
    warnings: tuple[ImportWarning, ...]


@dataclass
class TaskReader:
    """One conversion's task document and what it found: warnings and errors, located."""

    doc: YamlDocument
    warnings: list[ImportWarning] = field(default_factory=list)
    errors: list[UserInputError] = field(default_factory=list)

    def warn(self, path: tuple[str | int, ...], message: str) -> None:
        line, column = self.doc.locate(path, key=True)
        self.warnings.append(
            ImportWarning(self.doc.path, line, column, format_field(path), message)
        )

    def error(self, path: tuple[str | int, ...], message: str, *, key: bool = False) -> None:
        self.errors.append(self.doc.error(path, message, key=key))


def label(text: str) -> str:
    """`text` as a broker name: lower case, runs of other characters as one '-', at
    most 63 characters; "" when nothing is left."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name[:63].rstrip("-")


def convert_task(
    doc: YamlDocument,
    *,
    team: str,
    paths_from: Path,
    manifest_dir: Path | None,
    size_of: Callable[[Path], float | None] = lambda path: None,
) -> Converted:
    """The broker/v1 manifest of one SkyPilot task document (see the module docstring);
    UserInputError holding every mistake when the task cannot be converted."""
    reader = TaskReader(doc)
    task = doc.data
    if not isinstance(task, dict):
        kind = "empty" if task is None else f"a {type(task).__name__}"
        raise doc.error((), f"a SkyPilot task is a mapping of fields, this document is {kind}")
    if "apiVersion" in task:
        message = "this is a broker manifest already, not a SkyPilot task"
        raise doc.error(("apiVersion",), message, key=True)
    document: dict[str, Any] = {"apiVersion": API_VERSION, "name": _name(reader, task)}
    document["team"] = team
    nodes = _nodes(reader, task.get("num_nodes", 1))
    parts = convert_resources(reader, task.get("resources"), nodes)
    if "priority" in parts:
        document["priority"] = parts["priority"]
    for section in ("resources", "placement"):
        if section in parts:
            document[section] = parts[section]
    document["run"] = _run(reader, task, parts.get("image"), paths_from, manifest_dir)
    data = _data(reader, task.get("file_mounts"), paths_from, size_of)
    if data:
        document["data"] = data
    recovery = _recovery(reader, task.get("resources"))
    if recovery:
        document["recovery"] = recovery
    for key in task:
        if key == "secrets" and isinstance(task[key], dict):  # named, never their values
            for name in task[key]:
                reader.warn((key, name), f"not imported: {_NOT_MAPPED[key]}")
        elif key in _NOT_MAPPED:
            reader.warn((key,), f"not imported: {_NOT_MAPPED[key]}")
        elif key not in _TASK_FIELDS:
            known = [*_TASK_FIELDS, *_NOT_MAPPED]
            reader.warn((key,), f"not imported: not a SkyPilot task field{suggestion(key, known)}")
    if reader.errors:
        raise UserInputError.collect(sorted(reader.errors, key=lambda e: (e.line, e.column)))
    return Converted(document, tuple(sorted(reader.warnings, key=lambda w: (w.line, w.column))))


def _name(reader: TaskReader, task: dict[str, Any]) -> str:
    written = task.get("name")
    if written is not None and not isinstance(written, str):
        reader.error(("name",), f"expected a task name, got {written!r}")
        written = None
    source = written or reader.doc.path.stem
    name = label(source) or "task"
    if written is None:
        reader.warn(("name",), f"the task has no name: the job is named {name!r} after its file")
    elif name != written:
        reader.warn(("name",), f"{written!r} is not a broker name: the job is named {name!r}")
    return name


def _nodes(reader: TaskReader, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    reader.error(("num_nodes",), f"expected a number of nodes of at least 1, got {value!r}")
    return 1


def _run(
    reader: TaskReader,
    task: dict[str, Any],
    image: str | None,
    paths_from: Path,
    manifest_dir: Path | None,
) -> dict[str, Any]:
    run: dict[str, Any] = {}
    if image is not None:
        run["image"] = image
    for key, target in (("run", "command"), ("setup", "setup")):
        value = task.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            reader.error((key,), f"expected shell commands (a string), got {value!r}")
        elif value.strip():
            run[target] = value
    if "command" not in run and image is None and isinstance(task.get("run", ""), str):
        reader.error(("run",), "the task has no run commands and no docker image: nothing to run")
    workdir = task.get("workdir")
    if isinstance(workdir, str) and workdir.strip():
        run["workdir"] = _rebased(workdir.strip(), paths_from, manifest_dir)
    elif workdir is not None:
        reader.warn(("workdir",), "not imported: only a local folder is a broker workdir")
    env = _env(reader, task.get("envs"))
    if env:
        run["env"] = env
    return run


def _rebased(written: str, paths_from: Path, manifest_dir: Path | None) -> str:
    """A task's path (relative to `paths_from`) as the manifest writes it."""
    if written.startswith("~") or os.path.isabs(written):
        return written
    absolute = os.path.abspath(paths_from / written)
    return absolute if manifest_dir is None else os.path.relpath(absolute, manifest_dir)


def _env(reader: TaskReader, envs: object) -> dict[str, str]:
    if envs is None:
        return {}
    if not isinstance(envs, dict):
        reader.error(("envs",), f"expected a mapping of NAME: value, got {envs!r}")
        return {}
    env = {}
    for name, value in envs.items():
        path = ("envs", name)
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            reader.error(path, f"{name!r} is not an environment variable name", key=True)
        elif name.startswith("BROKER_"):
            reader.warn(path, "not imported: names starting with BROKER_ are set by the broker")
        elif value is None:
            reader.warn(path, "not imported: no value (SkyPilot asks for it at launch)")
        elif isinstance(value, bool):
            env[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            env[name] = str(value)
        else:
            reader.error(path, f"expected a string value, got {value!r}")
    return env


def _data(
    reader: TaskReader,
    mounts: object,
    paths_from: Path,
    size_of: Callable[[Path], float | None],
) -> list[dict[str, Any]]:
    """Each file mount read from storage or from this machine, as a data input."""
    if mounts is None:
        return []
    if not isinstance(mounts, dict):
        reader.error(("file_mounts",), f"expected a mapping of remote path: source, got {mounts!r}")
        return []
    data: list[dict[str, Any]] = []
    for target, spec in mounts.items():
        path = ("file_mounts", target)
        if isinstance(spec, str):
            sources: list[tuple[tuple[str | int, ...], str]] = [(path, spec)]
        elif isinstance(spec, dict):
            sources = _storage_sources(reader, path, spec)
        else:
            reader.error(path, f"expected a source path, a bucket URI or a storage, got {spec!r}")
            continue
        for where, source in sources:
            found = _data_input(reader, where, source, paths_from, size_of)
            if found is None:
                continue
            item, known = found
            size = "" if known else "; its size is unknown: set its size_gb for egress"
            reader.warn(
                where,
                f"mounted at {target} by SkyPilot: the broker mounts nothing, it lists "
                f"{item['uri']} as data[{len(data)}]{size}",
            )
            data.append(item)
    return data


def _storage_sources(
    reader: TaskReader, path: tuple[str | int, ...], spec: dict[str, Any]
) -> list[tuple[tuple[str | int, ...], str]]:
    """The sources of a storage mount, warning about the rest of it."""
    if str(spec.get("store", "")).lower() == "volume":
        reader.warn(path, "not imported: the broker mounts no volumes")
        return []
    source = spec.get("source")
    rest = [f"{key} {spec[key]}" for key in spec if key not in ("source", "name", "store")]
    if rest:
        reader.warn(path, f"not imported: {', '.join(rest)} (how SkyPilot mounts the storage)")
    if source is None:
        name = spec.get("name", "")
        reader.warn(
            path,
            f"not imported: SkyPilot creates the bucket {name!r} here; the broker creates no "
            "buckets (a checkpoint folder goes in checkpoint.uri)",
        )
        return []
    if isinstance(source, str):
        return [((*path, "source"), source)]
    if isinstance(source, list) and all(isinstance(item, str) for item in source):
        return [((*path, "source", i), item) for i, item in enumerate(source)]
    reader.error((*path, "source"), f"expected a path or a list of paths, got {source!r}")
    return []


def _data_input(
    reader: TaskReader,
    path: tuple[str | int, ...],
    source: str,
    paths_from: Path,
    size_of: Callable[[Path], float | None],
) -> tuple[dict[str, Any], bool] | None:
    """A source as a data input, and whether its size is known; None when it cannot be one."""
    source = source.strip()
    scheme, sep, rest = source.partition("://")
    if sep:
        if scheme in _BUCKET_SCHEMES and rest.split("/", 1)[0] and " " not in source:
            return {"uri": source, "size_gb": 0}, False
        if match := _AZURE_BLOB.fullmatch(source):
            return {"uri": f"az://{match[2]}{match[3] or ''}", "size_gb": 0}, False
        reader.warn(path, f"not imported: {scheme}:// is not storage the broker reads (s3, gs, az)")
        return None
    local = Path(os.path.abspath(paths_from / os.path.expanduser(source)))
    if re.search(r"\s", str(local)):
        reader.warn(path, f"not imported: {local} has white space, which a file:// URI may not")
        return None
    size = size_of(local)
    return {"uri": local.as_uri(), "size_gb": 0 if size is None else size}, size is not None


def _recovery(reader: TaskReader, resources: object) -> dict[str, Any]:
    """`job_recovery` (and the older `spot_recovery`) as the manifest's recovery settings."""
    if not isinstance(resources, dict):
        return {}
    recovery: dict[str, Any] = {}
    for key in ("job_recovery", "spot_recovery"):
        if key not in resources:
            continue
        path = ("resources", key)
        value = resources[key]
        settings = {"strategy": value} if isinstance(value, str) else value
        if not isinstance(settings, dict):
            reader.error(path, f"expected a strategy or a mapping, got {value!r}")
            continue
        for name, setting in settings.items():
            where = path if isinstance(value, str) else (*path, name)
            if name == "strategy":
                reader.warn(
                    where,
                    f"not imported: strategy {setting}: after an interruption the broker "
                    "re-plans the job to the cheapest feasible place",
                )
            elif name == "max_restarts_on_errors":
                if isinstance(setting, int) and not isinstance(setting, bool) and setting >= 0:
                    recovery["max_restarts_on_error"] = setting
                else:
                    reader.error(where, f"expected a number of restarts, got {setting!r}")
            elif name == "recover_on_exit_codes":
                codes = setting if isinstance(setting, list) else [setting]
                if all(isinstance(c, int) and not isinstance(c, bool) for c in codes) and all(
                    1 <= c <= 255 for c in codes
                ):
                    recovery["recover_on_exit_codes"] = codes
                else:
                    reader.error(where, f"expected exit codes from 1 to 255, got {setting!r}")
            else:
                reader.warn(where, "not imported: not a job_recovery setting the broker has")
    return recovery


def to_yaml(converted: Converted, source: str) -> str:
    """The manifest as YAML text, shell commands as literal blocks, with a header naming
    the task it was imported from."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, text)
    body = yaml.dump(converted.document, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return f"# Imported from the SkyPilot task {source} by `broker import skypilot`.\n{body}"
