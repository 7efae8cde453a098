"""What the engine hands back: per-token outputs of a step, whole-request outputs, KV exports."""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field

import torch

from pipeline.engine.sampling_params import SamplingParams


@dataclass(slots=True)
class Request:
    """A request as the engine takes it: token ids, not text."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    # Admission order among waiting requests, lower first (vLLM's convention); side work that
    # a running job waits on (an answer probe) goes ahead of new jobs.
    priority: int = 0


@dataclass(slots=True)
class TokenOutput:
    """One sampled token of one sequence in one engine step."""

    request_id: str
    token_id: int
    position: int  # index of this token in the sequence (prompt included)
    logprob: float
    entropy: float
    ends_step: bool  # this token completes a reasoning step
    num_steps: int  # completed steps so far, this one included
    finished: bool
    finish_reason: str | None  # "stop" | "length" | None (held, if not `finished`)
    paused: bool  # left the batch after this token (pause_on_step_end / pause_on_finish)


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    step_ends: list[int]  # output-token offsets at which steps ended


# (num_blocks, numel, dtype) -> (flat memory for the KV pool, one generation per block): lets a
# caller put the engine's pool where other processes can read it (transfer/shm_pool.py).
KVStorage = Callable[[int, int, torch.dtype], tuple[torch.Tensor, MutableSequence[int]]]


@dataclass(slots=True)
class KVBlocks:
    """K/V lent in place: blocks of another engine's pool (e.g. in shared memory)."""

    pool: torch.Tensor  # [layers, 2, kv_heads, num_blocks, block_size, head_dim]
    blocks: list[int]  # the sequence's block table, in token order
    num_tokens: int  # tokens of K/V in those blocks (the last block may be partial)


@dataclass(slots=True)
class PinnedKV:
    """A sequence's blocks held for a reader past the sequence's end (`Engine.pin_kv`)."""

    blocks: list[int]
    generations: list[int]  # of each block when pinned: a reader checks they still match
    num_tokens: int


@dataclass(slots=True)
class KVExport:
    """A sequence's tokens and the K/V of its first `num_kv_tokens` tokens."""

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    kv: torch.Tensor | KVBlocks  # a copy [layers, 2, kv_heads, tokens, head_dim], or blocks
    seed: int

    @property
    def num_kv_tokens(self) -> int:
        if isinstance(self.kv, KVBlocks):
            return self.kv.num_tokens
        return int(self.kv.shape[3])
