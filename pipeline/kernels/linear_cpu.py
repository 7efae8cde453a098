"""A C linear kernel with packed weights (csrc/linear_<bf16|f32>_cpu.c), as Python calls it.

Both kernels share one interface: `linear_<t>_pack(w, packed, n, k)` lays a [N, K] weight out
once in panels of 16 output columns; `linear_<t>(x, packed, bias, out, m, n, k, sx, so)` runs
y = x W^T + b and returns 0 (or -1 where it could not allocate its scratch);
`linear_<t>_simd()` says which loop was built (0 portable). `CLinearKernel` checks the
arguments, so a bad call raises KernelArgumentError instead of reading out of bounds.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import argument_error

_NULL = ctypes.c_void_p(0)
PANEL = 16  # output columns per packed panel: the kernels' NR


def packed_size(n: int, k: int) -> int:
    """Values a packed [N, K] weight holds: N rounded up to whole panels, times K."""
    return -(-n // PANEL) * PANEL * k


@dataclass(frozen=True)
class CLinearKernel:
    library: str  # csrc/<library>.c
    dtype: torch.dtype  # of x, the weight, the bias and the output
    storage: torch.dtype  # of the packed buffer
    suffix: str  # of the C entry points: linear_<suffix>, linear_<suffix>_pack, ..._simd

    def simd(self) -> int:
        """The loop this host's build has: 0 portable (or no build), else the kernel's code
        for its vector ISA."""
        lib = cpu_build.load(self.library)
        return 0 if lib is None else int(getattr(lib, f"linear_{self.suffix}_simd")())

    def has_vector_path(self) -> bool:
        """Whether this host's build has a vector loop: only then does the engine use it."""
        return self.simd() > 0

    def _lib(self) -> ctypes.CDLL:
        lib = cpu_build.load(self.library)
        if lib is None:
            raise RuntimeError(f"the C kernel {self.library} could not be built (see the log)")
        return lib

    def entry(self) -> ctypes._CFuncPtr:
        """The C function `linear_<suffix>` (decoder_cpu calls it through its address)."""
        return getattr(self._lib(), f"linear_{self.suffix}")

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """weight [N, K] -> the packed panels (a flat buffer)."""
        if weight.dim() != 2 or weight.dtype != self.dtype or weight.device.type != "cpu":
            raise argument_error(
                self.library,
                f"weight must be 2-D {self.suffix} on CPU, got {weight.dtype} "
                f"{tuple(weight.shape)}",
            )
        weight = weight.contiguous()
        n, k = weight.shape
        packed = torch.empty(packed_size(n, k), dtype=self.storage)
        getattr(self._lib(), f"linear_{self.suffix}_pack")(
            cpu_build.ptr(weight), cpu_build.ptr(packed), ctypes.c_int64(n), ctypes.c_int64(k)
        )
        return packed

    def linear(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
    ) -> torch.Tensor:
        """x [M, K] (rows dense in K) -> [M, out_features]."""
        if (
            x.dim() != 2
            or x.dtype != self.dtype
            or x.device.type != "cpu"
            or x.stride(-1) != 1
            or packed.numel() != packed_size(out_features, x.shape[1])
            or (
                bias is not None
                and (
                    bias.dtype != self.dtype
                    or bias.shape != (out_features,)
                    or not bias.is_contiguous()
                )
            )
        ):
            raise argument_error(
                self.library,
                f"x {x.dtype} {tuple(x.shape)} strides {x.stride()} for a packed weight of "
                f"{packed.numel()} values, {out_features} outputs"
                + ("" if bias is None else f", bias {bias.dtype} {tuple(bias.shape)}"),
            )
        m, k = x.shape
        out = torch.empty((m, out_features), dtype=self.dtype)
        i64 = ctypes.c_int64
        rc = self.entry()(
            cpu_build.ptr(x), cpu_build.ptr(packed),
            _NULL if bias is None else cpu_build.ptr(bias), cpu_build.ptr(out),
            i64(m), i64(out_features), i64(k), i64(x.stride(0)), i64(out_features),
        )  # fmt: skip
        if rc != 0:
            raise MemoryError(f"{self.library}: no memory for a scratch copy of x {tuple(x.shape)}")
        return out
