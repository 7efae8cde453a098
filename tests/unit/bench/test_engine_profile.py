"""bench/engine_profile.py: every piece of the forward is timed and the parts and the rest add
up to the wall time; the matmuls are timed hot and cold."""

from __future__ import annotations

import sys

import pytest

from tests.unit.bench.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    load_bench("engine_throughput")  # engine_profile imports it by name
    yield load_bench("engine_profile")
    sys.modules.pop("engine_profile", None)
    sys.modules.pop("engine_throughput", None)


def test_the_parts_of_a_run_add_up_to_its_wall_time(bench, llama_dir):
    dims = bench.et.model_dims(llama_dir)
    reqs = bench.et.make_requests(3, 0, dims["vocab"], prompt_len=(70, 90), output_len=(4, 8))
    prof = bench.profile_engine(llama_dir, "float32", 1, reqs)
    parts = prof["parts"]
    # a prefill chunk and decode steps, through every piece of the forward
    for piece in ("linear", "attention", "elementwise"):
        assert parts[f"{piece}/decode"]["calls"] > 0
        assert parts[f"{piece}/prefill"]["calls"] > 0
    layers = dims["layers"]
    assert parts["attention/decode"]["calls"] % layers == 0  # one call a layer a step
    total = sum(v["s"] for v in parts.values()) + prof["rest_s"]
    assert total == pytest.approx(prof["wall_s"])
    assert 0 <= prof["rest_s"] < prof["wall_s"]


def test_matmuls_are_timed_with_one_weight_and_with_every_layer_s(bench, llama_dir):
    dims = bench.et.model_dims(llama_dir)
    m = bench.hot_and_cold(dims, "float32", 1, rows=4, reps=2)
    assert set(m) == {"hot", "cold"}
    assert m["hot"] > 0 and m["cold"] > 0


def test_the_timers_come_off_after_a_run(bench, llama_dir):
    import pipeline.engine.model as model_module
    from pipeline.kernels import elementwise

    before = (model_module.paged_attention, elementwise.rotary)
    dims = bench.et.model_dims(llama_dir)
    reqs = bench.et.make_requests(1, 0, dims["vocab"], prompt_len=(8, 8), output_len=(2, 2))
    bench.profile_engine(llama_dir, "float32", 1, reqs)
    assert (model_module.paged_attention, elementwise.rotary) == before
