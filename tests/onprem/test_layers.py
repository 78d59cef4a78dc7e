"""onprem/ may import pricing and providers, never broker (DESIGN.md, rooms)."""

from __future__ import annotations

import ast
from pathlib import Path

ONPREM = Path(__file__).resolve().parents[2] / "onprem"


def test_onprem_never_imports_broker():
    offenders = []
    for path in sorted(ONPREM.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "broker"]
    assert offenders == []
