"""bench/engine_throughput.py: seeded requests, the step schedule, the FLOP count and the GPU
roofline's bytes per step (pure)."""

from __future__ import annotations

import sys

import pytest

from tests.unit.bench.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield load_bench("engine_throughput")
    sys.modules.pop("engine_throughput", None)


DIMS = {
    "hidden": 576,
    "intermediate": 1536,
    "layers": 30,
    "heads": 9,
    "kv_heads": 3,
    "head_dim": 64,
    "vocab": 49152,
}


def test_requests_are_seeded_and_in_range(bench):
    a = bench.make_requests(32, seed=0, vocab_size=49152)
    assert a == bench.make_requests(32, seed=0, vocab_size=49152)
    assert a != bench.make_requests(32, seed=1, vocab_size=49152)
    assert len(a) == 32
    for r in a:
        assert 16 <= len(r.prompt) <= 256
        assert 16 <= r.out_len <= 128
        assert all(bench.MIN_TOKEN_ID <= t < 49152 for t in r.prompt)
    # a 32-request sample should spread over the ranges, not sit at one end
    assert max(len(r.prompt) for r in a) - min(len(r.prompt) for r in a) > 100
    assert max(r.out_len for r in a) - min(r.out_len for r in a) > 50


def test_schedule_covers_every_token(bench):
    reqs = bench.make_requests(32, seed=0, vocab_size=49152)
    steps = bench.schedule(reqs)
    fed = sum(rows for rows, _ in steps)
    assert fed == sum(len(r.prompt) + r.out_len - 1 for r in reqs)
    assert sum(sampled for _, sampled in steps) == sum(r.out_len for r in reqs)
    assert all(rows <= bench.MAX_NUM_BATCHED_TOKENS for rows, _ in steps)


def test_flops_of_one_short_request(bench):
    reqs = [bench.BenchRequest(prompt=[100, 101, 102], out_len=2)]
    flops = bench.useful_flops(DIMS, reqs)
    per_layer = 2 * (576 * 960 + 576 * 576 + 576 * 3072 + 1536 * 576)
    assert flops["linear"] == per_layer * 30 * 4  # 3 prompt tokens + 1 fed-back token
    assert flops["lm_head"] == 2 * 576 * 49152 * 2
    assert flops["attention"] == 4 * 9 * 64 * 30 * (1 + 2 + 3 + 4)


def test_match_rate(bench):
    m = bench.match([[1, 2, 3, 4], [5, 6]], [[1, 2, 9, 9], [5, 6]])
    assert m == {"exact": 0.5, "prefix": 0.75}


def test_vllm_binds(bench):
    assert bench.vllm_binds("auto,all", threads=2) == ["auto", "0-1"]
    assert bench.vllm_binds("auto,all", threads=1) == ["auto", "0"]
    assert bench.vllm_binds("0-1,0-1", threads=2) == ["0-1"]


SMALL_DIMS = {
    "hidden": 8,
    "intermediate": 16,
    "layers": 2,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 4,
    "vocab": 10,
}


def test_step_bytes_count_weights_once_per_step_plus_the_kv_read(bench):
    reqs = [bench.BenchRequest([100] * 3, 3), bench.BenchRequest([100] * 5, 2)]
    # One prefill step (8 prompt tokens), then decode steps t = 1 (both), t = 2 (the first).
    per_layer = (8 * (8 + 2 * 4) + 8 * 8 + 8 * 32 + 16 * 8) * 2  # bf16
    weights = 2 * per_layer + 8 * 10 * 2
    kv_token = 2 * 2 * 1 * 4 * 2
    expected = [weights + 8 * kv_token, weights + (4 + 6) * kv_token, weights + 5 * kv_token]
    assert bench.step_bytes(SMALL_DIMS, reqs, itemsize=2) == expected


def test_the_qwen_shape_is_qwen2_5_1_5b(bench):
    cfg = bench.RANDOM_MODELS["qwen2.5-1.5b"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (
        1536,
        28,
        2,
    )


def test_the_table_prints_a_gpu_run(bench, capsys):
    """A GPU run's figures (bandwidth roofline, no GFLOP/s) print: the first H200 run
    (2026-12-04) stopped here with a KeyError after timing both sides."""
    reqs = bench.make_requests(4, 0, DIMS["vocab"])
    side = {"tok_s": 100.0, "wall_s": 1.0, "lengths_ok": True}
    fig = {
        "load_avg_start": [0.1],
        "load_avg_end": [0.2],
        "hf": side | {"computed_tokens": 10},
        "stepwise": dict(side),
        "ratio_hf": 1.0,
        "match": {"stepwise~hf": {"exact": 1.0, "prefix": 1.0}},
        "gpu": "NVIDIA H200",
        "copy_gbps": 4224.0,
        "roofline_s": 0.5,
        "roofline_fraction": 0.5,
    }
    bench.print_table("bfloat16", fig, reqs)
    out = capsys.readouterr().out
    assert "stepwise" in out and "engine at 50%" in out
