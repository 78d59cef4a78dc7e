"""The rooms import downwards only, and cloud SDKs stay in their adapters (DESIGN.md).

An AST walk over every `.py` file of the four rooms: every `import`, `from ... import`
(relative ones resolved) and `importlib.import_module("...")` with a literal name, at
module level or inside a function, under `TYPE_CHECKING` or not.

- `pricing` (the bottom room) imports nothing else of ours;
- `providers` imports `pricing` only; `onprem` imports `pricing` and `providers`;
  nothing below `broker` imports it;
- cloud SDKs are imported only by their own adapter: `boto3`/`botocore` under
  `providers/aws/`, `google.*` under `providers/gcp/`, `azure.*` under
  `providers/azure/`, and `libcloud` only under `providers/storage/`;
- no room imports `tests` or `bench`.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("pricing", "providers", "onprem", "broker")
MAY_IMPORT = {
    "pricing": {"pricing"},
    "providers": {"pricing", "providers"},
    "onprem": {"pricing", "providers", "onprem"},
    "broker": set(ROOMS),
}
NEVER = ("tests", "bench")  # of ours, but no room's
SDK_HOME = {
    "boto3": "providers/aws/",
    "botocore": "providers/aws/",
    "google": "providers/gcp/",
    "azure": "providers/azure/",
    "libcloud": "providers/storage/",
}
# (file, SDK) pairs allowed outside the SDK's home, each with why.
SDK_EXCEPTIONS = {
    # The live price sources are in the bottom room (a price refresh needs no provider),
    # which cannot import providers/: with AWS credentials they read the Pricing API and
    # spot history through boto3, and GCP's billing catalog takes ADC through google.auth.
    ("pricing/sources/aws.py", "botocore"),
    ("pricing/sources/aws_session.py", "boto3"),
    ("pricing/sources/aws_session.py", "botocore"),
    ("pricing/sources/aws_spot.py", "botocore"),
    ("pricing/sources/gcp.py", "google"),
    # Checkpoint storage (base install) takes AWS keys from botocore's chain when it is
    # installed, else from the environment; providers/aws/ itself cannot be imported
    # without boto3 (its __init__ loads the adapter).
    ("providers/storage/drivers.py", "botocore"),
}


def imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file of module `module`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            yield node.lineno, name
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_import_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def violations(root: Path) -> list[str]:
    """Every import under `root`'s rooms that breaks a rule, as `file:line: why`."""
    found = []
    for room in ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            module = relative.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            for line, name in imports(path, module):
                top = name.split(".")[0]
                where = f"{relative}:{line}: imports {name}"
                if top in MAY_IMPORT and top not in MAY_IMPORT[room]:
                    allowed = ", ".join(sorted(MAY_IMPORT[room]))
                    found.append(f"{where} ({room} may import only {allowed} of ours)")
                elif top in NEVER:
                    found.append(f"{where} (no room imports {top}/)")
                elif top in SDK_HOME and not relative.startswith(SDK_HOME[top]):
                    if (relative, top) not in SDK_EXCEPTIONS:
                        found.append(f"{where} ({top} belongs under {SDK_HOME[top]})")
    return found


def test_the_tree_keeps_the_import_direction():
    assert violations(REPO) == []


def test_the_rooms_are_there():
    """The walk sees files (a moved folder would make the test above vacuous)."""
    for room in ROOMS:
        assert (REPO / room / "__init__.py").is_file(), room
        assert len(list((REPO / room).rglob("*.py"))) >= 3, room


# --- the checker itself, on small trees ---------------------------------------------------

CASES = [
    # (file, source, the reason a violation names, or None when allowed)
    ("pricing/a.py", "import broker.cli", "pricing may import only pricing"),
    ("pricing/a.py", "def f():\n    from providers import base", "pricing may import only"),
    ("pricing/a.py", "from onprem.inventory import Pool", "pricing may import only"),
    ("pricing/a.py", "from pricing.regions import Place", None),
    ("pricing/sub/b.py", "from .. import regions", None),  # pricing.regions
    ("providers/a.py", "from pricing.userio.errors import UserInputError", None),
    ("providers/a.py", "import broker", "providers may import only pricing, providers"),
    ("providers/a.py", "from onprem import offers", "providers may import only"),
    ("providers/a.py", "import importlib\nimportlib.import_module('broker.cli')", "providers may"),
    ("onprem/a.py", "from providers.base import Provider\nimport pricing", None),
    (
        "onprem/a.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.spec import JobSpec",
        "onprem may import only",
    ),
    ("broker/a.py", "import onprem, providers, pricing", None),
    ("broker/a.py", "from tests.waiting import wait_until", "no room imports tests/"),
    ("broker/a.py", "import boto3", "boto3 belongs under providers/aws/"),
    ("providers/gcp/a.py", "import botocore.config", "botocore belongs under providers/aws/"),
    ("providers/aws/a.py", "from google.cloud import compute_v1", "google belongs under"),
    ("providers/aws/a.py", "import boto3\nfrom botocore.config import Config", None),
    ("providers/azure/a.py", "from azure.identity import DefaultAzureCredential", None),
    ("onprem/a.py", "import azure.mgmt.compute", "azure belongs under providers/azure/"),
    ("providers/a.py", "from libcloud.storage.types import Provider", "libcloud belongs under"),
    ("providers/storage/a.py", "from libcloud.storage.types import Provider", None),
    ("pricing/sources/gcp.py", "import google.auth", None),  # the two allowed price sources
    ("pricing/sources/aws_session.py", "import boto3", None),
    ("pricing/sources/azure.py", "import azure.identity", "azure belongs under"),
    ("pricing/a.py", "import googleapiclient\nimport azurefile", None),  # other top names
]


@pytest.mark.parametrize(("file", "source", "reason"), CASES)
def test_the_checker_finds_each_broken_rule(tmp_path, file, source, reason):
    for room in ROOMS:
        (tmp_path / room).mkdir()
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source) + "\n")
    found = violations(tmp_path)
    if reason is None:
        assert found == []
    else:
        assert len(found) == 1 and reason in found[0], found
        assert found[0].startswith(f"{file}:")


def test_relative_imports_resolve_to_their_room(tmp_path):
    for room in ROOMS:
        (tmp_path / room).mkdir()
    (tmp_path / "pricing" / "sub").mkdir()
    (tmp_path / "pricing" / "sub" / "__init__.py").write_text("from . import b\nfrom .. import c\n")
    (tmp_path / "pricing" / "sub" / "b.py").write_text("from ...broker import cli\n")
    found = violations(tmp_path)
    assert found == ["pricing/sub/b.py:1: imports broker (pricing may import only pricing of ours)"]
