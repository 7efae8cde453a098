"""CUDA graphs for the decode step: captured at start-up at fixed batch sizes, replayed.

A decode-only step of n sequences runs the graph of the smallest captured size >= n; rows
n.. are padding: slot -1 (the KV store skips them), context length 0 (decode attention reads
nothing for them) and token/position 0. Inputs live in static buffers that every graph
views. Only used on CUDA with the Triton kernels (the torch reference path syncs, e.g. the
KV store's -1 check). STEPWISE_CUDA_GRAPHS=0 turns it off. The bucketing and padding below
are plain tensor code, tested on CPU; capture and replay need a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.config import runtime
from pipeline.engine.attention import AttentionMetadata, DecodeGroup
from pipeline.kernels import dispatch

ENV = "STEPWISE_CUDA_GRAPHS"


def is_enabled(device: torch.device) -> bool:
    """On CUDA, with the Triton kernels selected, unless STEPWISE_CUDA_GRAPHS=0."""
    if device.type != "cuda" or not runtime().cuda_graphs:
        return False
    return dispatch.use_triton(torch.empty(0, device=device))


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, then every multiple of 8 up to max_num_seqs (and max_num_seqs itself)."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    sizes = [s for s in (1, 2, 4) if s < max_num_seqs]
    sizes += range(8, max_num_seqs, 8)
    return sorted(set(sizes) | {max_num_seqs})


def bucket_for(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size that holds `num_seqs` rows; None if none does."""
    return next((s for s in sizes if s >= num_seqs), None) if num_seqs > 0 else None


@dataclass(slots=True)
class DecodeBuffers:
    """Static inputs shared by every graph; a graph of size B views their first B rows."""

    input_ids: torch.Tensor  # [max_bs] long
    positions: torch.Tensor  # [max_bs] long
    slot_mapping: torch.Tensor  # [max_bs] long, -1 = padded row
    block_tables: torch.Tensor  # [max_bs, max_blocks] long
    context_lens: torch.Tensor  # [max_bs] long, 0 = padded row

    @classmethod
    def allocate(cls, max_bs: int, max_blocks: int, device: torch.device) -> DecodeBuffers:
        def z(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.long, device=device)

        return cls(z(max_bs), z(max_bs), z(max_bs).fill_(-1), z(max_bs, max_blocks), z(max_bs))

    def metadata(self, size: int) -> AttentionMetadata:
        """Metadata for a graph of `size` rows: one decode group over the static buffers."""
        group = DecodeGroup(0, size, self.block_tables[:size], self.context_lens[:size])
        return AttentionMetadata(self.slot_mapping[:size], num_decode=size, decode_groups=[group])

    def fill(
        self, size: int, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> None:
        """Copy an n-row decode batch into rows [0, n); rows [n, size) become padding."""
        n = input_ids.shape[0]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        for g in meta.decode_groups:
            self.block_tables[g.start : g.end, : g.block_tables.shape[1]].copy_(g.block_tables)
            self.context_lens[g.start : g.end].copy_(g.context_lens)
        self.input_ids[n:size].zero_()
        self.positions[n:size].zero_()
        self.slot_mapping[n:size].fill_(-1)
        self.context_lens[n:size].zero_()


class CudaGraphRunner:
    """Replays the model's decode forward from graphs captured once per batch size."""

    def __init__(self, model, kv_caches, max_num_seqs: int, max_blocks: int, device):
        self.model = model
        self.kv_caches = kv_caches
        self.sizes = graph_batch_sizes(max_num_seqs)
        self.max_blocks = max_blocks
        self.buffers = DecodeBuffers.allocate(self.sizes[-1], max_blocks, device)
        self.metas = {s: self.buffers.metadata(s) for s in self.sizes}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}

    def forward(self, size: int) -> torch.Tensor:
        """The model over the static buffers' first `size` rows (what a graph captures)."""
        b = self.buffers
        return self.model(b.input_ids[:size], b.positions[:size], self.kv_caches, self.metas[size])

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every size, largest first so the smaller graphs share its memory pool."""
        pool = None
        for size in reversed(self.sizes):
            self.forward(size)  # warm-up: compiles the Triton kernels outside capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[size] = self.forward(size)
            pool = graph.pool() if pool is None else pool
            self.graphs[size] = graph
        torch.cuda.synchronize()

    def can_run(self, meta: AttentionMetadata, num_tokens: int) -> bool:
        """Decode-only batches that fit the largest graph and its block-table width."""
        return (
            not meta.prefills
            and 0 < num_tokens == meta.num_decode <= self.sizes[-1]
            and all(g.block_tables.shape[1] <= self.max_blocks for g in meta.decode_groups)
        )

    def run(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """hidden: [n, hidden] for an n-row decode batch (see can_run)."""
        n = input_ids.shape[0]
        size = bucket_for(n, self.sizes)
        assert size is not None and size in self.graphs, f"no graph for {n} rows"
        self.buffers.fill(size, input_ids, positions, meta)
        self.graphs[size].replay()
        return self.outputs[size][:n]
