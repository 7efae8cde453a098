"""Turns scheduled sequences into one flat forward pass and samples the rows that need it."""

from __future__ import annotations

import torch

from pipeline.engine import cuda_graph
from pipeline.engine.attention import AttentionMetadata, DecodeGroup, PrefillChunk
from pipeline.engine.guided import Guide, GuideSet
from pipeline.engine.kv_cache import KVCache
from pipeline.engine.model import CausalLM
from pipeline.engine.sampler import Sampler, position_uniform
from pipeline.engine.scheduler import ScheduledSequence
from pipeline.kernels.paged_attention import decode_impl, pads_to_group_width, runs_prefill_rows

# Decode rows are split into at most this many groups of similar context length, each at least
# MIN_DECODE_GROUP rows: fewer padded slots to gather, at a few extra ops per layer.
DECODE_GROUPS = 4
MIN_DECODE_GROUP = 8


class ModelRunner:
    def __init__(self, model: CausalLM, kv_cache: KVCache, block_size: int, device: torch.device):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.sampler = Sampler()
        # Debug/test hook: keep the last step's logits ({request_id: [vocab] fp32}).
        self.keep_logits = False
        self.last_logits: dict[str, torch.Tensor] = {}
        self.graphs: cuda_graph.CudaGraphRunner | None = None
        self.guides: GuideSet | None = None  # structured output; None: a model without tokenizer

    def capture_cuda_graphs(self, max_num_seqs: int, max_model_len: int) -> None:
        """Capture the decode step at fixed batch sizes; a no-op off CUDA (cuda_graph.py)."""
        if not cuda_graph.is_enabled(self.device):
            return
        max_blocks = -(-max_model_len // self.block_size)
        self.graphs = cuda_graph.CudaGraphRunner(
            self.model, self.kv_cache.layers, max_num_seqs, max_blocks, self.device
        )
        self.graphs.capture()

    def _guide(self, logits: torch.Tensor, order: list[ScheduledSequence]) -> None:
        """Mask the rows of sequences whose grammar has begun (structured output)."""
        guided: list[tuple[int, Guide]] = []
        for row, s in enumerate(order):
            seq = s.seq
            if seq.params.guided is None or self.guides is None:
                continue
            if seq.guide is None:
                seq.guide = self.guides.guide(seq.params.guided, seq.num_prompt_tokens)
            seq.guide.sync(seq.token_ids)
            if seq.guide.active:
                guided.append((row, seq.guide))
        if guided:
            self.guides.mask(logits, guided)

    def _tensor(self, data: list, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype, device=self.device)

    def prepare(
        self, scheduled: list[ScheduledSequence]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int], list[ScheduledSequence]]:
        """Flatten the batch: decode sequences (one token each) first, then prefill chunks."""
        bs = self.block_size
        decodes = [s for s in scheduled if s.num_new_tokens == 1]
        decodes.sort(key=lambda s: s.seq.num_computed_tokens)
        prefills = [s for s in scheduled if s.num_new_tokens > 1]
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        order: list[ScheduledSequence] = []

        tables, ctx_lens = [], []
        for s in decodes:
            seq, pos = s.seq, s.seq.num_computed_tokens
            input_ids.append(seq.token_ids[pos])
            positions.append(pos)
            slots.append(seq.block_table[pos // bs] * bs + pos % bs)
            tables.append(seq.block_table)
            ctx_lens.append(pos + 1)
        meta = AttentionMetadata(slot_mapping=None, num_decode=len(decodes))  # type: ignore[arg-type]
        impl = decode_impl(self.kv_cache.kv[:0])  # the decode attention this step runs
        # The C kernel: every prefill token is one more row (its own context length), and all
        # rows go in one call per layer.
        prefill_rows = bool(prefills) and runs_prefill_rows(impl)
        if prefill_rows:
            for s in prefills:
                start, table = s.seq.num_computed_tokens, s.seq.block_table
                tables.extend([table] * s.num_new_tokens)
                ctx_lens.extend(range(start + 1, start + s.num_new_tokens + 1))
        n = len(tables)
        num_groups = min(DECODE_GROUPS, -(-n // MIN_DECODE_GROUP))
        if num_groups > 1 and not pads_to_group_width(impl):
            num_groups = 1  # the kernel reads only each row's own blocks: one call per layer
        for g in range(num_groups):
            lo, hi = g * n // num_groups, (g + 1) * n // num_groups
            width = max(len(t) for t in tables[lo:hi])
            rows = [t + [0] * (width - len(t)) for t in tables[lo:hi]]
            meta.decode_groups.append(
                DecodeGroup(lo, hi, self._tensor(rows), self._tensor(ctx_lens[lo:hi]))
            )
        for i, s in enumerate(decodes):
            if s.samples or s.seq.num_draft:  # a proposal cut to one token still samples it
                sample_rows.append(i)
                order.append(s)

        for s in prefills:
            seq, start, n = s.seq, s.seq.num_computed_tokens, s.num_new_tokens
            offset = len(input_ids)
            input_ids.extend(seq.token_ids[start : start + n])
            positions.extend(range(start, start + n))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            if not prefill_rows:
                meta.prefills.append(PrefillChunk(offset, n, start, self._tensor(table)))
            if seq.num_draft:  # speculation: every row is sampled, each checks the next token
                sample_rows.extend(range(offset, offset + n))
                order.extend([s] * n)
            elif s.samples:
                sample_rows.append(offset + n - 1)
                order.append(s)
        meta.slot_mapping = self._tensor(slots)
        return self._tensor(input_ids), self._tensor(positions), meta, sample_rows, order

    def execute(
        self, scheduled: list[ScheduledSequence]
    ) -> dict[str, list[tuple[int, float, float]]]:
        """Forward the batch; returns {request_id: [(token, logprob, entropy), ...]}: one per
        sampled sequence, or one per row of a speculative chunk (its positions in order)."""
        input_ids, positions, meta, sample_rows, order = self.prepare(scheduled)
        if self.graphs is not None and self.graphs.can_run(meta, input_ids.shape[0]):
            hidden = self.graphs.run(input_ids, positions, meta)
        else:
            hidden = self.model(input_ids, positions, self.kv_cache.layers, meta)
        if not sample_rows:
            return {}
        logits = self.model.compute_logits(hidden[self._tensor(sample_rows)])
        if self.keep_logits:
            self.last_logits = {s.seq.request_id: logits[i] for i, s in enumerate(order)}
        params = [s.seq.params for s in order]
        self._guide(logits, order)
        # The token being sampled will sit at index seq.num_tokens: that position seeds it. A
        # speculative chunk's row r predicts the position after its input, computed + r + 1.
        positions, rows_seen = [], {}
        for s in order:
            seq = s.seq
            if seq.num_draft:
                r = rows_seen[seq.request_id] = rows_seen.get(seq.request_id, -1) + 1
                positions.append(seq.num_computed_tokens + r + 1)
            else:
                positions.append(seq.num_tokens)
        uniforms = [position_uniform(s.seq.seed, p) for s, p in zip(order, positions, strict=True)]
        out = self.sampler(logits, params, uniforms)
        sampled: dict[str, list[tuple[int, float, float]]] = {}
        for i, s in enumerate(order):
            row = (out.token_ids[i], out.logprobs[i], out.entropies[i])
            sampled.setdefault(s.seq.request_id, []).append(row)
        return sampled
