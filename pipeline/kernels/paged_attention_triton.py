"""Triton paged decode attention, split-K: same signature as `paged_decode_attention_torch`.

Grid (B, KVH, splits): a program takes one sequence, one KV head with the G query heads that
share it, and one slice of the context; it walks the slice in BLOCK_N-token tiles, gathering
each token's K/V through the block table (any block_size), with an online softmax in fp32.
With more than one split, each writes its normalized partial output and log-sum-exp, and a
second kernel merges them. A row with context length 0 (a padded CUDA-graph slot) reads
nothing and writes zeros.

Dots run on fp32 tiles: exact for fp32 ("ieee"), and for bf16/fp16 inputs "tf32" keeps them
exact too (both fit in tf32's 10-bit mantissa) while using tensor cores. (Triton 3.9's
interpreter also computes bf16 `tl.dot` wrongly; fp32 tiles avoid that.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.kernels.dispatch import check, check_contiguous_last, check_dtype

KERNEL = "paged_decode_attention"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)
MAX_SPLITS = 32
# Programs to aim for (splits fill the device when B x KVH alone would not); CPU: the
# interpreter, where a few splits are enough to exercise the reduce step.
TARGET_PROGRAMS_CPU = 8


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    ctx_ptr,
    out_ptr,
    part_ptr,
    lse_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_kh,
    stride_kblk,
    stride_kslot,
    stride_vh,
    stride_vblk,
    stride_vslot,
    stride_btb,
    stride_ob,
    stride_oh,
    block_size,
    num_splits,
    num_heads,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.program_id(2)
    ctx = tl.load(ctx_ptr + b).to(tl.int32)
    # This sequence's own context in num_splits equal slices (whole tiles): every split has
    # work whatever the block-table width (under CUDA graphs it is max_model_len's).
    per_split = tl.cdiv(tl.cdiv(ctx, num_splits), BLOCK_N) * BLOCK_N
    start = s * per_split
    end = tl.minimum(start + per_split, ctx)

    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    heads = kvh * GROUP + offs_g
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    gd_mask = g_mask[:, None] & d_mask[None, :]
    q = tl.load(
        q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=gd_mask,
        other=0.0,
    ).to(tl.float32)  # [G, D]
    k_base = k_ptr + kvh.to(tl.int64) * stride_kh
    v_base = v_ptr + kvh.to(tl.int64) * stride_vh
    bt_row = bt_ptr + b.to(tl.int64) * stride_btb

    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_sum = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        tok = n0 + offs_n
        n_mask = tok < end
        blk = tl.load(bt_row + tok // block_size, mask=n_mask, other=0).to(tl.int64)
        slot = (tok % block_size).to(tl.int64)
        nd_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(
            k_base + (blk * stride_kblk + slot * stride_kslot)[:, None] + offs_d[None, :],
            mask=nd_mask,
            other=0.0,
        ).to(tl.float32)  # [N, D]
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [G, N]
        scores = tl.where(n_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + (blk * stride_vblk + slot * stride_vslot)[:, None] + offs_d[None, :],
            mask=nd_mask,
            other=0.0,
        ).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m = m_new

    has = l_sum > 0
    out = tl.where(has[:, None], acc / tl.where(has, l_sum, 1.0)[:, None], 0.0)
    if SPLIT:
        row = (b.to(tl.int64) * num_heads + heads) * num_splits + s  # part: [B, H, S, D]
        tl.store(part_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], out, mask=gd_mask)
        lse = tl.where(has, m + tl.log(tl.where(has, l_sum, 1.0)), float("-inf"))
        tl.store(lse_ptr + row, lse, mask=g_mask)
    else:
        dst = out_ptr + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=gd_mask)


@triton.jit
def _reduce_kernel(
    part_ptr,
    lse_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    num_splits,
    num_heads,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < num_splits
    row = (b.to(tl.int64) * num_heads + h) * num_splits + offs_s
    lse = tl.load(lse_ptr + row, mask=s_mask, other=float("-inf"))
    valid = lse > float("-inf")
    mx = tl.max(tl.where(valid, lse, -3.0e38), 0)
    w = tl.where(valid, tl.exp(lse - mx), 0.0)  # [S]
    denom = tl.sum(w, 0)
    parts = tl.load(
        part_ptr + row[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    out = tl.sum(parts * w[:, None], 0) / tl.where(denom > 0, denom, 1.0)
    dst = out_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_d
    tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)


def _check(q, k_cache, v_cache, block_tables, context_lens) -> None:
    check(q.dim() == 3, KERNEL, f"q must be [B, H, D], got shape {tuple(q.shape)}")
    check(k_cache.dim() == 4, KERNEL, f"k_cache must be [KVH, blocks, bs, D], got {k_cache.shape}")
    check(v_cache.shape == k_cache.shape, KERNEL, f"v_cache {v_cache.shape} != k {k_cache.shape}")
    b, h, d = q.shape
    kvh = k_cache.shape[0]
    check(k_cache.shape[3] == d, KERNEL, f"head_dim: q has {d}, cache has {k_cache.shape[3]}")
    check(h % kvh == 0, KERNEL, f"{h} query heads are not a multiple of {kvh} KV heads")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        check_dtype(t, KERNEL, name, DTYPES)
        check_contiguous_last(t, KERNEL, name)
        check(t.device == q.device, KERNEL, f"{name} is on {t.device}, q on {q.device}")
    check(k_cache.dtype == v_cache.dtype == q.dtype, KERNEL, "q, k_cache, v_cache dtypes differ")
    check(
        block_tables.dim() == 2 and block_tables.shape[0] == b,
        KERNEL,
        f"block_tables must be [B={b}, max_blocks], got {tuple(block_tables.shape)}",
    )
    check(block_tables.stride(1) == 1, KERNEL, "block_tables rows must be contiguous")
    check(
        context_lens.shape == (b,), KERNEL, f"context_lens must be [{b}], got {context_lens.shape}"
    )
    check(context_lens.is_contiguous(), KERNEL, "context_lens must be contiguous")
    check_dtype(block_tables, KERNEL, "block_tables", INDEX_DTYPES)
    check_dtype(context_lens, KERNEL, "context_lens", INDEX_DTYPES)


def num_splits_for(batch: int, kv_heads: int, max_tokens: int, block_n: int, device) -> int:
    """Splits per sequence so that batch x kv_heads x splits programs fill the device."""
    if device.type == "cuda":
        target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    else:
        target = TARGET_PROGRAMS_CPU
    tiles = max(1, triton.cdiv(max_tokens, block_n))
    return max(1, min(triton.cdiv(target, batch * kv_heads), MAX_SPLITS, tiles))


def paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    workspace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """One query token per sequence. q: [B, H, D] -> [B, H, D]; rows with context 0 -> 0."""
    _check(q, k_cache, v_cache, block_tables, context_lens)
    b, h, d = q.shape
    kvh, _, block_size, _ = k_cache.shape
    group = h // kvh
    out = torch.empty_like(q)
    if b == 0:
        return out
    block_n = 64 if q.is_cuda else 16
    # An upper bound from shapes only: no device sync, so this works under CUDA-graph capture.
    max_tokens = block_tables.shape[1] * block_size
    splits = num_splits_for(b, kvh, max_tokens, block_n, q.device)
    ws = workspace if workspace is not None else {}
    part = lse = out  # unused placeholders when there is a single split
    if splits > 1:
        need = b * h * splits
        if "part" not in ws or ws["part"].numel() < need * d or ws["part"].device != q.device:
            ws["part"] = torch.empty(need * d, dtype=torch.float32, device=q.device)
            ws["lse"] = torch.empty(need, dtype=torch.float32, device=q.device)
        part, lse = ws["part"][: need * d], ws["lse"][:need]
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    _split_kernel[(b, kvh, splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, lse, scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        block_size, splits, h,
        GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), HEAD_DIM=d,
        BLOCK_D=triton.next_power_of_2(d), BLOCK_N=block_n, SPLIT=splits > 1,
        PRECISION=precision,
    )  # fmt: skip
    if splits > 1:
        _reduce_kernel[(b, h)](
            part, lse, out, out.stride(0), out.stride(1), splits, h,
            HEAD_DIM=d, BLOCK_D=triton.next_power_of_2(d),
            BLOCK_S=max(2, triton.next_power_of_2(splits)),
        )  # fmt: skip
    return out
