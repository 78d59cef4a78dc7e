"""GPU facts: canonical names, aliases and request parsing."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.gpus import (
    GPU_MODELS,
    HOST_FLOORS,
    UnknownGpu,
    canonical_gpu,
    find_gpu,
    host_floor,
    parse_gpu_request,
)


def test_names_and_aliases_are_unique():
    keys = [m.name.lower() for m in GPU_MODELS] + [a.lower() for m in GPU_MODELS for a in m.aliases]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("name", "canonical", "memory"),
    [
        ("A100", "A100", 40),
        ("a100-80gb", "A100-80GB", 80),
        ("h100", "H100", 80),
        ("H100-MEGA", "H100", 80),
        ("v100-32gb", "V100-32GB", 32),
        ("l40s", "L40S", 48),
        ("MI300X", "MI300X", 192),
    ],
)
def test_canonical_names_and_memory(name, canonical, memory):
    assert canonical_gpu(name) == canonical
    assert find_gpu(name).memory_gib == memory


def test_every_model_has_a_sourced_throughput_relative_to_a100():
    assert find_gpu("A100").relative_throughput == 1.0
    for model in GPU_MODELS:
        assert model.relative_throughput > 0 and model.throughput_source
    assert find_gpu("H100").relative_throughput > find_gpu("A100").relative_throughput
    assert find_gpu("T4").relative_throughput < find_gpu("V100").relative_throughput


def test_requests():
    assert parse_gpu_request("A100:8") == ("A100", 8.0)
    assert parse_gpu_request("t4") == ("T4", 1.0)
    assert parse_gpu_request("tpu-v5p-8:1", known=["tpu-v5p-8"]) == ("tpu-v5p-8", 1.0)
    with pytest.raises(UnknownGpu, match="did you mean"):
        parse_gpu_request("A1000:8")
    with pytest.raises(UnknownGpu, match="bad GPU count"):
        parse_gpu_request("A100:eight")
    with pytest.raises(UnknownGpu, match="positive"):
        parse_gpu_request("A100:0")


@given(st.sampled_from(GPU_MODELS), st.integers(1, 64))
def test_parse_round_trips(model, count):
    assert parse_gpu_request(f"{model.name.lower()}:{count}") == (model.name, float(count))


def _native_shapes(table) -> list[tuple[str, str, str, float, float, float]]:
    """(cloud, type, GPU, count, vCPUs, GiB) of the clouds' own GPU shapes: every GPU row
    but GCE N1, whose host is chosen freely beside the GPUs."""
    frame = table if isinstance(table, pd.DataFrame) else table.to_frame()
    gpu = frame[(frame["accelerator_count"] > 0) & frame["vcpus"].notna()]
    gpu = gpu[~((gpu["cloud"] == "gcp") & gpu["instance_type"].str.startswith("n1-"))]
    gpu = gpu[gpu["cloud"] != "onprem"]
    columns = ["cloud", "instance_type", "accelerator", "accelerator_count", "vcpus", "memory_gib"]
    return list(gpu[columns].drop_duplicates().itertuples(index=False, name=None))


def _below_floor(shapes) -> list[str]:
    bad = []
    for cloud, kind, gpu, count, vcpus, memory in shapes:
        floor = host_floor(gpu)
        if floor is None:
            continue
        if vcpus < floor.vcpus_per_gpu * count or memory < floor.memory_gib_per_gpu * count:
            bad.append(f"{cloud} {kind} {gpu}:{count:g} {vcpus:g} vCPUs {memory:g} GiB")
    return bad


def test_every_gpu_has_a_host_floor():
    assert {m.name for m in GPU_MODELS} == set(HOST_FLOORS)
    assert all(f.vcpus_per_gpu > 0 and f.memory_gib_per_gpu > 0 for f in HOST_FLOORS.values())


def test_no_gpu_shape_of_the_bundled_catalog_is_below_its_floor():
    """A floor never excludes a cloud's own pairing of host and GPU."""
    from pricing.catalog import load_catalog

    shapes = _native_shapes(load_catalog().offers)
    assert len(shapes) > 50
    assert _below_floor(shapes) == []


def test_no_gpu_shape_of_the_skypilot_catalogs_is_below_its_floor():
    from pricing.importers.skypilot import import_skypilot
    from tests.conftest import skypilot_catalogs

    catalogs = skypilot_catalogs()
    if catalogs is None:
        pytest.skip("../shared/catalogs/skypilot/v8 not present (real-data test)")
    shapes = _native_shapes(import_skypilot(catalogs))
    assert len(shapes) > 60
    assert _below_floor(shapes) == []


def test_gce_n1_hosts_below_the_floor_exist_so_the_floor_matters():
    """The reason for floors: a catalog pairs a T4 with a 1-vCPU N1 host."""
    from pricing.importers.skypilot import import_skypilot
    from tests.conftest import skypilot_catalogs

    catalogs = skypilot_catalogs()
    if catalogs is None:
        pytest.skip("../shared/catalogs/skypilot/v8 not present (real-data test)")
    frame = import_skypilot(catalogs)
    t4 = frame[(frame["accelerator"] == "T4") & (frame["instance_type"] == "n1-standard-1")]
    assert len(t4) and (t4["vcpus"] < host_floor("T4").vcpus_per_gpu).all()
