"""Triton logits statistics: same signature as `logits_stats_torch`.

Grid (S,): one row per program, an online pass over BLOCK_V-wide vocabulary tiles keeping
the running max m, s = sum exp(x - m) and t = sum exp(x - m) * x (each rescaled when m
grows). Then lse = m + log s, entropy = lse - t / s, max-probability = 1 / s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.kernels.dispatch import check, check_contiguous_last, check_dtype
from pipeline.kernels.logits_stats import LogitsStats

KERNEL = "logits_stats"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _stats_kernel(
    x_ptr,
    argmax_ptr,
    maxp_ptr,
    ent_ptr,
    lse_ptr,
    stride_row,
    vocab,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride_row
    offs = tl.arange(0, BLOCK_V)
    m = tl.full([1], float("-inf"), tl.float32)
    s = tl.zeros([1], tl.float32)
    t = tl.zeros([1], tl.float32)
    best = tl.zeros([1], tl.int64)
    for v0 in range(0, vocab, BLOCK_V):
        idx = v0 + offs
        mask = idx < vocab
        x = tl.load(base + idx, mask=mask, other=float("-inf")).to(tl.float32)
        tile_max = tl.max(x, 0)
        # First index of the tile's max; a later tile wins only with a strictly larger max.
        tile_arg = tl.min(tl.where(x == tile_max, idx, vocab), 0).to(tl.int64)
        best = tl.where(tile_max > m, tile_arg, best)
        m_new = tl.maximum(m, tile_max)
        alpha = tl.exp(m - m_new)
        p = tl.where(mask, tl.exp(x - m_new), 0.0)
        s = s * alpha + tl.sum(p, 0)
        t = t * alpha + tl.sum(p * tl.where(mask, x, 0.0), 0)
        m = m_new
    lse = m + tl.log(s)
    first = tl.arange(0, 1)
    tl.store(argmax_ptr + row + first, best)
    tl.store(maxp_ptr + row + first, 1.0 / s)
    tl.store(ent_ptr + row + first, lse - t / s)
    tl.store(lse_ptr + row + first, lse)


def logits_stats_triton(logits: torch.Tensor) -> LogitsStats:
    check(logits.dim() == 2, KERNEL, f"logits must be [S, V], got shape {tuple(logits.shape)}")
    check_dtype(logits, KERNEL, "logits", DTYPES)
    check_contiguous_last(logits, KERNEL, "logits")
    rows, vocab = logits.shape
    check(vocab > 0, KERNEL, "empty vocabulary")
    dev = logits.device
    out = LogitsStats(
        torch.empty(rows, dtype=torch.int64, device=dev),
        torch.empty(rows, dtype=torch.float32, device=dev),
        torch.empty(rows, dtype=torch.float32, device=dev),
        torch.empty(rows, dtype=torch.float32, device=dev),
    )
    if rows:
        block_v = min(4096 if logits.is_cuda else 1024, max(16, triton.next_power_of_2(vocab)))
        _stats_kernel[(rows,)](*(logits, *out), logits.stride(0), vocab, BLOCK_V=block_v)
    return out
