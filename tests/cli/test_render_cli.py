"""Tables that fit, through the real entry point: the terminal's width (COLUMNS), cut
cells and left-out columns said so, --wide, one number of decimals per column, numbers
right-aligned, counts as integers in JSON, one CSV table for many jobs, CSV booleans,
colour only on a terminal and never with NO_COLOR."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.runner import run_cli
from tests.fakes.offers import write_catalog

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "examples" / "jobs"


@pytest.fixture
def catalog(tmp_path) -> str:
    return str(write_catalog(tmp_path / "offers.csv"))


def boxed(text: str) -> list[list[str]]:
    """The body rows of the first boxed table in `text`, as stripped cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
        elif rows and line.startswith("└"):
            break
    return rows


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_table_fits_the_width_columns_says(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    result = run_cli(capsys, "plan", str(JOBS / "llama-finetune.yaml"))
    assert result.code == 0, result.stderr
    lines = table_lines(result.stdout)
    assert lines and max(len(line) for line in lines) <= width
    wide = run_cli(capsys, "plan", str(JOBS / "llama-finetune.yaml"), "--wide")
    full = table_lines(wide.stdout)
    assert max(len(line) for line in full) > width  # the whole table does not fit
    assert "…" not in wide.stdout and "left out" not in wide.stdout
    if width < 120:
        note = next(line for line in result.stdout.splitlines() if "left out" in line)
        assert f"left out to fit {width} columns" in note and "--wide" in note
        assert "expected" in result.stdout  # the figure that matters stays
    headers = "".join(line for line in full if line.startswith("┃"))
    assert "spot overhead" in headers


def test_a_pipe_is_never_cut(capsys):
    result = run_cli(capsys, "plan", str(JOBS / "llama-finetune.yaml"))
    assert "…" not in result.stdout and "left out" not in result.stdout


def test_numbers_are_right_aligned_with_one_number_of_decimals_per_column(
    capsys, catalog, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "400")
    for gpu in ("T4", "A100"):
        result = run_cli(capsys, "offers", "--catalog", catalog, "--gpu", gpu)
        assert result.code == 0, result.stderr
        rows = boxed(result.stdout)
        assert rows
        header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
        names = [cell.strip() for cell in header.strip("┃").split("┃")]
        prices = [row[names.index("price $/h")] for row in rows]
        places = {len(p.split(".")[1]) for p in prices}
        assert places == ({4} if gpu == "T4" else {2}), prices  # all below 1 USD: 4 decimals
        for index in range(len(names)):
            cells = [row[index] for row in rows if re.fullmatch(r"[\d,]+(\.\d+)?", row[index])]
            decimals = {len(c.partition(".")[2]) for c in cells}
            assert len(decimals) <= 1, (names[index], cells)
    body = [line for line in table_lines(result.stdout) if line.startswith("│")]
    assert all(line.endswith(" │") for line in body)
    price_at = names.index("price $/h")
    for line in body:
        cell = line.strip("│").split("│")[price_at]
        assert cell.endswith(" ") and cell.rstrip()[-1].isdigit()
        assert cell.startswith("  ")  # padded on the left: right-aligned


def test_counts_are_integers_in_json(capsys, catalog):
    offers = json.loads(run_cli(capsys, "offers", "--catalog", catalog, "-o", "json").stdout)
    first = offers["offers"][0]
    assert isinstance(first["accelerator_count"], int) and isinstance(first["vcpus"], int)
    assert isinstance(first["price"], float)
    plan = json.loads(
        run_cli(capsys, "plan", str(JOBS / "llama-finetune.yaml"), "-o", "json").stdout
    )
    assert plan["placements"][0]["accelerator_count"] == 8
    assert isinstance(plan["placements"][0]["accelerator_count"], int)


def test_plan_of_many_jobs_is_one_csv_table_with_a_job_column(capsys):
    result = run_cli(capsys, "plan", str(JOBS), "-o", "csv")
    assert result.code == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0][0] == "job" and "expected_cost" in rows[0]
    assert sum(1 for row in rows if row == rows[0]) == 1  # one header
    planned = json.loads(run_cli(capsys, "plan", str(JOBS), "-o", "json").stdout)["jobs"]
    assert {row[0] for row in rows[1:]} == {d["job"] for d in planned} and len(planned) > 1
    assert "bundled snapshot" in result.stderr and "bundled" not in result.stdout


def test_csv_booleans_are_true_or_false(capsys, catalog):
    result = run_cli(capsys, "offers", "--catalog", catalog, "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {row["stale"] for row in rows} == {"true", "false"}


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """What `broker ARGS` writes to stdout when stdout is a terminal."""
    primary, secondary = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-m", "broker", *args],
            stdout=secondary,
            stderr=subprocess.DEVNULL,
            env=env,
            check=True,
            timeout=60,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(primary)


def test_colour_only_on_a_terminal_and_never_with_no_color(catalog):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    env["TERM"] = "xterm"
    args = ("offers", "--catalog", catalog, "--gpu", "T4")
    coloured = on_a_terminal(*args, env=env)
    assert "\x1b[1m" in coloured and "┏" in coloured
    plain = on_a_terminal(*args, env=env | {"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "┏" in plain
    piped = subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, env=env
    )
    assert "\x1b[" not in piped.stdout and "┏" in piped.stdout
