"""Triton KV export/import: same signatures as `export_blocks_torch`/`import_blocks_torch`.

Grid (blocks, L * 2 * KVH): a program copies one block of one (layer, K|V, head) row: up to
bs tokens of D values, masked past the last token on import. The handoff tensor may be a
view (an import reads the first `tokens` of a whole-block buffer), so its strides are used.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.kernels.dispatch import check, check_dtype

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _copy_kernel(
    kv_ptr,
    buf_ptr,
    blocks_ptr,
    num_tokens,
    kv_heads,
    block_size,
    stride_kv_row,
    stride_kv_block,
    stride_buf_l,
    stride_buf_c,
    stride_buf_h,
    stride_buf_t,
    HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TO_BUF: tl.constexpr,
):
    i = tl.program_id(0)
    r = tl.program_id(1)  # row = (layer * 2 + k_or_v) * kv_heads + head
    layer = r // (2 * kv_heads)
    c = (r // kv_heads) % 2
    h = r % kv_heads
    blk = tl.load(blocks_ptr + i).to(tl.int64)
    offs_t = tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    tok = i * block_size + offs_t
    mask = ((offs_t < block_size) & (tok < num_tokens))[:, None] & (offs_d[None, :] < HEAD_DIM)
    kv_off = r.to(tl.int64) * stride_kv_row + blk * stride_kv_block
    kv_off = kv_off + offs_t[:, None] * HEAD_DIM + offs_d[None, :]
    buf_off = (
        layer.to(tl.int64) * stride_buf_l
        + c.to(tl.int64) * stride_buf_c
        + h.to(tl.int64) * stride_buf_h
        + tok[:, None].to(tl.int64) * stride_buf_t
        + offs_d[None, :]
    )
    if TO_BUF:
        x = tl.load(kv_ptr + kv_off, mask=mask)
        tl.store(buf_ptr + buf_off, x.to(buf_ptr.dtype.element_ty), mask=mask)
    else:
        x = tl.load(buf_ptr + buf_off, mask=mask)
        tl.store(kv_ptr + kv_off, x.to(kv_ptr.dtype.element_ty), mask=mask)


def _check(kernel: str, kv, blocks, buf, num_tokens: int) -> None:
    check(
        kv.dim() == 6 and kv.shape[1] == 2,
        kernel,
        f"kv must be [L, 2, KVH, blocks, bs, D], got {tuple(kv.shape)}",
    )
    check(kv.is_contiguous(), kernel, "kv (the block pool) must be contiguous")
    l, _, h, _, bs, d = kv.shape
    check(
        buf.dim() == 5 and tuple(buf.shape[:3]) == (l, 2, h) and buf.shape[4] == d,
        kernel,
        f"handoff buffer must be [{l}, 2, {h}, tokens, {d}], got {tuple(buf.shape)}",
    )
    check(buf.stride(4) == 1, kernel, f"handoff buffer rows must be contiguous: {buf.stride()}")
    check(blocks.dim() == 1 and blocks.is_contiguous(), kernel, "blocks must be a 1-D tensor")
    check_dtype(blocks, kernel, "blocks", (torch.int32, torch.int64))
    need = -(-num_tokens // bs)
    check(
        blocks.shape[0] == need,
        kernel,
        f"{num_tokens} tokens need {need} blocks, got {blocks.shape[0]}",
    )
    check_dtype(kv, kernel, "kv", DTYPES)
    check(buf.dtype == kv.dtype, kernel, f"buffer dtype {buf.dtype} != pool dtype {kv.dtype}")
    for name, t in (("blocks", blocks), ("buffer", buf)):
        check(t.device == kv.device, kernel, f"{name} is on {t.device}, the pool on {kv.device}")


def _launch(kv, blocks, buf, num_tokens: int, to_buf: bool) -> None:
    l, _, h, n, bs, d = kv.shape
    if blocks.shape[0] == 0:
        return
    _copy_kernel[(blocks.shape[0], l * 2 * h)](
        kv, buf, blocks, num_tokens, h, bs, n * bs * d, bs * d,
        buf.stride(0), buf.stride(1), buf.stride(2), buf.stride(3),
        HEAD_DIM=d, BLOCK_T=triton.next_power_of_2(bs), BLOCK_D=triton.next_power_of_2(d),
        TO_BUF=to_buf,
    )  # fmt: skip


def export_blocks_triton(kv: torch.Tensor, blocks: torch.Tensor, out: torch.Tensor) -> None:
    """out[:, :, :, i * bs : (i + 1) * bs] = kv[:, :, :, blocks[i]] for every block i."""
    bs = kv.shape[4] if kv.dim() == 6 else 1
    _check("export_blocks", kv, blocks, out, out.shape[3] if out.dim() == 5 else 0)
    check(
        out.shape[3] == blocks.shape[0] * bs,
        "export_blocks",
        f"out must hold {blocks.shape[0]} whole blocks, has {out.shape[3]} tokens",
    )
    _launch(kv, blocks, out, out.shape[3], to_buf=True)


def import_blocks_triton(kv: torch.Tensor, blocks: torch.Tensor, src: torch.Tensor) -> None:
    """Scatter src [L, 2, KVH, tokens, D] into `blocks` (ceil(tokens / bs) of them) of kv."""
    _check("import_blocks", kv, blocks, src, src.shape[3] if src.dim() == 5 else 0)
    _launch(kv, blocks, src, src.shape[3], to_buf=False)
