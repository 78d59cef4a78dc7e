"""`broker --help` must stay light: answered from a cache of typer's own rendering, with
no pandas, numpy, rich, pydantic, cloud SDK (and, once cached, no typer) imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "pandas",
    "numpy",
    "rich",
    "yaml",
    "pydantic",
    "boto3",
    "botocore",
    "google.cloud",
    "azure",
    "libcloud",
    "prometheus_client",
    "psycopg",  # the PostgreSQL state backend: only when a URL is opened
)
PROBE = (
    "import sys\n"
    "sys.argv = ['broker', '--help']\n"
    "from broker.cli.entry import main\n"
    "main()\n"
    "print('LOADED', [m for m in {heavy!r} if m in sys.modules])\n"
)


def help_run(env: dict, heavy: tuple[str, ...]) -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    *text, loaded = out.stdout.strip().splitlines()
    return "\n".join(text), loaded


def test_help_imports_no_heavy_module_and_is_cached(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    first, loaded = help_run(env, HEAVY)
    assert "offers" in first and "plan" in first and "demo" in first
    assert loaded == "LOADED []"
    second, loaded = help_run(env, (*HEAVY, "typer", "click"))
    assert second == first
    assert loaded == "LOADED []"  # the cached answer needs not even typer


def test_cached_help_is_typers_help(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from broker.cli.entry import render_root_help

    slow = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv=['broker','--help'];from broker.cli.main import main; main()",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)),
    )
    assert render_root_help().strip() == slow.stdout.strip()


def test_cache_key_follows_the_cli_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from broker.cli import entry

    before = entry.help_cache_path()
    module = Path(entry.__file__).parent / "offers.py"
    stat = module.stat()
    try:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert entry.help_cache_path() != before
    finally:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert entry.help_cache_path() == before


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "broker", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("broker ")
