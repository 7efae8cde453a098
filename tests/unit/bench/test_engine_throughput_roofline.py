"""bench/engine_throughput.py's GPU roofline: bytes per step (pure; the GPU run is separate)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "bench" / "engine_throughput.py"
DIMS = {
    "hidden": 8,
    "intermediate": 16,
    "layers": 2,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 4,
    "vocab": 10,
}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("engine_throughput_roofline", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_step_bytes_count_weights_once_per_step_plus_the_kv_read(bench):
    reqs = [bench.BenchRequest([100] * 3, 3), bench.BenchRequest([100] * 5, 2)]
    # One prefill step (8 prompt tokens), then decode steps t = 1 (both), t = 2 (the first).
    per_layer = (8 * (8 + 2 * 4) + 8 * 8 + 8 * 32 + 16 * 8) * 2  # bf16
    weights = 2 * per_layer + 8 * 10 * 2
    kv_token = 2 * 2 * 1 * 4 * 2
    expected = [weights + 8 * kv_token, weights + (4 + 6) * kv_token, weights + 5 * kv_token]
    assert bench.step_bytes(DIMS, reqs, itemsize=2) == expected


def test_the_qwen_shape_is_qwen2_5_1_5b(bench):
    cfg = bench.RANDOM_MODELS["qwen2.5-1.5b"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (
        1536,
        28,
        2,
    )
