"""Triton KV store: same signature as `store_kv_torch`. Grid (T,): one token, all its heads."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.kernels.dispatch import check, check_contiguous_last, check_dtype

KERNEL = "store_kv"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _store_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ch,
    stride_cslot,
    num_kv_heads,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot < 0:  # padded row: nothing to write
        return
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h[:, None] < num_kv_heads) & (offs_d[None, :] < HEAD_DIM)
    src = t.to(tl.int64)
    k = tl.load(k_ptr + src * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
    v = tl.load(v_ptr + src * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
    # The cache seen as [KVH, num_blocks * block_size, D]: slot indexes dim 1 directly.
    dst = offs_h[:, None].to(tl.int64) * stride_ch + slot * stride_cslot + offs_d[None, :]
    tl.store(kc_ptr + dst, k.to(kc_ptr.dtype.element_ty), mask=mask)
    tl.store(vc_ptr + dst, v.to(vc_ptr.dtype.element_ty), mask=mask)


def _check(k_cache, v_cache, k, v, slots) -> None:
    check(k_cache.dim() == 4, KERNEL, f"k_cache must be [KVH, blocks, bs, D], got {k_cache.shape}")
    check(v_cache.shape == k_cache.shape, KERNEL, f"v_cache {v_cache.shape} != k {k_cache.shape}")
    kvh, _, bs, d = k_cache.shape
    check(
        k.dim() == 3 and k.shape[1:] == (kvh, d),
        KERNEL,
        f"k must be [T, {kvh}, {d}], got {tuple(k.shape)}",
    )
    check(v.shape == k.shape, KERNEL, f"v {tuple(v.shape)} != k {tuple(k.shape)}")
    check(slots.shape == (k.shape[0],), KERNEL, f"slots must be [{k.shape[0]}], got {slots.shape}")
    check_dtype(slots, KERNEL, "slots", (torch.int32, torch.int64))
    check(slots.is_contiguous(), KERNEL, "slots must be contiguous")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        check_dtype(t, KERNEL, name, DTYPES)
        check_contiguous_last(t, KERNEL, name)
        check(
            t.device == k_cache.device, KERNEL, f"{name} on {t.device}, cache on {k_cache.device}"
        )
    check(k.dtype == v.dtype == k_cache.dtype == v_cache.dtype, KERNEL, "dtypes differ")
    # Slots address [blocks * bs] rows through the block stride: blocks must be dense rows.
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        check(c.stride(1) == bs * c.stride(2), KERNEL, f"{name} blocks must hold dense slots")
    check(k_cache.stride() == v_cache.stride(), KERNEL, "k_cache and v_cache strides differ")


def store_kv_triton(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Write new K/V into their slots. k_cache: [KVH, num_blocks, block_size, D]; k: [T, KVH, D]."""
    _check(k_cache, v_cache, k, v, slots)
    t = k.shape[0]
    if t == 0:
        return
    kvh, _, _, d = k_cache.shape
    _store_kernel[(t,)](
        k, v, k_cache, v_cache, slots,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(2), kvh,
        HEAD_DIM=d, BLOCK_H=triton.next_power_of_2(kvh), BLOCK_D=triton.next_power_of_2(d),
    )  # fmt: skip
