"""Structured output: token masks from a grammar (llguidance), applied once the thinking ends.

A request's `GuidedDecoding` names a grammar (JSON schema, regex, a choice of strings, or a
Lark grammar, all compiled by llguidance) and the text that ends its free part: a reasoning
model thinks unconstrained, and only what follows its thinking's end marker is held to the
grammar (vLLM's structured outputs with a reasoning parser behave the same). Each sequence's
`Guide` follows its token ids, so rollback, appended tokens and KV import need nothing of
their own: before every sample the guide syncs to the tokens the sequence has, rolling its
matcher back where they were cut.

llguidance rather than xgrammar: both ship CPU wheels and both are what vLLM and SGLang run;
llguidance needs no torch build of its own nor a compiler at run time, computes a mask in
microseconds on a 49k vocabulary without a precompiled cache, and rolls a matcher back by
token count (our rollback is by position).
"""

from __future__ import annotations

from typing import Any

import llguidance
import llguidance.hf
import torch

from pipeline.engine.grammar import GuidedDecoding


class Guide:
    """One sequence's grammar state: where the grammar began, and a matcher that has consumed
    the sequence's tokens from there."""

    def __init__(
        self, spec: GuidedDecoding, tokenizer: llguidance.LLTokenizer, token_texts: list[str],
        start: int,
    ) -> None:  # fmt: skip
        self.spec = spec
        self.matcher = llguidance.LLMatcher(tokenizer, spec.grammar)
        self.texts = token_texts
        self.start = start  # the first output token's index
        self.keep = max((len(m) for m in spec.after), default=1) - 1
        self._reset()

    def _reset(self) -> None:
        self.matcher.reset()
        self.active_at: int | None = None if self.spec.after else self.start
        self.scanned = self.start  # tokens before this index have been read
        self.consumed = 0  # tokens the matcher has taken (from active_at on)
        self.tail = ""
        self.broken = False  # a token the grammar refused (forced text): no more masks

    @property
    def active(self) -> bool:
        return self.active_at is not None and not self.broken

    @property
    def done(self) -> bool:
        return self.active and self.matcher.is_stopped()

    def sync(self, token_ids: list[int]) -> None:
        """Follow the sequence to `token_ids`, rolling back first where it was cut."""
        n = len(token_ids)
        if n < self.scanned:
            cut_in_grammar = self.active_at is not None and n >= self.active_at
            if cut_in_grammar and not self.broken:
                drop = self.consumed - (n - self.active_at)
                self.matcher.rollback(drop)
                self.consumed -= drop
                self.scanned = n
            else:
                self._reset()  # read again from the start (rare: a rollback into the thinking)
        for pos in range(self.scanned, n):
            token = token_ids[pos]
            if self.active_at is None:
                self.tail = (self.tail + self.texts[token])[-(self.keep + 64) :]
                if any(m in self.tail for m in self.spec.after):
                    self.active_at = pos + 1
            elif not self.broken:
                if self.matcher.consume_token(token):
                    self.consumed += 1
                else:
                    self.broken = True
        self.scanned = n


class GuideSet:
    """The engine's side: a tokenizer for llguidance (built once, on the first guided request),
    guides per sequence, and the masking of a batch's logits."""

    def __init__(self, hf_tokenizer: Any, token_texts: list[str]) -> None:
        self.hf = hf_tokenizer
        self.texts = token_texts
        self._tokenizer: llguidance.LLTokenizer | None = None

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        if self._tokenizer is None:
            try:
                self._tokenizer = llguidance.hf.from_tokenizer(self.hf)
            except ValueError:  # a decoder llguidance cannot read: the tokens' texts instead
                self._tokenizer = llguidance.LLTokenizer(
                    llguidance.TokenizerWrapper(_TextTokens(self.hf, self.texts))
                )
        return self._tokenizer

    def guide(self, spec: GuidedDecoding, start: int) -> Guide:
        return Guide(spec, self.tokenizer, self.texts, start)

    def mask(self, logits: torch.Tensor, guides: list[tuple[int, Guide]]) -> None:
        """Rule out, in place, every token a row's grammar does not allow next. (llguidance's
        byte per token, read as is: `llguidance.torch` would import Triton into every engine,
        and unpacking its bitmask costs more than the mask.)"""
        vocab = self.tokenizer.vocab_size
        width = min(vocab, logits.shape[1])
        # The dtype's lowest value, not -inf: a probability of exactly 0 all the same, and the
        # entropy (p * logit summed) stays a number where -inf would make it NaN.
        low = torch.finfo(logits.dtype).min
        for row, guide in guides:
            allowed = torch.frombuffer(
                bytearray(guide.matcher.compute_logit_bias()), dtype=torch.uint8
            )
            logits[row, :width].masked_fill_(allowed[:width].to(logits.device) == 0, low)
            logits[row, width:] = low  # padded embedding rows past the vocabulary


class _TextTokens:
    """A tokenizer as llguidance's generic wrapper reads it: each token's bytes from its text."""

    def __init__(self, hf: Any, texts: list[str]) -> None:
        self.hf = hf
        self.tokens = [t.encode() for t in texts]
        self.eos_token_id = hf.eos_token_id
        self.bos_token_id = hf.bos_token_id
        self.special_token_ids = list(hf.all_special_ids)

    def __call__(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))
