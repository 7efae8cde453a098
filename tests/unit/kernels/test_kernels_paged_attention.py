"""Triton paged decode attention vs the torch reference (the engine's original decode path).

Contexts in one ragged batch cover the block boundaries (1, bs - 1, bs, bs + 1, several
blocks); block tables are shuffled; GQA ratios 1, 2, 4; both the single-pass and the split-K
+ reduce paths. Tolerances: kernel_helpers.TOLERANCES against the reference in fp32.
"""

import pytest
import torch

from pipeline.kernels import dispatch
from pipeline.kernels.paged_attention import paged_decode_attention
from tests.unit.kernels.kernel_helpers import DTYPES, assert_close, make_case, reference

BS = 16
CONTEXTS = [1, BS - 1, BS, BS + 1, 3 * BS + 5]


CASES = [("split", dtype, group) for dtype in DTYPES for group in (1, 2, 4)] + [
    ("single", torch.bfloat16, 1),
    ("single", torch.float16, 2),
    ("single", torch.float32, 4),
]


@pytest.mark.parametrize("splits, dtype, group", CASES, ids=str)
def test_matches_reference(kernels, device, dtype, group, splits, monkeypatch):
    mod = kernels("paged_attention")
    # 20 target programs split this batch's contexts in two (B x KVH = 10); 1 forbids it.
    monkeypatch.setattr(mod, "TARGET_PROGRAMS_CPU", 20 if splits == "split" else 1)
    q, k, v, tables, ctx = make_case(device, dtype, 2, group, CONTEXTS)
    scale = q.shape[-1] ** -0.5
    out = mod.paged_decode_attention_triton(q, k, v, tables, ctx, scale, {})
    assert out.dtype == dtype and out.shape == q.shape
    assert_close(out, reference(q, k, v, tables, ctx, scale), dtype)


def test_odd_block_size_head_dim_and_reused_workspace(kernels, device, monkeypatch):
    mod = kernels("paged_attention")
    monkeypatch.setattr(mod, "TARGET_PROGRAMS_CPU", 6)
    ws: dict = {}
    for seed, contexts in enumerate(([1, 5, 6, 7, 40], [13, 2])):
        q, k, v, tables, ctx = make_case(
            device, torch.float32, 1, 3, contexts, bs=6, head_dim=24, seed=seed
        )
        out = mod.paged_decode_attention_triton(q, k, v, tables, ctx, 0.2, ws)
        assert_close(out, reference(q, k, v, tables, ctx, 0.2), torch.float32)


def test_rows_with_context_zero_are_skipped(kernels, device):
    """Padded CUDA-graph rows (context 0) read nothing and come out as zeros."""
    mod = kernels("paged_attention")
    q, k, v, tables, ctx = make_case(device, torch.float32, 2, 2, [BS + 1, 1, 1])
    ctx[1] = 0
    tables[1] = 10**6  # a block id far out of range: must never be read
    out = mod.paged_decode_attention_triton(q, k, v, tables, ctx, 0.5, {})
    assert torch.equal(out[1].cpu(), torch.zeros_like(out[1]).cpu())
    keep = [0, 2]
    ref = reference(q[keep], k, v, tables[keep], ctx[keep], 0.5)
    assert_close(out[keep], ref, torch.float32)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: {**a, "q": a["q"][..., :16]}, "head_dim"),
        (lambda a: {**a, "q": a["q"][:, :3]}, "multiple"),
        (lambda a: {**a, "q": a["q"].half()}, "dtypes differ"),
        (lambda a: {**a, "block_tables": a["block_tables"].float()}, "block_tables has dtype"),
        (lambda a: {**a, "block_tables": a["block_tables"][:1]}, "block_tables must be"),
        (lambda a: {**a, "context_lens": a["context_lens"][:1]}, "context_lens must be"),
        (lambda a: {**a, "k_cache": a["k_cache"].transpose(2, 3).contiguous().mT}, "k_cache must"),
        (lambda a: {**a, "v_cache": a["v_cache"][:, :2]}, "v_cache"),
    ],
)
def test_wrapper_rejects_bad_arguments(kernels, device, mutate, message):
    mod = kernels("paged_attention")
    q, k, v, tables, ctx = make_case(device, torch.float32, 2, 2, [3, 4])
    args = {"q": q, "k_cache": k, "v_cache": v, "block_tables": tables, "context_lens": ctx}
    with pytest.raises(dispatch.KernelArgumentError, match=message):
        mod.paged_decode_attention_triton(**mutate(args), scale=1.0)


def test_dispatch_picks_reference_on_cpu_and_triton_when_forced(kernels, device, monkeypatch):
    q, k, v, tables, ctx = make_case(device, torch.float32, 2, 2, CONTEXTS)
    mod = kernels("paged_attention")
    calls = []
    real = mod.paged_decode_attention_triton
    monkeypatch.setattr(dispatch, "triton_module", lambda name: mod)
    monkeypatch.setattr(
        mod, "paged_decode_attention_triton", lambda *a: calls.append(1) or real(*a)
    )
    for choice, expect in (("torch", 0), ("auto", int(device.type == "cuda")), ("triton", 1)):
        calls.clear()
        monkeypatch.setenv(dispatch.ENV, choice)
        out = paged_decode_attention(q, k, v, tables, ctx, 0.3)
        assert len(calls) == expect, choice
        assert_close(out, reference(q, k, v, tables, ctx, 0.3), torch.float32)
    monkeypatch.setenv(dispatch.ENV, "cuda")
    with pytest.raises(ValueError, match="STEPWISE_KERNELS"):
        paged_decode_attention(q, k, v, tables, ctx, 0.3)
