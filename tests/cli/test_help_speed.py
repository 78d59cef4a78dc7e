"""`broker --help` must stay light: no pandas, numpy, rich or cloud SDK gets imported."""

from __future__ import annotations

import subprocess
import sys

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
)


def test_help_imports_no_heavy_module():
    code = (
        "import sys\n"
        "sys.argv = ['broker', '--help']\n"
        "from broker.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
        f"print('LOADED', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "offers" in out.stdout and "pricing" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "broker", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("broker ")
