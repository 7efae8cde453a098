"""Speculative decoding's `draft_model` proposer: a smaller model with the target's tokenizer
proposes the next k tokens greedily (vLLM's `{"method": "draft_model", "model": ...}`).

The draft keeps a KV cache per sequence (transformers' `DynamicCache`) and the tokens it covers.
Each proposal first cuts that cache back to what it shares with the sequence now (the target
kept fewer of the last proposals than were made, or the sequence was rolled back), feeds the
tokens the sequence has beyond it, then decodes k tokens. What the draft proposes changes only
how many tokens a forward of the target yields, never which: the engine keeps a proposed token
only where the target samples the same one there (speculative.py).

It runs on transformers, not on the engine's paged model: a draft is a second, small model whose
one sequence at a time needs no pool, and a checkpoint transformers reads is what a user brings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from pipeline.engine.sequence import Sequence
from pipeline.errors import ModelLoadError


@dataclass(slots=True)
class _DraftState:
    cache: object  # transformers.DynamicCache
    tokens: list[int] = field(default_factory=list)  # the tokens the cache holds, in order


class DraftModelProposer:
    """Proposals from a draft model; one cache per sequence, dropped when the sequence ends."""

    def __init__(self, path: Path, vocab_size: int, dtype: torch.dtype, device: torch.device):
        import transformers  # heavy: only a draft_model configuration loads it

        # transformers 5 names it `dtype` (`torch_dtype` warns); 4.x only knows `torch_dtype`
        key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        try:
            self.model = transformers.AutoModelForCausalLM.from_pretrained(path, **{key: dtype}).to(
                device
            )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"draft model {path}: {exc}") from exc
        self.model.eval()
        draft_vocab = self.model.config.vocab_size
        if draft_vocab != vocab_size:
            raise ModelLoadError(
                f"draft model {path} has a vocabulary of {draft_vocab} tokens, the target "
                f"{vocab_size}: a draft must share the target's tokenizer"
            )
        self.device = device
        self._cache_type = transformers.DynamicCache
        self.states: dict[str, _DraftState] = {}

    @torch.inference_mode()
    def propose(self, seq: Sequence, k: int) -> list[int]:
        """Up to `k` greedy tokens of the draft after the sequence's tokens."""
        tokens = seq.token_ids
        if k < 1 or not tokens:
            return []
        state = self.states.get(seq.request_id)
        if state is None:
            state = self.states[seq.request_id] = _DraftState(self._cache_type())
        # Keep what the cache shares with the sequence, less one token at least: the last one
        # is fed again for the logits the first proposal is read from.
        keep = _common_prefix(state.tokens, tokens, len(tokens) - 1)
        if keep < len(state.tokens):
            state.cache.crop(keep - len(state.tokens))  # a negative count: drop that many
            del state.tokens[keep:]
        proposed: list[int] = []
        feed = tokens[keep:]
        for _ in range(k):
            ids = torch.tensor([feed], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=ids, past_key_values=state.cache, use_cache=True).logits
            state.tokens.extend(feed)
            token = int(logits[0, -1].argmax())
            proposed.append(token)
            feed = [token]
        # The last proposal was not fed: the cache holds the sequence and the first k - 1.
        return proposed

    def forget(self, seq: Sequence) -> None:
        """The sequence ended (finished or aborted): its cache goes."""
        self.states.pop(seq.request_id, None)


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
