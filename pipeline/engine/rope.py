"""Rotary position embeddings, with the `rope_scaling` variants Llama/Qwen/Mistral configs use."""

from __future__ import annotations

import math
from typing import Any

import torch

from pipeline.errors import UnsupportedModelError


def _default_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def _llama3(inv_freq: torch.Tensor, p: dict[str, Any]) -> torch.Tensor:
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old_len = p["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(
    head_dim: int, theta: float, p: dict[str, Any], max_pos: int
) -> tuple[torch.Tensor, float]:
    factor = p.get("factor")
    orig = p.get("original_max_position_embeddings") or max_pos
    if factor is None:
        factor = max_pos / orig

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn_factor = p.get("attention_factor")
    if attn_factor is None:
        if p.get("mscale") and p.get("mscale_all_dim"):
            attn_factor = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        else:
            attn_factor = mscale(factor)
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, head_dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    pos_freqs = theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    extrapolation = 1.0 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (
        1.0 / pos_freqs
    ) * extrapolation
    return inv_freq, float(attn_factor)


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any], max_position: int
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim // 2] and the cos/sin scale ("attention factor")."""
    rope_type = scaling.get("rope_type", "default")
    if rope_type == "default":
        return _default_inv_freq(head_dim, theta), 1.0
    if rope_type == "linear":
        return _default_inv_freq(head_dim, theta) / scaling["factor"], 1.0
    if rope_type == "dynamic":
        # Dynamic NTK only rescales past max_position_embeddings, which the engine never
        # reaches (max_model_len is capped there), so within range it equals the default.
        return _default_inv_freq(head_dim, theta), 1.0
    if rope_type == "llama3":
        return _llama3(_default_inv_freq(head_dim, theta), scaling), 1.0
    if rope_type == "yarn":
        return _yarn(head_dim, theta, scaling, max_position)
    raise UnsupportedModelError(f"unsupported rope_scaling type {rope_type!r}")


class RotaryEmbedding(torch.nn.Module):
    """Precomputed cos/sin tables, applied in the rotate-half convention of HF Llama."""

    def __init__(self, head_dim: int, max_position: int, theta: float, scaling: dict[str, Any]):
        super().__init__()
        inv_freq, scale = rope_inv_freq(head_dim, theta, scaling, max_position)
        freqs = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)  # [max_position, head_dim]
        self.register_buffer("cos", emb.cos() * scale, persistent=False)
        self.register_buffer("sin", emb.sin() * scale, persistent=False)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tables for a batch, computed once per forward. positions: [T] -> 2 x [T, 1, D]."""
        return (
            self.cos[positions].unsqueeze(1).to(dtype),
            self.sin[positions].unsqueeze(1).to(dtype),
        )
