"""C versions of the element-wise ops in elementwise.py, for CPU tensors (fp32, bf16).

csrc/elementwise_cpu.c does each op in one pass over its rows. Inputs are 2-D (RMSNorm,
SiLU-and-mul) or [T, heads, D] (rotary) with dense rows; anything else raises
KernelArgumentError, and `elementwise` keeps the torch reference for what is not supported.
"""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import argument_error, check, check_contiguous_last

LIBRARY = "elementwise_cpu"
DTYPES = (torch.float32, torch.bfloat16)
_NULL = ctypes.c_void_p(0)


def is_supported(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in DTYPES and cpu_build.is_built(LIBRARY)


def _check(kernel: str, x: torch.Tensor, dim: int, *others: torch.Tensor) -> None:
    """Raise KernelArgumentError unless x (and `others`) are as the kernel takes them. Called
    every layer of every step: the common case is one expression, and no message is built
    unless one is raised."""
    if (
        x.dim() == dim
        and x.dtype in DTYPES
        and x.device.type == "cpu"
        and x.stride(-1) == 1
        and all(t.dtype == x.dtype and t.device.type == "cpu" and t.stride(-1) == 1 for t in others)
    ):
        return
    check(x.dim() == dim, kernel, f"expected a {dim}-D input, got {tuple(x.shape)}")
    check(x.dtype in DTYPES and x.device.type == "cpu", kernel, f"{x.dtype} on {x.device}")
    for t in (x, *others):
        check(t.dtype == x.dtype, kernel, f"mixed dtypes {t.dtype} and {x.dtype}")
        check(t.device.type == "cpu", kernel, f"a tensor on {t.device}")
        check_contiguous_last(t, kernel, "input")


def _rms_norm(x, residual, weight, eps) -> torch.Tensor:
    kernel = "rms_norm_cpu"
    _check(kernel, x, 2, weight, *(() if residual is None else (residual,)))
    t, d = x.shape
    if weight.shape != (d,):
        raise argument_error(kernel, f"weight {tuple(weight.shape)} for rows of {d}")
    check(weight.is_contiguous(), kernel, "weight must be contiguous")
    if residual is not None:
        check(residual.shape == x.shape, kernel, "residual and x differ in shape")
    out = torch.empty((t, d), dtype=x.dtype)
    fn = cpu_build.entry(LIBRARY, "rms_norm", x.dtype)
    p = cpu_build.ptr
    fn(
        p(x),
        _NULL if residual is None else p(residual),
        p(weight), p(out),
        ctypes.c_int64(t), ctypes.c_int64(d), ctypes.c_int64(x.stride(0)),
        ctypes.c_int64(0 if residual is None else residual.stride(0)), ctypes.c_int64(d),
        ctypes.c_float(eps),
    )  # fmt: skip
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [T, D] -> [T, D]."""
    return _rms_norm(x, None, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x (in place, rounded to the dtype); returns (rms_norm(residual), residual)."""
    return _rms_norm(x, residual, weight, eps), residual


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [T, 2I] = [gate | up] -> silu(gate) * up: [T, I]."""
    kernel = "silu_and_mul_cpu"
    _check(kernel, x, 2)
    t, n2 = x.shape
    if n2 % 2:
        raise argument_error(kernel, f"odd width {n2}")
    out = torch.empty((t, n2 // 2), dtype=x.dtype)
    fn = cpu_build.entry(LIBRARY, "silu_and_mul", x.dtype)
    i64 = ctypes.c_int64
    fn(cpu_build.ptr(x), cpu_build.ptr(out), i64(t), i64(n2 // 2), i64(x.stride(0)), i64(n2 // 2))
    return out


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [T, H, D] and k [T, KVH, D] in place by cos, sin ([T, D] or [T, 1, D])."""
    kernel = "rotary_cpu"
    t, _, d = q.shape
    cos, sin = cos.reshape(t, d), sin.reshape(t, d)
    if d % 2:
        raise argument_error(kernel, f"odd head_dim {d}")
    check(cos.is_contiguous() and sin.is_contiguous(), kernel, "cos and sin must be dense")
    fn = cpu_build.entry(LIBRARY, "rotary", q.dtype)
    i64 = ctypes.c_int64
    for x in (q, k):
        _check(kernel, x, 3, cos, sin)
        if x.shape[0] != t or x.shape[2] != d:
            raise argument_error(kernel, f"{tuple(x.shape)} vs {tuple(q.shape)}")
        check(x.stride(1) >= d or x.shape[1] == 1, kernel, "heads overlap")
        fn(
            cpu_build.ptr(x), cpu_build.ptr(cos), cpu_build.ptr(sin),
            i64(t), i64(x.shape[1]), i64(d), i64(x.stride(0)), i64(x.stride(1)),
        )  # fmt: skip
    return q, k
