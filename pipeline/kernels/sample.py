"""Sampling a token per row from softmax(logits / T) by inverse CDF, given each row's uniform.

The reference (`sample_torch`) is the sampler's expression: divide, softmax, cumulative sum,
and the first index whose cumulative probability exceeds u times the last one. sample_cpu.py
(C) reads each row twice and allocates nothing; the two may pick different neighbours only
where u falls within rounding of a boundary between two tokens' cumulative probabilities.
On GPU the reference runs (one fused pass of torch ops per step is cheap there).
"""

from __future__ import annotations

import torch

from pipeline.kernels import dispatch, sample_cpu


def sample_torch(
    logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    # logits [S, V], temperatures [S] (> 0), uniforms [S] in [0, 1) -> [S] int64
    v = logits.shape[1]
    cdf = torch.softmax(logits / temperatures[:, None], dim=-1).cumsum(-1)
    u = uniforms.to(cdf.dtype)[:, None]
    pick = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=v - 1)
    return pick.squeeze(1)


def sample(
    logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    """Dispatches to C on CPU where it is built, else to the torch reference."""
    if dispatch.use_cpu_kernel(logits) and sample_cpu.is_supported(logits):
        return sample_cpu.sample_cpu(logits, temperatures, uniforms)
    return sample_torch(logits, temperatures, uniforms)
