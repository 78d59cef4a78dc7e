"""Good inputs of every kind, the seeds the hostile cases are made from: each is read
without complaint by the command that takes it (a test checks it), so that what a
mutation breaks is the mutation's doing."""

from __future__ import annotations

import functools
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MANIFEST = {
    "apiVersion": "broker/v1",
    "name": "hostile",
    "team": "qa",
    "priority": 1,
    "resources": {"accelerators": "T4:1", "cpus": "4+", "memory": 16, "nodes": 1},
    "placement": {"spot": "prefer", "max_price_per_hour": 40},
    "run": {"command": "python3 train.py", "env": {"MODE": "fast"}},
    "runtime": {"estimate_hours": 2, "deadline": "36h"},
    "checkpoint": {"uri": "s3://ckpt/hostile/", "interval_minutes": 30, "size_gb": 10},
    "data": [{"uri": "s3://data/set/", "size_gb": 5, "location": "aws:us-east-1"}],
    "budget": {"max_cost": 500},
    "recovery": {"max_restarts_on_error": 1, "recover_on_exit_codes": [137]},
}

POOLS = {
    "pools": [
        {
            "name": "lab",
            "location": {"region": "onprem-lab", "country": "US"},
            "gpu": "T4",
            "gpus_per_node": 4,
            "vcpus_per_node": 32,
            "memory_gib_per_node": 128,
            "nvlink_domain": 0,
            "fabric": "ethernet",
            "cost_per_gpu_hour": 0.2,
            "count": 2,
        }
    ]
}

OVERLAYS = {
    "overlays": [
        {"cloud": "aws", "discount": "15%", "market": "both"},
        {"cloud": "gcp", "instance_type": "n1-standard-8", "price_on_demand": 1.5},
    ]
}

POLICY = {
    "queues": {"default": 1, "batch": 0.5},
    "fair_share": {"half_life_hours": 168},
    "preemption": {"enabled": True, "protect_minutes": 30},
    "teams": {"qa": {"share": 1, "max_gpus": 8, "monthly_budget": 1000}},
}

JOBS_TRACE = (
    "name,team,submit_hours,gpu,gpus,hours,deadline_hours\nj1,qa,0,V100,1,2,\nj2,qa,1,V100,2,3,10\n"
)
SPOT_NAME = "us-east-1a_v100_1.json"
SPOT = {"metadata": {"gap_seconds": 3600}, "data": [1, 1, 0, 1, 1]}
TOML = "freshness_days = 30\n"


def yaml_text(data: object) -> str:
    """`data` as YAML (PyYAML writes .inf, .nan and big integers as YAML reads them)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def catalog_csv(rows: int = 40) -> str:
    """The bundled catalog's header, its first `rows` rows and its T4 rows (a catalog of
    the real shape that sells the good manifest's GPU)."""
    header, *lines = (REPO / "pricing" / "data" / "offers.csv").read_text().splitlines()
    chosen = lines[:rows] + [line for line in lines[rows:] if ",T4," in line]
    return "\n".join([header, *chosen]) + "\n"


def vms_csv() -> str:
    return (REPO / "tests" / "fakes" / "skypilot_small" / "aws" / "vms.csv").read_text()


def bill_csv() -> str:
    return (REPO / "tests" / "fakes" / "billing" / "aws_cur.csv").read_text()


def spot_json() -> str:
    return json.dumps(SPOT)


@functools.cache
def good_text(kind: str) -> str:
    """The good file of one kind, as text."""
    return {
        "manifest": lambda: yaml_text(MANIFEST),
        "pools": lambda: yaml_text(POOLS),
        "overlays": lambda: yaml_text(OVERLAYS),
        "policy": lambda: yaml_text(POLICY),
        "catalog": catalog_csv,
        "vms": vms_csv,
        "bill": bill_csv,
        "jobs": lambda: JOBS_TRACE,
        "spot": spot_json,
        "config": lambda: TOML,
    }[kind]()
