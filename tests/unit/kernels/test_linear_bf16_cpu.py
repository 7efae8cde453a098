"""The C bf16 linear (csrc/linear_bf16_cpu.c) against F.linear in fp32 on the same bf16 inputs.

Row counts 1-13 and 100 reach every micro-kernel (1-6 rows, several panels at once and one at a
time); column counts off the 16-wide panels check the padding; the AVX2 and portable builds,
one and two threads, strided rows, bias, and bad arguments.
"""

import platform

import pytest
import torch
import torch.nn.functional as F

from pipeline.kernels import cpu_build, linear_bf16_cpu
from pipeline.kernels.dispatch import KernelArgumentError
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


def test_strided_rows_and_no_rows():
    x, w, _, ref = case(5, 33, 64, False)
    wide = torch.cat([x, torch.zeros_like(x)], dim=1)[:, :64]
    assert not wide.is_contiguous()
    packed = linear_bf16_cpu.pack(w)
    assert_close(linear_bf16_cpu.linear(wide, packed, None, 33), ref, BF16)
    assert linear_bf16_cpu.linear(x[:0], packed, None, 33).shape == (0, 33)


def test_same_result_on_one_and_two_threads():
    # Large enough to run in parallel; each output is summed by one thread, so they are equal.
    x, w, b, _ = case(32, 1000, 256, True)
    packed, before = linear_bf16_cpu.pack(w), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = linear_bf16_cpu.linear(x, packed, b, 1000)
        torch.set_num_threads(2)
        two = linear_bf16_cpu.linear(x, packed, b, 1000)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


# Builds an x86 host may pick by its flags, made here whatever this host would pick.
X86_BUILDS = {
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


def test_bad_arguments_raise():
    x, w, b, _ = case(3, 20, 16, True)
    packed = linear_bf16_cpu.pack(w)
    with pytest.raises(KernelArgumentError, match="linear_bf16_cpu"):
        linear_bf16_cpu.linear(x.float(), packed, b, 20)
    with pytest.raises(KernelArgumentError, match="packed weight"):
        linear_bf16_cpu.linear(x, packed, b, 40)
    with pytest.raises(KernelArgumentError, match="bias"):
        linear_bf16_cpu.linear(x, packed, b[:10], 20)
    with pytest.raises(KernelArgumentError, match="bias"):
        linear_bf16_cpu.linear(x, packed, b.float(), 20)
    with pytest.raises(KernelArgumentError, match="weight must be 2-D bf16"):
        linear_bf16_cpu.pack(w.float())
    with pytest.raises(KernelArgumentError, match=r"x torch.bfloat16 \(16,\)"):
        linear_bf16_cpu.linear(x[0], packed, b, 20)
    with pytest.raises(KernelArgumentError, match="bias"):  # every other value: not dense
        linear_bf16_cpu.linear(x, packed, torch.stack([b, b], dim=1)[:, 0], 20)


def test_empty_rows_of_k_give_the_bias():
    x, w, b, _ = case(3, 20, 0, True)
    out = linear_bf16_cpu.linear(x, linear_bf16_cpu.pack(w), b, 20)
    assert torch.equal(out, b.expand(3, 20))


def test_a_row_comes_out_the_same_alone_or_in_any_batch():
    # Each output is one fp32 chain over k in order, whatever micro-kernel its rows fall in:
    # a sequence's logits do not depend on what else is in the batch, so speculation's
    # verifying pass (k + 1 rows) gives the tokens decoding one row at a time would.
    x, w, b, _ = case(13, 100, 96, True)
    packed = linear_bf16_cpu.pack(w)
    batch = linear_bf16_cpu.linear(x, packed, b, 100)
    for i in range(13):
        assert torch.equal(linear_bf16_cpu.linear(x[i : i + 1], packed, b, 100)[0], batch[i])
    assert torch.equal(linear_bf16_cpu.linear(x[3:8], packed, b, 100), batch[3:8])
