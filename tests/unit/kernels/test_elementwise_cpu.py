"""The C element-wise ops (csrc/elementwise_cpu.c) against their torch references, and the
engine with them against the engine on the references.

bf16 intermediates are rounded where the references round, so bf16 results agree to an ulp
(exp and summation order may differ); fp32 to float rounding.
"""

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.kernels import cpu_build, dispatch, elementwise, elementwise_cpu
from tests.unit.kernels.kernel_helpers import assert_close

DTYPES = [torch.float32, torch.bfloat16]
ROWS = [1, 7, 300]  # 300 rows x 576 is past the C code's threshold for going parallel


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the engine keeps the torch references")
    assert cpu_build.load(elementwise_cpu.LIBRARY) is not None


def randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", ROWS)
def test_rms_norm(dtype, rows):
    wide = randn(rows, 600, dtype=dtype)
    x = wide[:, :576]  # strided rows, as a slice of a wider activation
    w = randn(576, dtype=dtype, seed=1)
    got = elementwise_cpu.rms_norm(x, w, 1e-5)
    assert_close(got, elementwise.rms_norm_torch(x, w, 1e-5), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", ROWS)
def test_add_rms_norm_updates_the_residual_in_place(dtype, rows):
    x, residual = randn(rows, 37, dtype=dtype), randn(rows, 37, dtype=dtype, seed=2)
    w = randn(37, dtype=dtype, seed=1)
    ref_out, ref_residual = elementwise.add_rms_norm_torch(x, residual.clone(), w, 1e-6)
    out, new_residual = elementwise_cpu.add_rms_norm(x, residual, w, 1e-6)
    assert new_residual is residual
    assert torch.equal(residual, ref_residual)  # one rounded add: exactly the reference's
    assert_close(out, ref_out, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", ROWS)
def test_silu_and_mul(dtype, rows):
    x = randn(rows, 2 * 1536, dtype=dtype) * 4
    got = elementwise_cpu.silu_and_mul(x)
    assert got.shape == (rows, 1536)
    assert_close(got, elementwise.silu_and_mul_torch(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", ROWS)
def test_rotary_in_place_on_views_of_the_qkv_projection(dtype, rows):
    heads, kv_heads, d = 9, 3, 64
    qkv = randn(rows, (heads + 2 * kv_heads) * d, dtype=dtype)
    q, k, _ = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k = q.view(rows, heads, d), k.view(rows, kv_heads, d)
    angles = torch.rand(rows, 1, d, generator=torch.Generator().manual_seed(3)) * 6
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    ref_q, ref_k = elementwise.rotary_torch(q.clone(), k.clone(), cos, sin)
    got_q, got_k = elementwise_cpu.rotary(q, k, cos, sin)
    assert got_q.data_ptr() == q.data_ptr() and got_k.data_ptr() == k.data_ptr()
    assert_close(got_q, ref_q, dtype)
    assert_close(got_k, ref_k, dtype)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: elementwise_cpu.rms_norm(torch.ones(2, 3, 4), torch.ones(4), 1e-5), "2-D"),
        (lambda: elementwise_cpu.rms_norm(torch.ones(2, 4), torch.ones(5), 1e-5), "weight"),
        (
            lambda: elementwise_cpu.rms_norm(torch.ones(2, 4), torch.ones(4).bfloat16(), 1e-5),
            "mixed dtypes",
        ),
        (
            lambda: elementwise_cpu.add_rms_norm(
                torch.ones(2, 4), torch.ones(3, 4), torch.ones(4), 1e-5
            ),
            "shape",
        ),
        (lambda: elementwise_cpu.silu_and_mul(torch.ones(2, 5)), "odd width"),
        (lambda: elementwise_cpu.silu_and_mul(torch.ones(2, 4).t()), "contiguous"),
        (lambda: elementwise_cpu.silu_and_mul(torch.ones(2, 4).half()), "float16"),
    ],
)
def test_bad_arguments_raise(call, match):
    with pytest.raises(dispatch.KernelArgumentError, match=match):
        call()


def test_dispatch_uses_c_on_cpu_and_the_reference_when_forced(monkeypatch):
    calls = []
    real = elementwise_cpu.silu_and_mul
    monkeypatch.setattr(elementwise_cpu, "silu_and_mul", lambda x: calls.append(1) or real(x))
    x = randn(3, 8, dtype=torch.float32)
    elementwise.silu_and_mul(x)
    assert calls == [1]
    monkeypatch.setenv(dispatch.ENV, "torch")
    torch.testing.assert_close(elementwise.silu_and_mul(x), elementwise.silu_and_mul_torch(x))
    assert calls == [1]
    # What the C code does not take goes to the reference: 3-D norms (Qwen3's q/k norm), fp16.
    monkeypatch.delenv(dispatch.ENV)
    w = torch.ones(8)
    elementwise.rms_norm(x.view(3, 2, 4), w[:4], 1e-5)
    elementwise.silu_and_mul(x.half())
    assert calls == [1]


def generate(path, dtype, kernels, monkeypatch, max_tokens=12):
    monkeypatch.setenv(dispatch.ENV, kernels)
    engine = Engine(EngineConfig(model=str(path), dtype=dtype, device="cpu", block_size=16))
    engine.runner.keep_logits = True
    prompts = [[5 + (7 * i + j) % 250 for j in range(n)] for i, n in enumerate((3, 17, 40))]
    outs = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return [list(o.token_ids) for o in outs], dict(engine.runner.last_logits)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_engine_on_c_kernels_matches_the_references(tiny_models, family, monkeypatch):
    ref_tokens, ref_logits = generate(tiny_models[family], "float32", "torch", monkeypatch)
    tokens, logits = generate(tiny_models[family], "float32", "auto", monkeypatch)
    assert tokens == ref_tokens
    for rid, row in ref_logits.items():
        torch.testing.assert_close(logits[rid], row, atol=1e-4, rtol=1e-4)
    # bf16: an ulp here and there may flip a near-tie token later on; the prefill's logits agree.
    _, bf_ref = generate(tiny_models[family], "bfloat16", "torch", monkeypatch, max_tokens=1)
    _, bf = generate(tiny_models[family], "bfloat16", "auto", monkeypatch, max_tokens=1)
    for rid, row in bf_ref.items():
        torch.testing.assert_close(bf[rid], row, atol=5e-2, rtol=5e-2)
