"""GPU facts: canonical names, aliases and request parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.gpus import GPU_MODELS, UnknownGpu, canonical_gpu, find_gpu, parse_gpu_request


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
