"""The C bf16 linear (csrc/linear_bf16_cpu.c) against F.linear in fp32 on the same bf16 inputs.

Row counts 1-13 and 100 reach every micro-kernel (1-6 rows, several panels at once and one at a
time); column counts off the 16-wide panels check the padding; the AVX2 and portable builds,
the AVX-512 BF16 one (vdpbf16ps, its own packed layout) where the CPU has it, and bias. What
both C linears share: test_linear_cpu.py.
"""

import platform

import pytest
import torch
import torch.nn.functional as F

from pipeline.kernels import cpu_build, linear_bf16_cpu
from tests.unit.kernels.kernel_helpers import assert_close

BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: bf16 linears stay on F.linear")
    assert cpu_build.load(linear_bf16_cpu.LIBRARY) is not None


def case(rows: int, n: int, k: int, bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g).to(BF16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(BF16)
    b = torch.randn(n, generator=g).to(BF16) if bias else None
    ref = F.linear(x.float(), w.float(), None if b is None else b.float())
    return x, w, b, ref


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 100, 200])
@pytest.mark.parametrize("rows", [*range(1, 14), 100])
def test_matches_f_linear(rows, n, bias):
    x, w, b, ref = case(rows, n, 96, bias, seed=rows * 1000 + n)
    out = linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, n)
    assert out.dtype == BF16 and out.shape == (rows, n)
    assert_close(out, ref, BF16)


@pytest.mark.parametrize("k", [1, 7, 576])
def test_odd_and_long_rows(k):
    x, w, b, ref = case(9, 40, k, True)
    assert_close(linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, 40), ref, BF16)


# Builds an x86 host may pick by its flags, made here whatever this host would pick.
X86_BUILDS = {
    "avx512-without-bf16": ("-mno-avx512bf16", True),  # the AVX2 loop: oneDNN goes first there
    "avx2": ("-mno-avx512f", True),
    "portable": ("-mno-avx512f -mno-avx2 -mno-fma", False),
}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
@pytest.mark.parametrize("build", X86_BUILDS)
def test_other_isa_builds(tmp_path, monkeypatch, build):
    cflags, vector = X86_BUILDS[build]
    x, w, b, ref = case(11, 70, 48, True)
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", cflags)
    cpu_build.load.cache_clear()
    try:
        assert linear_bf16_cpu.has_vector_path() is vector
        out = linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, 70)
        assert list(tmp_path.glob("linear_bf16_cpu-*.so"))
    finally:
        cpu_build.load.cache_clear()
    assert_close(out, ref, BF16)


@pytest.mark.skipif("avx512_bf16" not in cpu_build.cpu_flags(), reason="no AVX-512 BF16 here")
@pytest.mark.parametrize("k", [2, 7, 96, 577])
def test_dot_loop_where_the_cpu_has_avx512_bf16(tmp_path, monkeypatch, k):
    """The native build takes vdpbf16ps (loop 3) with its own layout, pairs of k and an odd K's
    last k apart; it agrees with F.linear as the AVX2 build does, rows 1-13 through every
    micro-kernel, bias and padding columns included."""
    assert linear_bf16_cpu.KERNEL.simd() == 3
    for rows in (1, 5, 6, 13):
        x, w, b, ref = case(rows, 70, k, True, seed=k + rows)
        assert_close(linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, 70), ref, BF16)
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", "-mno-avx512f")
    cpu_build.load.cache_clear()
    try:
        assert linear_bf16_cpu.KERNEL.simd() == 1
        x, w, b, ref = case(13, 70, k, True, seed=k)
        assert_close(linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, 70), ref, BF16)
    finally:
        cpu_build.load.cache_clear()
