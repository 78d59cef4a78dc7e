"""Bad values: each good input of `good` with one value made wrong (infinite, NaN, far
out of bounds, of the wrong type, a date that is no date), plus the special cases that
need more than one file or their own environment."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Iterator
from typing import Any

from tests.hostile import good

INF, NAN = float("inf"), float("nan")
HUGE = 10**30

# Manifest: field path -> values that must each be refused.
MANIFEST_FAULTS: dict[tuple[str | int, ...], tuple[Any, ...]] = {
    ("resources", "nodes"): (0, -1, 10**12, 1.5, "two", True),
    ("resources", "cpus"): (0, -4, INF, 1e12, "lots"),
    ("resources", "memory"): (NAN, 1e300, -1),
    ("resources", "accelerators"): ("T4:1e9", "T4:inf", "T4:nan", "T4:-1", "B9999:1", 5, []),
    ("placement", "max_price_per_hour"): (INF, NAN, -1, 0, 1e300, "cheap"),
    ("placement", "spot"): ("sometimes", False),
    ("runtime", "estimate_hours"): (INF, NAN, 0, -1, 1e300, 10**400, "long"),
    ("runtime", "deadline"): (
        "99999999d",
        "9" * 30 + "d",
        "0m",
        "yesterday",
        5,
        "2026-13-45T00:00:00Z",
        "9999-12-31T23:59:59-01:00",
        "2026-07-01T18:00:00",
        "3000-01-01T00:00:00Z",
    ),
    ("checkpoint", "interval_minutes"): (INF, 0, -5, 1e12),
    ("checkpoint", "size_gb"): (NAN, -1, 1e30),
    ("checkpoint", "uri"): ("ftp://x/y", "s3://", "s3://user:PASS@/x"),
    ("data", 0, "size_gb"): (INF, -1, 1e30),
    ("data", 0, "location"): ("aws:mars-1",),
    ("budget", "max_cost"): (INF, 0, -1, 1e300),
    ("priority",): (2**70, -(2**70), 1.5, "high"),
    ("recovery", "max_restarts_on_error"): (HUGE, -1),
    ("recovery", "recover_on_exit_codes"): ([0], [256], [2**70]),
    ("name",): ("UPPER", "a" * 64, "é", ""),
    ("run", "env"): ({"A": 3}, {"BROKER_X": "y"}, {"1A": "x"}),
    ("run", "command"): ("", 5),
    ("apiVersion",): ("broker/v2",),
}
POOL_FAULTS: dict[tuple[str | int, ...], tuple[Any, ...]] = {
    ("count",): (10**12, 10**7, 0, -1, 1.5),
    ("cost_per_gpu_hour",): (INF, NAN, 0, -1, 1e9),
    ("gpus_per_node",): (HUGE, 0, 1025),
    ("vcpus_per_node",): (0, 1.5),
    ("memory_gib_per_node",): (NAN, INF, 0),
    ("nvlink_domain",): (3, HUGE),
    ("fabric",): ("carrier-pigeon",),
    ("gpu",): ("B9999",),
    ("location", "country"): ("NOR", False),
    ("location", "region"): ("bad region!",),
    ("name",): ("bad name!",),
    ("executor",): ({"kind": "k8s"},),
    ("nodes",): (["a"],),  # with count: one of the two
}
OVERLAY_FAULTS: dict[tuple[str | int, ...], tuple[Any, ...]] = {
    (0, "discount"): ("inf%", "nan%", "1e400%", "100%", 15, "+5%"),
    (1, "price_on_demand"): (INF, 1e300, -1, 0),
    (0, "cloud"): ("oracle",),
    (1, "instance_type"): ("n1-*",),
}
POLICY_FAULTS: dict[tuple[str | int, ...], tuple[Any, ...]] = {
    ("teams", "qa", "monthly_budget"): (INF, -1, 1e300),
    ("teams", "qa", "max_gpus"): (1e30, -1),
    ("teams", "qa", "share"): (0, NAN),
    ("teams", "qa", "max_gpus_by_model"): ({"B9999": 1},),
    ("queues", "batch"): (-1, INF),
    ("fair_share", "half_life_hours"): (0, INF),
    ("preemption", "protect_minutes"): (1e300,),
}
CATALOG_FAULTS: tuple[tuple[str, str], ...] = (
    ("price_on_demand", "inf"), ("price_on_demand", "1e400"), ("price_on_demand", "-1"),
    ("price_on_demand", "0"), ("price_on_demand", "abc"), ("price_spot", "-inf"),
    ("accelerator_count", "1e9"), ("accelerator_count", "-1"), ("vcpus", "-5"),
    ("memory_gib", "inf"), ("spot_interruption_rate", "1e9"), ("capacity", "-1"),
    ("as_of", "yesterday"), ("as_of", "2026-13-01"), ("as_of", "1999-12-31T23:00:00"),
    ("cloud", "oracle"),
)  # fmt: skip
VMS_FAULTS = (
    ("Price", "inf"),
    ("vCPUs", "-1"),
    ("AcceleratorCount", "abc"),
    ("MemoryGiB", "1e400"),
)
BILL_FAULTS = (
    ("lineItem/UnblendedCost", "inf"), ("lineItem/UnblendedCost", "1e999999"),
    ("lineItem/UnblendedCost", "abc"), ("lineItem/UnblendedCost", "NaN"),
    ("lineItem/CurrencyCode", "EUR"), ("lineItem/UsageStartDate", "yesterday"),
)  # fmt: skip
JOB_FAULTS = (
    ("hours", "inf"), ("hours", "-1"), ("hours", "nan"), ("hours", "abc"), ("hours", "1e400"),
    ("gpus", "1e12"), ("gpus", "99999999999"), ("submit_hours", "inf"), ("submit_hours", "-5"),
    ("deadline_hours", "nan"), ("deadline_hours", "0"),
)  # fmt: skip
SPOT_FAULTS: tuple[tuple[str, Any], ...] = (
    ("a-list", []),
    ("no-metadata", {"data": [1]}),
    ("gap-text", {"metadata": {"gap_seconds": "abc"}, "data": [1]}),
    ("gap-inf", {"metadata": {"gap_seconds": INF}, "data": [1]}),
    ("gap-negative", {"metadata": {"gap_seconds": -1}, "data": [1]}),
    ("gap-zero", {"metadata": {"gap_seconds": 0}, "data": [1]}),
    ("data-text", {"metadata": {"gap_seconds": 60}, "data": ["x"]}),
    ("data-huge", {"metadata": {"gap_seconds": 60}, "data": [1e30]}),
    ("data-negative", {"metadata": {"gap_seconds": 60}, "data": [-1]}),
    ("data-empty", {"metadata": {"gap_seconds": 60}, "data": []}),
    ("data-scalar", {"metadata": {"gap_seconds": 60}, "data": 5}),
    ("prices-inf", {"metadata": {"gap_seconds": 60}, "data": [1], "prices": [INF]}),
    ("prices-negative", {"metadata": {"gap_seconds": 60}, "data": [1], "prices": [-1]}),
)


def value_faults() -> Iterator[tuple[str, str, str, bool]]:
    """(kind, case name, file text, whether the error names a line) for every bad value."""
    for path, bad in _each(MANIFEST_FAULTS):
        yield "manifest", _name(path, bad), good.yaml_text(_set(good.MANIFEST, path, bad)), True
    for path, bad in _each(POOL_FAULTS):
        pools = _set(good.POOLS, ("pools", 0, *path), bad)
        yield "pools", _name(path, bad), good.yaml_text(pools), True
    for path, bad in _each(OVERLAY_FAULTS):
        rules = _set(good.OVERLAYS, ("overlays", *path), bad)
        yield "overlays", _name(path, bad), good.yaml_text(rules), True
    for path, bad in _each(POLICY_FAULTS):
        yield "policy", _name(path, bad), good.yaml_text(_set(good.POLICY, path, bad)), True
    for column, bad in CATALOG_FAULTS:
        yield (
            "catalog",
            f"{column}={bad}",
            _csv_cell(good.good_text("catalog"), 5, column, bad),
            True,
        )
    for column, bad in VMS_FAULTS:
        yield "vms", f"{column}={bad}", _csv_cell(good.good_text("vms"), 1, column, bad), True
    for column, bad in BILL_FAULTS:
        yield "bill", f"{column}={bad}", _csv_cell(good.good_text("bill"), 1, column, bad), True
    for column, bad in JOB_FAULTS:
        yield "jobs", f"{column}={bad}", _csv_cell(good.good_text("jobs"), 1, column, bad), False
    for name, data in SPOT_FAULTS:
        yield "spot", name, json.dumps(data), False
    catalog = good.good_text("catalog")
    header, *rows = catalog.splitlines()
    yield "catalog", "extra-field", "\n".join([header, rows[0], rows[1] + ",x", *rows[2:]]), True
    yield "catalog", "no-price-column", catalog.replace("price_on_demand", "price"), False
    quoted = rows[0].replace(",,", ',"two\nlines",', 1)
    bad_row = _csv_cell("\n".join([header, rows[1]]), 0, "price_on_demand", "inf").splitlines()[1]
    yield "catalog", "quoted-then-bad", "\n".join([header, quoted, bad_row]), True
    yield (
        "catalog",
        "huge-field",
        f"{header}\n{rows[0].replace(',,', ',' + 'x' * 200_000 + ',', 1)}",
        False,
    )
    yield "bill", "not-a-bill", "a,b\n1,2\n", False
    yield (
        "jobs",
        "no-hours-column",
        good.JOBS_TRACE.replace("hours,deadline", "time,deadline"),
        False,
    )
    yield "vms", "no-price-column", good.good_text("vms").replace("Price", "Cost", 1), False


Special = tuple[str, str, tuple, tuple[str, ...], tuple[tuple[str, str], ...], str]


def special_cases() -> Iterator[Special]:
    """(kind, name, files, argv, environment, the file named) of cases that need several
    files or their own environment; each must exit 2."""
    from tests.hostile.cases import Fifo

    manifest = good.good_text("manifest").encode()
    for command in ("validate", "plan", "submit"):
        files = (("jobs/x.yaml", Fifo()), ("jobs/a.yaml", manifest))
        argv = (command, "{d}/jobs")
        if command == "submit":
            argv = (command, "--state", "{d}/s.db", "{d}/jobs")
        yield "manifest", f"fifo-in-folder/{command}", files, argv, (), "x.yaml"
    spot = good.good_text("spot").encode()
    files = (("spot/foo.json", spot),)
    yield "spot", "bad-file-name", files, _simulate_spot("{d}/spot/foo.json"), (), "foo.json"
    gz = "us-east-1a_v100_1.json.gz"
    files = ((gz, b"\x1f\x8b\x08\x00garbage"),)
    yield "spot", "gz-corrupt", files, _simulate_spot(f"{{d}}/{gz}"), (), gz
    bomb = {"metadata": {"gap_seconds": 60}, "data": [1] * 300_000}
    files = ((gz, gzip.compress(json.dumps(bomb).encode())),)
    env = (("BROKER_MAX_TRACE_BYTES", "100000"),)
    yield "spot", "gz-bomb", files, _simulate_spot(f"{{d}}/{gz}"), env, gz


OFFERS, VALIDATE = ("offers", "--summary"), ("validate", "{m}")


def config_faults() -> Iterator[tuple[str, str, tuple[int, ...], tuple[tuple[str, ...], ...]]]:
    """(name, broker.toml text, exit codes, the commands that read the setting): bad
    settings files, and suspicious ones (a warning, exit 0)."""
    both = (OFFERS, VALIDATE)  # a file that is not TOML stops every command
    yield "syntax", "catalog = \n", (2,), both
    yield "table-twice", "[a]\nx = 1\n[a]\ny = 2\n", (2,), both
    yield "deep-array", "x = " + "[" * 5000 + "]" * 5000 + "\n", (2,), both
    yield "catalog-number", "catalog = 5\n", (2,), (OFFERS,)
    yield "catalog-missing", 'catalog = "/nonexistent/offers.csv"\n', (2,), (OFFERS,)
    yield "pools-device", 'pools = "/dev/zero"\n', (2,), (OFFERS,)
    yield "freshness-text", 'freshness_days = "abc"\n', (2,), (OFFERS,)
    yield "freshness-negative", "freshness_days = -3\n", (2,), (OFFERS,)
    yield "cap-negative", "max_yaml_bytes = -1\n", (2,), (VALIDATE,)
    yield "cap-text", 'max_catalog_bytes = "big"\n', (2,), (OFFERS,)
    yield "depth-zero", "max_nesting_depth = 0\n", (2,), (VALIDATE,)
    yield "clouds-number", "clouds = 5\n", (2,), (("queue", "--state", "{d}/state.db"),)
    yield (
        "clouds-unknown",
        'clouds = ["aws", "oracle"]\n',
        (2,),
        (("queue", "--state", "{d}/state.db"),),
    )
    yield "unknown-key", 'catalgo = "x.csv"\n', (0,), both
    yield "unknown-table", "[aws]\nregion = 'us-east-1'\n", (0,), both


def environment_faults() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(variable, value, argv): settings given badly through the environment."""
    for value in ("abc", "0", "-5", "1.5"):
        yield "BROKER_MAX_YAML_BYTES", value, ("validate", "{m}")
    yield "BROKER_MAX_NESTING_DEPTH", "0", ("validate", "{m}")
    yield "BROKER_MAX_CATALOG_BYTES", "abc", ("offers", "--summary")
    yield "BROKER_FRESHNESS_DAYS", "abc", ("offers", "--summary")
    yield "BROKER_FRESHNESS_DAYS", "1e400", ("plan", "{m}")
    yield "BROKER_CLOUDS", "gpc", ("queue", "--state", "{d}/state.db")
    yield "BROKER_POOLS", "/dev/zero", ("offers", "--summary")
    yield "BROKER_POLICY", "/dev/zero", ("queue", "--state", "{d}/state.db")
    yield "BROKER_CATALOG", "{d}", ("plan", "{m}")
    yield "BROKER_OVERLAYS", "{d}/missing.yaml", ("offers", "--summary")


def alias_bomb() -> str:
    """Nine levels of ten aliases each: a billion values in a dozen lines."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def _simulate_spot(path: str) -> tuple[str, ...]:
    return ("simulate", "--jobs", "synthetic:2", "--spot", path)


def _each(faults: dict[tuple[str | int, ...], tuple[Any, ...]]) -> Iterator[tuple[tuple, Any]]:
    for path, bads in faults.items():
        for bad in bads:
            yield path, bad


def _name(path: tuple[str | int, ...], bad: Any) -> str:
    shown = repr(bad) if not isinstance(bad, str) else bad
    return ".".join(map(str, path)) + "=" + shown[:24]


def _set(data: Any, path: tuple[str | int, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _csv_cell(text: str, row: int, column: str, value: str) -> str:
    """`text` (CSV) with the cell of `column` in data row `row` (0-based) set to `value`."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text, newline="")))
    rows[row + 1][rows[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
