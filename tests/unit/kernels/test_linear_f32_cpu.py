"""The C fp32 linear (csrc/linear_f32_cpu.c) against F.linear, and as the engine's fp32 linear.

Row counts 1-20 and 100 reach every micro-kernel of each build (AVX-512: 1-8 rows, three
panels at once or one; AVX2: 1-6 rows, three, two or one panel); column counts off the 16-wide
panels check the padding; the AVX2 and portable builds (a row alone equals it in a batch there
too, bit for bit, in the vector one), bias. What both C linears share: test_linear_cpu.py.
"""

import platform

import pytest
import torch
from torch import nn

from pipeline.kernels import cpu_build, cpu_linear, linear_f32_cpu
from tests.unit.kernels.kernel_helpers import linear_case


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: fp32 linears stay on oneDNN")
    assert cpu_build.load(linear_f32_cpu.LIBRARY) is not None


def case(rows: int, n: int, k: int, bias: bool, seed: int = 0):
    x, w, b, ref = linear_case(torch.float32, rows, n, k, bias, seed)
    return x, w, b, ref.float()


def run(x, w, b):
    return linear_f32_cpu.linear(x, linear_f32_cpu.pack(w), b, w.shape[0])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 48, 49, 100, 200])
@pytest.mark.parametrize("rows", [*range(1, 21), 100])
def test_matches_f_linear(rows, n, bias):
    x, w, b, ref = case(rows, n, 96, bias, seed=rows * 1000 + n)
    out = run(x, w, b)
    assert out.dtype == torch.float32 and out.shape == (rows, n)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 7, 576, 1536])
def test_odd_and_long_rows(k):
    x, w, b, ref = case(9, 40, k, True)
    torch.testing.assert_close(run(x, w, b), ref, atol=1e-4, rtol=1e-5)


# Builds an x86 host may pick by its flags, made here whatever this host would pick.
X86_BUILDS = {
    "avx2": ("-mno-avx512f", 1),
    "portable": ("-mno-avx512f -mno-avx2 -mno-fma", 0),
}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
@pytest.mark.parametrize("build", X86_BUILDS)
def test_other_isa_builds(tmp_path, monkeypatch, build):
    cflags, loop = X86_BUILDS[build]
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", cflags)
    cpu_build.load.cache_clear()
    try:
        assert linear_f32_cpu.simd() == loop
        assert cpu_linear.f32_kernel_applies() is (loop > 0)
        for rows in (1, 2, 3, 4, 5, 6, 7, 11):  # every micro-kernel of these builds
            x, w, b, ref = case(rows, 70, 48, True, seed=rows)
            packed = linear_f32_cpu.pack(w)
            out = linear_f32_cpu.linear(x, packed, b, 70)
            torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)
            if loop:  # the vector loops only: gcc vectorizes the portable ones per row count
                alone = [linear_f32_cpu.linear(x[i : i + 1], packed, b, 70) for i in range(rows)]
                assert torch.equal(torch.cat(alone), out)
        assert list(tmp_path.glob("linear_f32_cpu-*.so"))
    finally:
        cpu_build.load.cache_clear()


def test_prepack_gives_fp32_linears_the_kernel_where_it_has_a_vector_loop(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4, bias=False))
    x = torch.randn(2, 3, 8)
    ref = model(x)
    assert cpu_linear.prepack_linears(model) == 2
    want = cpu_linear.F32Linear if linear_f32_cpu.has_vector_path() else cpu_linear.PackedLinear
    assert isinstance(model[0], want) and isinstance(model[2], want)
    got = model(x)  # 3-D input, and each layer's output feeds the next
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(x.transpose(0, 1)).transpose(0, 1), got)
    monkeypatch.setenv("STEPWISE_KERNELS", "torch")  # C kernels off: oneDNN's GEMM
    model = nn.Sequential(nn.Linear(8, 16))
    assert not cpu_linear.f32_kernel_applies()
    if cpu_linear.supports(torch.float32):
        assert cpu_linear.prepack_linears(model) == 1
        assert isinstance(model[0], cpu_linear.PackedLinear)
