"""KV export/import: a sequence's blocks to and from the contiguous handoff layout.

The engine's pool is [layers, 2, KVH, num_blocks, block_size, D]; a handoff buffer is
head-major too, [layers, 2, KVH, tokens, D] (see pipeline/engine/kv_cache.py), so an export
is one gather of block rows and an import one scatter. The torch references are the
engine's original copies; kv_transfer_triton.py has the same signatures. Pool-to-pool copies
(the shm_pool handoff) run in C on CPU (kv_copy_cpu.py).
"""

from __future__ import annotations

import torch

from pipeline.kernels import dispatch, kv_copy_cpu


def export_blocks_torch(kv: torch.Tensor, blocks: torch.Tensor, out: torch.Tensor) -> None:
    """out[:, :, :, i * bs : (i + 1) * bs] = kv[:, :, :, blocks[i]] for every block i.

    kv: [L, 2, KVH, num_blocks, bs, D]; blocks: [nb] long; out: [L, 2, KVH, nb * bs, D].
    """
    l, _, h, n, bs, d = kv.shape
    nb = blocks.shape[0]
    src = kv.view(l, 2, h, n, bs * d)
    torch.index_select(src, 3, blocks, out=out.view(l, 2, h, nb, bs * d))


def import_blocks_torch(kv: torch.Tensor, blocks: torch.Tensor, src: torch.Tensor) -> None:
    """Scatter src [L, 2, KVH, tokens, D] into `blocks` (ceil(tokens / bs) of them) of kv."""
    l, _, h, n, bs, d = kv.shape
    num_tokens = src.shape[3]
    full = num_tokens // bs
    if full:  # whole blocks in one block-row scatter
        rows = src[:, :, :, : full * bs].reshape(l, 2, h, full, bs * d)
        kv.view(l, 2, h, n, bs * d).index_copy_(3, blocks[:full], rows)
    if num_tokens > full * bs:  # the partial last block, token by token
        slots = blocks[full] * bs + torch.arange(num_tokens - full * bs, device=kv.device)
        kv.view(l, 2, h, n * bs, d).index_copy_(3, slots, src[:, :, :, full * bs :])


def block_runs(src: list[int], dst: list[int]) -> list[tuple[int, int, int]]:
    """(src_start, dst_start, length) runs where both block lists step by one together."""
    runs: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst, strict=True):
        if runs and runs[-1][0] + runs[-1][2] == s and runs[-1][1] + runs[-1][2] == d:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((s, d, 1))
    return runs


def copy_blocks_between(
    dst: torch.Tensor, dst_blocks: list[int], src: torch.Tensor, src_blocks: list[int]
) -> None:
    """dst[:, :, :, dst_blocks[i]] = src[:, :, :, src_blocks[i]]: pool to pool, one copy.

    Both are [L, 2, KVH, num_blocks, bs, D] pools (of different sizes, e.g. another process's
    pool in shared memory). Each run of consecutive blocks is one strided copy of whole block
    rows, with no staging buffer: a gather then a scatter would move every byte twice.
    """
    if dst.shape[:3] != src.shape[:3] or dst.shape[4:] != src.shape[4:]:
        raise ValueError(f"pool shapes differ: {tuple(dst.shape)} vs {tuple(src.shape)}")
    runs = block_runs(src_blocks, dst_blocks)
    if dispatch.use_cpu_kernel(dst) and kv_copy_cpu.is_supported(dst, src):
        kv_copy_cpu.copy_block_runs(dst, src, runs)
        return
    for s, d, n in runs:
        dst[:, :, :, d : d + n].copy_(src[:, :, :, s : s + n])


def export_blocks(kv: torch.Tensor, blocks: torch.Tensor, out: torch.Tensor) -> None:
    """Dispatches to Triton on CUDA (or when forced), else to the torch reference."""
    if dispatch.use_triton(kv):
        dispatch.triton_module("kv_transfer").export_blocks_triton(kv, blocks, out)
    else:
        export_blocks_torch(kv, blocks, out)


def import_blocks(kv: torch.Tensor, blocks: torch.Tensor, src: torch.Tensor) -> None:
    """Dispatches to Triton on CUDA (or when forced), else to the torch reference."""
    if dispatch.use_triton(kv):
        dispatch.triton_module("kv_transfer").import_blocks_triton(kv, blocks, src)
    else:
        import_blocks_torch(kv, blocks, src)
