"""KV store: write a batch's new K/V into their cache slots (slot mapping; -1 = skip).

The torch reference is the engine's original `store_kv` (one `index_copy_` per cache); rows
whose slot is -1 (padded CUDA-graph slots) are dropped first. kv_store_triton.py (CUDA) and
kv_store_cpu.py (C, on CPU) have the same signature.
"""

from __future__ import annotations

import torch

from pipeline.kernels import dispatch, kv_store_cpu


def store_kv_torch(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Write new K/V into their slots. k_cache: [KVH, num_blocks, block_size, D]; k: [T, KVH, D]."""
    kvh, _, _, d = k_cache.shape
    if slots.numel() and bool((slots < 0).any()):
        keep = slots >= 0
        k, v, slots = k[keep], v[keep], slots[keep]
    k_cache.view(kvh, -1, d).index_copy_(1, slots, k.transpose(0, 1))
    v_cache.view(kvh, -1, d).index_copy_(1, slots, v.transpose(0, 1))


def store_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Dispatches to Triton on CUDA (or when forced), to C on CPU, else to the reference."""
    if dispatch.use_triton(k):
        fn = dispatch.triton_module("kv_store").store_kv_triton
    elif dispatch.use_cpu_kernel(k) and kv_store_cpu.is_supported(k_cache, k):
        fn = kv_store_cpu.store_kv_cpu
    else:
        fn = store_kv_torch
    fn(k_cache, v_cache, k, v, slots)
