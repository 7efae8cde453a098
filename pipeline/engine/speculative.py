"""Speculative decoding's proposer and verifier (pure: token ids in, token ids out).

The engine (engine.py) puts a sequence's proposed tokens after its last one, computes them all
in one forward pass as a chunk, and samples every row of it. The sampler draws each position's
uniform from (seed, position) alone (sampler.py), so the token sampled at a position is the one
decoding without speculation would sample there: a proposed token is accepted while it equals
that sample, and the first that differs is replaced by it. Outputs are therefore the same
tokens as with speculation off, greedy or sampled, seed for seed (a stricter guarantee than
rejection sampling's same distribution); the price is a lower acceptance when sampling.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pipeline.config import SpeculativeConfig
from pipeline.engine.draft import DraftModelProposer
from pipeline.engine.proposal_sizing import Candidate
from pipeline.engine.sequence import Sequence
from pipeline.engine.suffix import RequestTree, SuffixStore, propose_suffix


def propose_ngram(tokens: list[int], k: int, n_min: int, n_max: int) -> list[int]:
    """vLLM's prompt lookup (`ngram`): the up to `k` tokens that followed the latest earlier
    occurrence of the last n tokens, trying n from `n_max` down to `n_min`; [] if none."""
    size = len(tokens)
    if k < 1 or size < n_min + 1:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(n_max, size - 1), n_min - 1, -1):
        # Windows that end before the last token: each has at least one token after it.
        windows = sliding_window_view(arr[: size - 1], n)
        hits = np.flatnonzero((windows == arr[size - n :]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return arr[start : start + k].tolist()
    return []


class Acceptance:
    """One sequence's record of its proposals, which sizes the next: speculation is cut back
    where it does not pay. A proposal costs forward rows whether or not it is accepted, so
    after a run of passes that kept almost nothing the sequence stops proposing for a while
    (then tries again: a reasoning model's text turns repetitive, as when it re-checks), and
    otherwise proposes about as far as its recent passes reached. Outputs do not depend on it.

    `follow_mean=False` (suffix): the proposal is not cut to the running mean. Suffix sizes
    each proposal by its own estimate of how likely the text goes on so (`min_token_prob`, the
    spec factor), as vLLM's does; cutting a long confident run to about the mean's length
    threw away its best proposals (one job through the reasoning loop: 1.56x with the cut,
    1.78x without, bench/RESULTS.md). The pause after passes that kept nothing still holds.
    """

    __slots__ = ("confs", "follow_mean", "mean", "passes", "resume_at")

    WEIGHT = 0.3  # of the newest pass in the running mean of accepted tokens per pass
    MIN_MEAN = 0.15  # accepted tokens per pass below which proposing stops ...
    MIN_PASSES = 8  # ... once this many passes were seen
    PAUSE_TOKENS = 64  # for this many tokens

    def __init__(self, follow_mean: bool = True) -> None:
        self.follow_mean = follow_mean
        self.confs: list[float | None] = []  # the proposer's confidence in each token in flight
        self.mean: float | None = None
        self.passes = 0
        self.resume_at = 0

    def k(self, k_max: int, num_tokens: int) -> int:
        """How many tokens to propose now (0: none)."""
        if num_tokens < self.resume_at:
            return 0
        if self.mean is None or not self.follow_mean:
            return k_max
        return max(1, min(k_max, math.ceil(self.mean) + 1))

    def update(self, accepted: int, num_tokens: int) -> None:
        w = self.WEIGHT
        self.mean = accepted if self.mean is None else (1 - w) * self.mean + w * accepted
        self.passes += 1
        if self.passes >= self.MIN_PASSES and self.mean < self.MIN_MEAN:
            self.mean, self.passes, self.resume_at = None, 0, num_tokens + self.PAUSE_TOKENS


class Proposer:
    """The configured method behind one call: up to `k` tokens after a sequence's tokens. For
    `suffix` it holds the scopes' trees of earlier outputs (`remember` adds a finished one);
    for `draft_model`, the draft (draft.py, built by the engine, which knows the target)."""

    def __init__(self, config: SpeculativeConfig, draft: DraftModelProposer | None = None) -> None:
        if (config.method == "draft_model") != (draft is not None):
            raise ValueError("a draft_model proposer needs its draft, and no other one does")
        self.config = config
        self.draft = draft
        self.store = (
            SuffixStore(config.suffix_decoding_max_tree_depth,
                        config.suffix_decoding_max_cached_requests)
            if config.method == "suffix" else None
        )  # fmt: skip

    def acceptance(self) -> Acceptance:
        """A new sequence's record; suffix's proposals are sized by its own estimates."""
        return Acceptance(follow_mean=self.store is None)

    def propose(self, seq: Sequence, k: int) -> Candidate:
        """Up to `k` tokens after the sequence's (for suffix: from its tree and its scope's),
        each with the method's confidence in it (suffix's count ratio; None from the others)."""
        c = self.config
        if self.draft is not None:
            tokens = self.draft.propose(seq, k)
        elif self.store is None:
            tokens = propose_ngram(seq.token_ids, k, c.prompt_lookup_min, c.prompt_lookup_max)
        else:
            if seq.spec_tree is None:
                seq.spec_tree = RequestTree(c.suffix_decoding_max_tree_depth)
            shared = self.store.tree(_scope(seq))
            tokens, ratios = propose_suffix(c, seq.token_ids, k, seq.spec_tree, shared)
            return Candidate(tokens, list(ratios))
        return Candidate(tokens, [None] * len(tokens))

    def rewind(self, seq: Sequence) -> None:
        """The sequence was rolled back: its tree goes on from its new end."""
        if seq.spec_tree is not None:
            seq.spec_tree.rewind(seq.token_ids)

    def forget(self, seq: Sequence) -> None:
        """The sequence ended (finished or aborted): what the proposer kept for it goes."""
        if self.draft is not None:
            self.draft.forget(seq)

    def remember(self, seq: Sequence) -> None:
        """A finished sequence's output, for later jobs of its scope."""
        self.forget(seq)
        if self.store is not None:
            output = seq.token_ids[seq.num_prompt_tokens :]
            self.store.add(_scope(seq), seq.request_id, output)


def _scope(seq: Sequence) -> str:
    return seq.params.spec_scope or ""


def num_accepted(proposed: list[int], sampled: list[int]) -> int:
    """How many proposed tokens stand: `sampled[i]` is the target's token at the position of
    `proposed[i]` (given the proposed tokens before it), `sampled` one longer than checked."""
    a = 0
    while a < len(proposed) and a < len(sampled) - 1 and sampled[a] == proposed[a]:
        a += 1
    return a
