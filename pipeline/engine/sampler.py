"""Token sampling: greedy, temperature, top-k, top-p, min-p; seeded by position.

Randomness is a pure function of (request seed, token position): sampling draws one uniform
number per row and inverts the filtered distribution's CDF with it. So a sequence rolled back
to a position and decoded again with the same seed picks exactly the same tokens, and a
sequence handed to another engine continues as if it had never moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.engine.sampling_params import SamplingParams
from pipeline.kernels.logits_stats import logits_stats
from pipeline.kernels.sample import sample

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def position_uniform(seed: int, position: int) -> float:
    """Uniform in [0, 1) determined by (seed, position) alone."""
    return (_splitmix64(_splitmix64(seed & _MASK64) ^ position) >> 11) * (1.0 / (1 << 53))


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float]  # of the chosen token under the model's (unprocessed) distribution
    entropies: list[float]  # of the model's (unprocessed) distribution, in nats


class Sampler:
    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], uniforms: list[float]
    ) -> SamplerOutput:
        # logits: [S, V] fp32. argmax, entropy and lse per row (one fused pass on a GPU).
        stats = logits_stats(logits)
        lse, entropies, tokens = stats.lse[:, None], stats.entropy, stats.argmax
        rows = [i for i, p in enumerate(params) if not p.is_greedy]
        if rows:
            tokens[rows] = self._sample(
                logits[rows], [params[i] for i in rows], [uniforms[i] for i in rows]
            )
        chosen = (logits.gather(1, tokens[:, None]) - lse).squeeze(1)
        return SamplerOutput(tokens.tolist(), chosen.tolist(), entropies.tolist())

    @staticmethod
    def _sample(
        logits: torch.Tensor, params: list[SamplingParams], uniforms: list[float]
    ) -> torch.Tensor:
        s, v = logits.shape
        dev = logits.device
        temps = torch.tensor([p.temperature for p in params], device=dev)
        u = torch.tensor(uniforms, dtype=torch.float32, device=dev)
        filtered = any(p.top_k != -1 or p.top_p < 1.0 or p.min_p > 0.0 for p in params)
        if not filtered:
            return sample(logits, temps, u)
        u = u[:, None]
        logits = logits / temps[:, None]
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        rank = torch.arange(v, device=dev)[None, :]
        top_k = torch.tensor([p.top_k if p.top_k != -1 else v for p in params], device=dev)
        top_p = torch.tensor([p.top_p for p in params], device=dev)
        min_p = torch.tensor([p.min_p for p in params], device=dev)
        mask = rank >= top_k[:, None]
        mask |= (probs.cumsum(-1) - probs) > top_p[:, None]  # mass before this token already > p
        mask |= probs < min_p[:, None] * probs[:, :1]
        mask[:, 0] = False  # the most likely token always survives
        cdf = probs.masked_fill(mask, 0.0).cumsum(-1)
        pick = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=v - 1)
        return order.gather(1, pick).squeeze(1)
