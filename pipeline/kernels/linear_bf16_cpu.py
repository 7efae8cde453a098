"""C bf16 linear for CPUs where oneDNN cannot pack bf16 (csrc/linear_bf16_cpu.c).

`pack` lays a [N, K] weight out once in the kernel's panels; `linear` then runs y = x W^T + b
with the weights read as bf16 and summed in fp32. `has_vector_path` says whether this host's
build has a vector loop (AVX2 + FMA, or NEON): only then is it faster than F.linear
(cpu_linear decides).
"""

from __future__ import annotations

import torch

from pipeline.kernels.linear_cpu import CLinearKernel

LIBRARY = "linear_bf16_cpu"
# The packed buffer holds bf16 bits (uint16 in C) as int16.
KERNEL = CLinearKernel(LIBRARY, torch.bfloat16, torch.int16, "bf16")
# has_vector_path: whether the kernel builds here with a vector loop (AVX2 + FMA or NEON).
pack, linear, has_vector_path = KERNEL.pack, KERNEL.linear, KERNEL.has_vector_path
