"""C fp32 linear for x86 CPUs with AVX2 + FMA or AVX-512 (csrc/linear_f32_cpu.c).

`pack` lays a [N, K] weight out once in the kernel's panels; `linear` then runs y = x W^T + b,
streaming each weight once a call with every row's sums in registers: at decode's few rows a
linear is a read of its weight, and this reads it faster than oneDNN's GEMM did (cpu_linear
decides). Each output is one fp32 chain over k, so a row's result does not depend on the other
rows of the call. `simd` says which loop this host's build has (0 portable, 1 AVX2 + FMA,
2 AVX-512).
"""

from __future__ import annotations

import torch

from pipeline.kernels.linear_cpu import CLinearKernel

LIBRARY = "linear_f32_cpu"
KERNEL = CLinearKernel(LIBRARY, torch.float32, torch.float32, "f32")
pack, linear, simd, has_vector_path = (
    KERNEL.pack,
    KERNEL.linear,
    KERNEL.simd,
    KERNEL.has_vector_path,
)
