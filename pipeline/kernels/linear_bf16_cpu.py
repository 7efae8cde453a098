"""C bf16 linear for CPUs where oneDNN cannot pack bf16 (csrc/linear_bf16_cpu.c).

`pack` lays a [N, K] weight out once in the kernel's panels; `linear` then runs y = x W^T + b
with the weights read as bf16 and summed in fp32. `has_vector_path` says whether this host's
build has a vector loop (AVX2 + FMA, or NEON): only then is it faster than F.linear
(cpu_linear decides).
"""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import argument_error

LIBRARY = "linear_bf16_cpu"
KERNEL = "linear_bf16_cpu"
_NULL = ctypes.c_void_p(0)
PANEL = 16  # output columns per packed panel: csrc/linear_bf16_cpu.c's NR


def packed_size(n: int, k: int) -> int:
    """Values a packed [N, K] weight holds: N rounded up to whole panels, times K."""
    return -(-n // PANEL) * PANEL * k


def has_vector_path() -> bool:
    """Whether the kernel builds here with a vector loop (AVX2 + FMA or NEON), not the
    portable one."""
    lib = cpu_build.load(LIBRARY)
    return lib is not None and bool(lib.linear_bf16_simd())


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] bf16 -> the packed panels (a flat uint16 buffer held as int16)."""
    if weight.dim() != 2 or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        raise argument_error(
            KERNEL, f"weight must be 2-D bf16 on CPU, got {weight.dtype} {tuple(weight.shape)}"
        )
    weight = weight.contiguous()
    n, k = weight.shape
    lib = cpu_build.load(LIBRARY)
    if lib is None:
        raise RuntimeError(f"the C kernel {LIBRARY} could not be built (see the log)")
    packed = torch.empty(packed_size(n, k), dtype=torch.int16)
    lib.linear_bf16_pack(
        cpu_build.ptr(weight), cpu_build.ptr(packed), ctypes.c_int64(n), ctypes.c_int64(k)
    )
    return packed


def linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """x [M, K] bf16 (rows dense in K) -> [M, out_features] bf16."""
    if (
        x.dim() != 2
        or x.dtype != torch.bfloat16
        or x.device.type != "cpu"
        or x.stride(-1) != 1
        or packed.numel() != packed_size(out_features, x.shape[1])
        or (
            bias is not None
            and (
                bias.dtype != torch.bfloat16
                or bias.shape != (out_features,)
                or not bias.is_contiguous()
            )
        )
    ):
        raise argument_error(
            KERNEL,
            f"x {x.dtype} {tuple(x.shape)} strides {x.stride()} for a packed weight of "
            f"{packed.numel()} values, {out_features} outputs"
            + ("" if bias is None else f", bias {bias.dtype} {tuple(bias.shape)}"),
        )
    m, k = x.shape
    out = torch.empty((m, out_features), dtype=torch.bfloat16)
    i64 = ctypes.c_int64
    rc = cpu_build.load(LIBRARY).linear_bf16(
        cpu_build.ptr(x), cpu_build.ptr(packed),
        _NULL if bias is None else cpu_build.ptr(bias), cpu_build.ptr(out),
        i64(m), i64(out_features), i64(k), i64(x.stride(0)), i64(out_features),
    )  # fmt: skip
    if rc != 0:
        raise MemoryError(f"{KERNEL}: no memory for an fp32 copy of x {tuple(x.shape)}")
    return out
