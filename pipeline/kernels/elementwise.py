"""The decoder layer's element-wise ops: RMSNorm (optionally with the residual add fused),
SiLU-and-multiply, rotary embeddings.

The torch references are the engine's original code (model.py, rope.py), moved here
unchanged; on CPU the C versions in elementwise_cpu.py (same signatures) replace their chains
of small ops with one pass each, rounding where the references round.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.kernels import dispatch, elementwise_cpu


def _use_c(x: torch.Tensor) -> bool:
    return dispatch.use_cpu_kernel(x) and elementwise_cpu.is_supported(x)


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalize in fp32, scale in the model dtype: the same rounding as HF's LlamaRMSNorm.
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def add_rms_norm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual): the residual stream's add, then its norm."""
    residual = x + residual
    return rms_norm_torch(residual, weight, eps), residual


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    # x: [T, 2I] = [gate | up] -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_torch(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # q: [T, H, D]; k: [T, KVH, D]; cos, sin: [T, 1, D]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [..., D] -> weight * normalized x, same shape and dtype."""
    if _use_c(x) and x.dim() == 2:
        return elementwise_cpu.rms_norm(x, weight, eps)
    return rms_norm_torch(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); the C version updates `residual` in place."""
    if _use_c(x) and x.dim() == 2:
        return elementwise_cpu.add_rms_norm(x, residual, weight, eps)
    return add_rms_norm_torch(x, residual, weight, eps)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if _use_c(x) and x.dim() == 2:
        return elementwise_cpu.silu_and_mul(x)
    return silu_and_mul_torch(x)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on q [T, H, D] and k [T, KVH, D]; the C version rotates them in place."""
    if _use_c(q):
        return elementwise_cpu.rotary(q, k, cos, sin)
    return rotary_torch(q, k, cos, sin)
