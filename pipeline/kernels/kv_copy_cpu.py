"""C pool-to-pool KV block copy for CPU pools (csrc/kv_copy_cpu.c): one memcpy per row of each
run of blocks, on torch's OpenMP threads, instead of one strided torch copy per run."""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import check

LIBRARY = "kv_copy_cpu"
KERNEL = "copy_block_runs"


def is_supported(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """CPU pools of one dtype, each dense (a pool view may start anywhere in its storage)."""
    return (
        dst.device.type == src.device.type == "cpu"
        and dst.dtype == src.dtype
        and dst.is_contiguous()
        and src.is_contiguous()
        and cpu_build.is_built(LIBRARY)
    )


def copy_block_runs(dst: torch.Tensor, src: torch.Tensor, runs: list[tuple[int, int, int]]) -> None:
    """dst[:, :, :, d : d + n] = src[:, :, :, s : s + n] for each run (s, d, n).

    dst, src: dense [L, 2, KVH, num_blocks, bs, D] pools that differ only in num_blocks.
    """
    check(dst.dim() == 6 and src.dim() == 6, KERNEL, "pools must be [L, 2, KVH, blocks, bs, D]")
    check(dst.is_contiguous() and src.is_contiguous(), KERNEL, "pools must be dense")
    if not runs:
        return
    flat = torch.tensor(runs, dtype=torch.int64).reshape(-1)
    outer = dst.shape[0] * dst.shape[1] * dst.shape[2]
    block_bytes = dst.shape[4] * dst.shape[5] * dst.element_size()
    fn = cpu_build.load(LIBRARY).copy_block_runs
    i64 = ctypes.c_int64
    rc = fn(
        cpu_build.ptr(dst), cpu_build.ptr(src), cpu_build.ptr(flat), i64(len(runs)),
        i64(outer), i64(dst.shape[3]), i64(src.shape[3]), i64(block_bytes),
    )  # fmt: skip
    check(rc == 0, KERNEL, f"a run reaches outside a pool ({dst.shape[3]} / {src.shape[3]} blocks)")
