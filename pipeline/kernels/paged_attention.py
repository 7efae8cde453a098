"""Paged decode attention: one query token per sequence against its paged K/V.

The torch reference below is the engine's original decode path, moved here unchanged; the
Triton kernel (paged_attention_triton.py) has the same signature. Cache layout per layer:
[KVH, num_blocks, block_size, D] (head-major, see pipeline/engine/attention.py for why).
On CPU the C kernel in paged_attention_cpu.py (same signature) replaces the reference's
gather: it reads the blocks in place.
"""

from __future__ import annotations

import torch

from pipeline.kernels import dispatch, paged_attention_cpu


def gather_kv(
    cache: torch.Tensor,
    block_tables: torch.Tensor,
    num_tokens: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, max_blocks] block tables -> [KVH, B, num_tokens, D], contiguous in time."""
    kvh, _, bs, d = cache.shape
    b, m = block_tables.shape
    if out is None:
        x = torch.index_select(cache, 1, block_tables.flatten())
    else:
        x = torch.index_select(cache, 1, block_tables.flatten(), out=out.view(kvh, b * m, bs, d))
    return x.view(kvh, b, -1, d)[:, :, :num_tokens]


def paged_decode_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    workspace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """One query token per sequence. q: [B, H, D] -> [B, H, D]."""
    b, h, d = q.shape
    # Attend over whole blocks (padding masked): slicing to the longest context would copy.
    num_slots = block_tables.shape[1] * k_cache.shape[2]
    numel = k_cache.shape[0] * b * num_slots * d
    ws = workspace if workspace is not None else {}
    if "k" not in ws or ws["k"].numel() < numel or ws["k"].dtype != k_cache.dtype:
        ws["k"] = torch.empty(numel, dtype=k_cache.dtype, device=k_cache.device)
        ws["v"] = torch.empty_like(ws["k"])
    k = gather_kv(k_cache, block_tables, num_slots, ws["k"][:numel])  # [KVH, B, L, D]
    v = gather_kv(v_cache, block_tables, num_slots, ws["v"][:numel])
    kvh = k.shape[0]
    qg = q.view(b, kvh, h // kvh, d).transpose(0, 1)  # [KVH, B, G, D]: G heads share a KV head
    scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale  # [KVH, B, G, L]
    pos = torch.arange(num_slots, device=q.device)
    scores.masked_fill_((pos[None, :] >= context_lens[:, None])[None, :, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).transpose(0, 1).reshape(b, h, d)


def decode_impl(t: torch.Tensor) -> str:
    """Which decode attention runs for tensors like `t`: "triton" (CUDA, or forced), "c" (CPU,
    built) or "torch" (the reference)."""
    if dispatch.use_triton(t):
        return "triton"
    if dispatch.use_cpu_kernel(t) and paged_attention_cpu.is_supported(t):
        return "c"
    return "torch"


def runs_prefill_rows(impl: str) -> bool:
    """Whether prefill tokens go through the decode kernel, each as a row with its own context
    length (its causal prefix; the chunk's K/V is stored before attention runs): the C kernel
    reads the paged cache in place, where torch's SDPA over one chunk at a time was slower for
    these lengths and needed a gather for chunks with cached context."""
    return impl == "c"


def pads_to_group_width(impl: str) -> bool:
    """Whether decode attention reads whole padded tables (the torch reference's gather), so
    that splitting a batch into groups of similar context length saves work; the C and Triton
    kernels read each row's own blocks only."""
    return impl == "torch"


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    workspace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Dispatches to Triton on CUDA (or when forced), to the C kernel on CPU, else to the
    torch reference."""
    impl = decode_impl(q)
    if impl == "triton":
        fn = dispatch.triton_module("paged_attention").paged_decode_attention_triton
    elif impl == "c":
        fn = paged_attention_cpu.paged_decode_attention_cpu
    else:
        fn = paged_decode_attention_torch
    return fn(q, k_cache, v_cache, block_tables, context_lens, scale, workspace)
