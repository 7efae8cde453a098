"""C inverse-CDF sampling for CPU (csrc/sample_cpu.c): each row read twice, nothing allocated,
where the torch reference makes four [S, V] passes and three temporaries."""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import check, check_contiguous_last, fp32_rows_on_cpu

LIBRARY = "sample_cpu"
KERNEL = "sample_cpu"


def is_supported(logits: torch.Tensor) -> bool:
    return fp32_rows_on_cpu(logits) and cpu_build.is_built(LIBRARY)


def sample_cpu(
    logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    """logits [S, V] fp32 (rows dense), temperatures [S] (> 0), uniforms [S] in [0, 1) ->
    [S] int64: per row the first index whose running sum of softmax(logits / T) exceeds
    u times the total."""
    check(logits.dim() == 2 and logits.shape[1] > 0, KERNEL, f"logits {tuple(logits.shape)}")
    check(logits.dtype == torch.float32, KERNEL, f"logits are {logits.dtype}, expected fp32")
    check_contiguous_last(logits, KERNEL, "logits")
    s, v = logits.shape
    temps = temperatures.to(torch.float32).contiguous()
    u = uniforms.to(torch.float32).contiguous()
    for name, t in (("temperatures", temps), ("uniforms", u)):
        check(t.shape == (s,) and t.device.type == "cpu", KERNEL, f"{name} {tuple(t.shape)}")
    check(bool((temps > 0).all()), KERNEL, "temperatures must be > 0 (greedy rows take argmax)")
    out = torch.empty(s, dtype=torch.int64)
    if s:
        i64, ptr = ctypes.c_int64, cpu_build.ptr
        cpu_build.load(LIBRARY).sample_f32(
            ptr(logits), i64(s), i64(v), i64(logits.stride(0)), ptr(temps), ptr(u), ptr(out)
        )
    return out
