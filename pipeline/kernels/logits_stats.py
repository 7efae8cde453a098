"""Per-row statistics of a logits matrix, without materializing probabilities.

For logits [S, V]: argmax (first of ties), max-probability, entropy (nats) and log-sum-exp,
all fp32 except argmax (int64). The sampler uses argmax, entropy and log-sum-exp; early exit
reads max-probability. The torch reference keeps the sampler's original expressions
(H = lse - sum(softmax * logits)); logits_stats_triton.py does it in one online pass over
vocabulary tiles, logits_stats_cpu.py (C) in two reads of each row. Logits are assumed finite.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from pipeline.kernels import dispatch, logits_stats_cpu


class LogitsStats(NamedTuple):
    argmax: torch.Tensor  # [S] int64
    max_prob: torch.Tensor  # [S] fp32
    entropy: torch.Tensor  # [S] fp32
    lse: torch.Tensor  # [S] fp32


def logits_stats_torch(logits: torch.Tensor) -> LogitsStats:
    # logits: [S, V]; H = lse - sum(p * logits): two passes fewer than -(p * log p).
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    entropy = (lse - (torch.softmax(logits, dim=-1) * logits).sum(-1, keepdim=True)).squeeze(1)
    top, argmax = logits.max(dim=-1)  # the first maximal index, as argmax()
    lse = lse.squeeze(1)
    return LogitsStats(argmax, torch.exp(top - lse), entropy, lse)


def logits_stats(logits: torch.Tensor) -> LogitsStats:
    """Dispatches to Triton on CUDA (or when forced), to C on CPU, else to the torch reference."""
    if dispatch.use_triton(logits):
        return dispatch.triton_module("logits_stats").logits_stats_triton(logits)
    if dispatch.use_cpu_kernel(logits) and logits_stats_cpu.is_supported(logits):
        return LogitsStats(*logits_stats_cpu.logits_stats_cpu(logits))
    return logits_stats_torch(logits)
