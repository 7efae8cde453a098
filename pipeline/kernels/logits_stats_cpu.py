"""C per-row logits statistics for CPU (csrc/logits_stats_cpu.c): two reads of each row and
no temporaries, where the torch reference makes five passes and two [S, V] buffers."""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import check, check_contiguous_last, fp32_rows_on_cpu

LIBRARY = "logits_stats_cpu"
KERNEL = "logits_stats_cpu"


def is_supported(logits: torch.Tensor) -> bool:
    return fp32_rows_on_cpu(logits) and cpu_build.is_built(LIBRARY)


def logits_stats_cpu(logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """logits: [S, V] fp32, rows dense -> (argmax, max_prob, entropy, lse) ([S] each; the
    dispatcher, logits_stats.py, names them)."""
    check(logits.dim() == 2 and logits.shape[1] > 0, KERNEL, f"logits {tuple(logits.shape)}")
    check(logits.dtype == torch.float32, KERNEL, f"logits are {logits.dtype}, expected fp32")
    check_contiguous_last(logits, KERNEL, "logits")
    s, v = logits.shape
    argmax = torch.empty(s, dtype=torch.int64)
    max_prob, entropy, lse = (torch.empty(s) for _ in range(3))
    if s:
        i64, ptr = ctypes.c_int64, cpu_build.ptr
        cpu_build.load(LIBRARY).logits_stats_f32(
            ptr(logits), i64(s), i64(v), i64(logits.stride(0)),
            ptr(argmax), ptr(max_prob), ptr(entropy), ptr(lse),
        )  # fmt: skip
    return argmax, max_prob, entropy, lse
