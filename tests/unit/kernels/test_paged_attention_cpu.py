"""The C paged decode attention (csrc/paged_attention_cpu.c) against the torch reference.

Ragged contexts across block boundaries, shuffled block tables, GQA ratios 1-4, the
specialised head dims (64, 128) and a generic one, an odd block size, fp32 and bf16, one and
two threads, rows of context 0, bad arguments, the dispatcher and the build cache. The
engine-level checks (greedy tokens against HF) run with this kernel too: it is the default
decode attention on CPU.
"""

import platform

import pytest
import torch

from pipeline.kernels import cpu_build, dispatch, paged_attention, paged_attention_cpu
from pipeline.kernels.paged_attention_cpu import paged_decode_attention_cpu
from tests.unit.kernels.kernel_helpers import assert_close, make_case, reference

BS = 16
CONTEXTS = [1, BS - 1, BS, BS + 1, 3 * BS + 5, 200]


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the engine keeps the torch reference")
    # A host with a compiler must build it: a silent fallback would hide a broken kernel.
    assert cpu_build.load(paged_attention_cpu.LIBRARY) is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kv_heads, group", [(2, 1), (1, 2), (3, 3), (2, 4)])
@pytest.mark.parametrize("head_dim", [32, 64, 128, 24])
def test_matches_reference(dtype, kv_heads, group, head_dim):
    q, k, v, tables, ctx = make_case("cpu", dtype, kv_heads, group, CONTEXTS, head_dim=head_dim)
    scale = head_dim**-0.5
    out = paged_decode_attention_cpu(q, k, v, tables, ctx, scale)
    assert out.dtype == dtype and out.shape == q.shape
    assert_close(out, reference(q, k, v, tables, ctx, scale), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("head_dim", [32, 64])
def test_odd_block_size_strided_q_and_int32_indices(dtype, head_dim):
    # Block size 6: the vector loops' chunks of 16 (and 64) positions span blocks.
    contexts = [1, 5, 6, 7, 40, 131]
    q, k, v, tables, ctx = make_case("cpu", dtype, 2, 2, contexts, bs=6, head_dim=head_dim)
    wide = torch.cat([q, torch.zeros_like(q)], dim=1)[:, : q.shape[1]]  # rows not dense
    assert not wide.is_contiguous()
    out = paged_decode_attention_cpu(wide, k, v, tables.int(), ctx.int(), 0.3)
    assert_close(out, reference(q, k, v, tables, ctx, 0.3), dtype)


# Builds an x86 host may pick by its flags, each made here whatever this host would pick:
# AVX-512 without BF16 (bf16 rows widened once per chunk), AVX2 + FMA (paged_attention_avx2.h)
# and the portable loops (no vector ISA named). A flag this host lacks builds its own path.
X86_BUILDS = {
    "avx512-no-bf16": "-mno-avx512bf16",
    "avx2": "-mno-avx512f",
    "portable": "-mno-avx512f -mno-avx2 -mno-fma",
}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flag")
@pytest.mark.parametrize("build", X86_BUILDS)
@pytest.mark.parametrize("head_dim", [64, 128, 24])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_other_isa_builds_match_the_native_one(tmp_path, monkeypatch, dtype, head_dim, build):
    # On the same inputs as the native build: head dims 64 and 128 take the vector path (128:
    # two passes of the AVX2 V accumulators), 24 its portable fallback.
    q, k, v, tables, ctx = make_case("cpu", dtype, 3, 3, CONTEXTS, head_dim=head_dim)
    native = paged_decode_attention_cpu(q, k, v, tables, ctx, 0.125)
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", X86_BUILDS[build])
    cpu_build.load.cache_clear()
    try:
        portable = paged_decode_attention_cpu(q, k, v, tables, ctx, 0.125)
        assert list(tmp_path.glob("paged_attention_cpu-*.so"))  # a second build was made
    finally:
        cpu_build.load.cache_clear()
    ref = reference(q, k, v, tables, ctx, 0.125)
    assert_close(portable, ref, dtype)
    assert_close(native, ref, dtype)


def test_same_result_on_one_and_two_threads():
    q, k, v, tables, ctx = make_case("cpu", torch.float32, 2, 2, CONTEXTS * 4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = paged_decode_attention_cpu(q, k, v, tables, ctx, 0.2)
        torch.set_num_threads(2)
        two = paged_decode_attention_cpu(q, k, v, tables, ctx, 0.2)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)  # each row is one work item: no reduction across threads


def test_rows_with_context_zero_write_zeros():
    q, k, v, tables, ctx = make_case("cpu", torch.bfloat16, 2, 2, [BS + 1, 1, 3])
    ctx[1] = 0
    out = paged_decode_attention_cpu(q, k, v, tables, ctx, 0.5)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    keep = [0, 2]
    ref = reference(q[keep], k, v, tables[keep], ctx[keep], 0.5)
    assert_close(out[keep], ref, torch.bfloat16)


def test_empty_batch():
    q, k, v, tables, ctx = make_case("cpu", torch.float32, 1, 1, [3])
    out = paged_decode_attention_cpu(q[:0], k, v, tables[:0], ctx[:0], 1.0)
    assert out.shape == (0, *q.shape[1:])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a[3].__setitem__((0, 0), 10**6), "block id"),
        (lambda a: a[3].__setitem__((1, 0), -1), "block id"),
        (lambda a: a[4].__setitem__(0, 10**4), "context length"),
        (lambda a: a[4].__setitem__(0, -2), "context length"),
        (lambda a: a.__setitem__(0, a[0].double()), "dtype"),
        (lambda a: a.__setitem__(1, a[1].to(torch.bfloat16)), "k_cache is"),
        (lambda a: a.__setitem__(1, torch.cat([a[1], a[1]], -1)[..., :32]), "dense"),
        (lambda a: a.__setitem__(0, a[0][:, :3]), "q "),
    ],
)
def test_bad_arguments_raise_not_crash(mutate, match):
    args = make_case("cpu", torch.float32, 2, 2, [BS + 1, 4])
    mutate(args)
    with pytest.raises(dispatch.KernelArgumentError, match=match):
        paged_decode_attention_cpu(*args, 0.5)


def test_dispatch_picks_the_c_kernel_on_cpu_unless_torch_is_forced(monkeypatch):
    q, k, v, tables, ctx = make_case("cpu", torch.float32, 2, 2, CONTEXTS)
    calls = []
    real = paged_attention_cpu.paged_decode_attention_cpu
    monkeypatch.setattr(
        paged_attention_cpu, "paged_decode_attention_cpu", lambda *a: calls.append(1) or real(*a)
    )
    paged_attention.paged_decode_attention(q, k, v, tables, ctx, 0.5)
    assert calls == [1]
    assert paged_attention.decode_impl(q) == "c"
    assert not paged_attention.pads_to_group_width(paged_attention.decode_impl(q))
    monkeypatch.setenv(dispatch.ENV, "torch")
    out = paged_attention.paged_decode_attention(q, k, v, tables, ctx, 0.5)
    assert calls == [1]
    assert paged_attention.decode_impl(q) == "torch"
    assert paged_attention.pads_to_group_width(paged_attention.decode_impl(q))
    assert_close(out, reference(q, k, v, tables, ctx, 0.5), torch.float32)
    # fp16 has no C version: the reference serves it.
    assert not paged_attention_cpu.is_supported(q.half())


def test_build_is_cached_and_a_missing_compiler_falls_back(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    first = cpu_build.build(paged_attention_cpu.LIBRARY)
    mtime = first.stat().st_mtime_ns
    assert cpu_build.build(paged_attention_cpu.LIBRARY) == first
    assert first.stat().st_mtime_ns == mtime and first.parent == tmp_path
    assert not list(tmp_path.glob("*.tmp*"))  # neither the library nor its object file

    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    cpu_build.load.cache_clear()
    try:
        assert cpu_build.load(paged_attention_cpu.LIBRARY) is None
        assert "using the torch reference" in caplog.text
        q, k, v, tables, ctx = make_case("cpu", torch.float32, 1, 2, [5])
        assert not paged_attention_cpu.is_supported(q)
        out = paged_attention.paged_decode_attention(q, k, v, tables, ctx, 0.5)
        assert_close(out, reference(q, k, v, tables, ctx, 0.5), torch.float32)
    finally:
        cpu_build.load.cache_clear()


def test_a_failing_compile_reports_the_compiler_output(tmp_path, monkeypatch):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'error: this compiler refuses' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path / "k"))
    monkeypatch.setenv("CC", str(cc))
    with pytest.raises(RuntimeError, match="this compiler refuses"):
        cpu_build.build(paged_attention_cpu.LIBRARY)
    assert not list((tmp_path / "k").glob("*"))
