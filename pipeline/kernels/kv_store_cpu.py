"""C KV store for CPU caches (csrc/kv_store_cpu.c): one memcpy per new (token, head) row of K
and V, slots of -1 skipped, instead of the reference's -1 check and two `index_copy_`s.

The hot path (every layer of every step) builds no message unless an argument is wrong.
"""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import argument_error

LIBRARY = "kv_store_cpu"
KERNEL = "store_kv_cpu"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def is_supported(k_cache: torch.Tensor, k: torch.Tensor) -> bool:
    return (
        k_cache.device.type == k.device.type == "cpu"
        and k.dtype in DTYPES
        and cpu_build.is_built(LIBRARY)
    )


def store_kv_cpu(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Write new K/V into their slots. k_cache: [KVH, num_blocks, block_size, D]; k, v: [T,
    KVH, D] (rows of D dense, any token and head strides); slots: [T] int64, -1 = skip."""
    kvh, blocks, bs, d = k_cache.shape
    t = k.shape[0]
    ok = (
        v_cache.shape == k_cache.shape
        and k.shape == v.shape == (t, kvh, d)
        and slots.shape == (t,)
        and slots.dtype == torch.int64
        and slots.is_contiguous()
        and k.dtype == v.dtype == k_cache.dtype == v_cache.dtype
        and k.stride(2) == v.stride(2) == 1
        and k_cache.stride()[1:] == v_cache.stride()[1:] == (bs * d, d, 1)
        and k_cache.stride(0) == v_cache.stride(0)
    )
    if not ok:
        raise argument_error(
            KERNEL,
            f"caches {tuple(k_cache.shape)} {tuple(v_cache.shape)} {k_cache.stride()}, "
            f"k {tuple(k.shape)} {k.stride()}, v {tuple(v.shape)} {v.stride()}, "
            f"slots {tuple(slots.shape)} {slots.dtype}, dtypes {k.dtype} {k_cache.dtype}",
        )
    if t == 0:
        return
    size = k.element_size()
    i64 = ctypes.c_int64
    ptr = cpu_build.ptr
    rc = cpu_build.load(LIBRARY).store_kv(
        ptr(k_cache), ptr(v_cache), ptr(k), ptr(v), ptr(slots),
        i64(t), i64(kvh), i64(blocks * bs), i64(d * size), i64(k_cache.stride(0) * size),
        i64(k.stride(0) * size), i64(k.stride(1) * size),
        i64(v.stride(0) * size), i64(v.stride(1) * size),
    )  # fmt: skip
    if rc != 0:
        raise argument_error(KERNEL, f"a slot lies outside -1..{blocks * bs - 1}")
