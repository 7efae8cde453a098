"""Attention over the paged KV cache; decode attention and the KV store dispatch to kernels/.

A batch is flattened into T tokens: first the decode sequences (one query token each), then the
prefill chunks (several query tokens each). Decode attention is batched over padded block
tables; prefill chunks attend one sequence at a time, to their cached context plus themselves
(torch SDPA). Where the C decode kernel runs (CPU), prefill tokens are rows of the decode call
too, each with its causal prefix as its context: one kernel call per layer for the batch.

Cache layout per layer: [KVH, num_blocks, block_size, D] (head-major). Gathering a batch's
blocks along dim 1 then yields [KVH, B, L, D] directly, ready for batched matmuls: on CPU this
is ~8x faster than gathering [num_blocks, block_size, KVH, D] rows and transposing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from pipeline.kernels.kv_store import store_kv
from pipeline.kernels.paged_attention import gather_kv, paged_decode_attention


@dataclass(slots=True)
class PrefillChunk:
    start: int  # offset of the chunk's first token in the flat batch
    num_tokens: int  # query tokens in this chunk
    context_len: int  # tokens of this sequence already in the cache before the chunk
    block_table: torch.Tensor  # [num_blocks] long


@dataclass(slots=True)
class DecodeGroup:
    """Rows [start, end) of the flat batch for the decode kernel, one query token each: decode
    sequences of similar context lengths (and, on the C kernel, prefill tokens)."""

    start: int
    end: int
    block_tables: torch.Tensor  # [rows, max_blocks] long, 0-padded
    context_lens: torch.Tensor  # [rows] long, including the new token


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] long: cache slot of every token in the batch
    num_decode: int = 0
    # Decode rows come sorted by context length and split into groups, so each group gathers
    # only up to its own longest context instead of the whole batch's.
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)
    # Reused by every layer's decode gather: one allocation per step instead of two per layer
    # (fresh multi-MB buffers cost page faults on CPU).
    workspace: dict[str, torch.Tensor] = field(default_factory=dict)


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    chunk: PrefillChunk,
    scale: float,
) -> torch.Tensor:
    """A chunk of one sequence. q: [N, H, D]; k, v: [N, KVH, D] (the chunk's own K/V)."""
    n, h, _ = q.shape
    kvh = k.shape[1]
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, H, N, D]
    if chunk.context_len == 0:
        kh, vh = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)
        mask, causal = None, True
    else:
        total = chunk.context_len + n
        tables = chunk.block_table.unsqueeze(0)
        kh = gather_kv(k_cache, tables, total).transpose(0, 1)  # [1, KVH, total, D]
        vh = gather_kv(v_cache, tables, total).transpose(0, 1)
        # Query i (absolute position context_len + i) sees keys 0 .. context_len + i.
        qpos = torch.arange(n, device=q.device)[:, None] + chunk.context_len
        mask = torch.arange(total, device=q.device)[None, :] <= qpos
        causal = False
    out = F.scaled_dot_product_attention(
        qh, kh, vh, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=kvh != h
    )
    return out.squeeze(0).transpose(0, 1)  # [N, H, D]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Store this batch's K/V, then attend. q: [T, H, D]; k, v: [T, KVH, D] -> [T, H, D]."""
    store_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    out = torch.empty_like(q)
    for g in meta.decode_groups:
        out[g.start : g.end] = paged_decode_attention(
            q[g.start : g.end],
            k_cache,
            v_cache,
            g.block_tables,
            g.context_lens,
            scale,
            meta.workspace,
        )
    for c in meta.prefills:
        s = slice(c.start, c.start + c.num_tokens)
        out[s] = prefill_attention(q[s], k[s], v[s], k_cache, v_cache, c, scale)
    return out
