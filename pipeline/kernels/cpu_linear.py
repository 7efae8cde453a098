"""Linears with prepacked weights: the CPU fast path for every projection.

`F.linear` in fp32 goes to MKL sgemm, which on some CPUs (AMD EPYC here) takes a slow
generic path; oneDNN with weights reordered once into its blocked layout runs the same GEMM
1.3-2x faster in fp32 and several times faster in bf16 (AVX512-BF16). vLLM's CPU backend
does the same. The reference is `F.linear`; tests check the two agree.

In fp32 on x86 with AVX2 + FMA or AVX-512, the C kernel of linear_f32_cpu goes first: a
decode step's linears are reads of their weights, and it streams them at 1.03-1.31x the time
of one read of the bytes from 1 to 8 rows, where oneDNN took 1.3-1.8x (a 135M model, AVX-512
host, bench/RESULTS.md); it also led oneDNN up to 64 rows there and tied at 256. Each output
is one fp32 chain over k: a row's result does not depend on the batch it is in.

Where oneDNN cannot pack bf16 (AVX2-only x86), F.linear runs bf16 through generic loops, 2-6x
slower than this module's other path: the C kernel of linear_bf16_cpu (weights packed once,
read as bf16, summed in fp32 with AVX2 + FMA, or NEON on AArch64). With AVX-512 BF16 that
kernel multiplies with vdpbf16ps and goes before oneDNN: on an AMD EPYC (Zen 4, 2 threads) it
ran SmolLM2's projections 1.05-1.96x as fast as oneDNN's packed bf16 from 1 to 32 rows and
0.96-1.07x at 128 (bench/linear_bf16.py), and being C, the decoder stack's driver can call it
(decoder_cpu.py). Not where the CPU has AMX: oneDNN's tiles there do many times the
multiply-adds a cycle of vdpbf16ps, which prefill's long chunks need (not measured against the
kernel: no AMX host this time).
`prepack_linears` picks, per dtype, the C kernel where it goes first, else oneDNN where it
packs, else the bf16 kernel where it builds with its vector loop, else F.linear.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from types import ModuleType

import torch
from torch import nn

from pipeline.kernels import cpu_build, dispatch, linear_bf16_cpu, linear_f32_cpu
from pipeline.kernels.linear_cpu import CLinearKernel

_OPS = torch.ops.mkldnn


def is_available() -> bool:
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(_OPS, "_linear_pointwise")
        and hasattr(_OPS, "_reorder_linear_weight")
    )


@functools.cache
def supports(dtype: torch.dtype) -> bool:
    """Whether oneDNN can pack weights of `dtype` on this CPU.

    bf16 needs AVX-512 (BW/VL/DQ) or AVX-NE-CONVERT; on an AVX2-only CPU the reorder raises,
    and the model keeps F.linear for that dtype.
    """
    if not is_available() or dtype not in (torch.float32, torch.bfloat16):
        return False
    try:
        _OPS._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), 1)
    except RuntimeError:
        return False
    return True


class _Prepacked(nn.Module, ABC):
    """An nn.Linear's stand-in on CPU: its sizes and bias kept, its weight in a packed layout;
    `_rows` maps [rows, in] (dense in `in`) to [rows, out]."""

    def __init__(self, linear: nn.Linear, packed_weight: torch.Tensor):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.register_buffer("packed_weight", packed_weight)
        bias = linear.bias.detach().contiguous() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    @abstractmethod
    def _rows(self, rows: torch.Tensor) -> torch.Tensor:
        """[rows, in] -> [rows, out]: how this stand-in multiplies (each subclass its own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in] -> [..., out]
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        if rows.stride(-1) != 1:
            rows = rows.contiguous()
        return self._rows(rows).view(*shape[:-1], self.out_features)


class PackedLinear(_Prepacked):
    """Drop-in for an nn.Linear on CPU (fp32/bf16), with its weight in oneDNN's layout."""

    def __init__(self, linear: nn.Linear, batch_hint: int):
        w = linear.weight.detach()
        super().__init__(linear, _OPS._reorder_linear_weight(w, batch_hint))

    def _rows(self, rows: torch.Tensor) -> torch.Tensor:
        return _OPS._linear_pointwise(rows, self.packed_weight, self.bias, "none", [], "")


class _KernelLinear(_Prepacked):
    """Drop-in for an nn.Linear on one of our C kernels (`kernel`: its module, with `pack` and
    `linear`)."""

    kernel: ModuleType

    def __init__(self, linear: nn.Linear):
        super().__init__(linear, self.kernel.pack(linear.weight.detach()))

    def _rows(self, rows: torch.Tensor) -> torch.Tensor:
        return self.kernel.linear(rows, self.packed_weight, self.bias, self.out_features)


class F32Linear(_KernelLinear):
    """An fp32 nn.Linear on x86 CPUs with the C kernel's vector loop (linear_f32_cpu)."""

    kernel = linear_f32_cpu


class Bf16Linear(_KernelLinear):
    """A bf16 nn.Linear on CPU with AVX-512 BF16, or where oneDNN cannot pack bf16
    (linear_bf16_cpu)."""

    kernel = linear_bf16_cpu


def kernel_of(module: nn.Module) -> CLinearKernel | None:
    """The C kernel a linear runs on (an F32Linear's or Bf16Linear's), else None."""
    return module.kernel.KERNEL if isinstance(module, _KernelLinear) else None


# linear_bf16_simd()'s code for the AVX-512 BF16 loop: there the kernel goes before oneDNN.
BF16_DOT_LOOP = 3


def has_amx() -> bool:
    """Whether this CPU has AMX tiles for bf16 (oneDNN uses them)."""
    return "amx_bf16" in cpu_build.cpu_flags()


def bf16_kernel_applies() -> bool:
    """Whether bf16 linears take the C kernel: STEPWISE_KERNELS leaves C kernels on, and the
    kernel builds here with vdpbf16ps (AVX-512 BF16) on a CPU without AMX, or with any vector
    loop (AVX2 + FMA, NEON) where oneDNN cannot pack bf16."""
    if dispatch.backend() != "auto":
        return False
    loop = linear_bf16_cpu.KERNEL.simd()
    if not supports(torch.bfloat16):
        return loop > 0
    return loop == BF16_DOT_LOOP and not has_amx()


def f32_kernel_applies() -> bool:
    """Whether fp32 linears take the C kernel: it builds here with a vector loop (AVX2 + FMA
    or AVX-512) and STEPWISE_KERNELS leaves C kernels on."""
    return dispatch.backend() == "auto" and linear_f32_cpu.has_vector_path()


def replacement(linear: nn.Linear, batch_hint: int) -> nn.Module | None:
    """What `prepack_linears` puts in place of `linear` on this CPU, or None (it stays)."""
    w = linear.weight
    if w.device.type != "cpu":
        return None
    if w.dtype == torch.float32 and f32_kernel_applies():
        return F32Linear(linear)
    if w.dtype == torch.bfloat16 and bf16_kernel_applies():
        return Bf16Linear(linear)
    if supports(w.dtype):
        return PackedLinear(linear, batch_hint)
    return None


# The rows oneDNN lays a weight out for. A layout for 64 rows costs nothing at 1 row (fp32 and
# bf16, one and two threads: within 3%), while one for a single row made 5 rows cost 1.43x and
# 32 rows 1.16x (fp32, SmolLM2's 30 layers read in turn): a speculative verifying pass carries
# k + 1 rows a sequence, and prefill chunks many more, whatever max_num_seqs is.
BATCH_HINT = 64


def prepack_linears(model: nn.Module, batch_hint: int = BATCH_HINT) -> int:
    """Replace every CPU nn.Linear by an F32Linear or Bf16Linear where that C kernel applies to
    its dtype, else a PackedLinear where oneDNN packs its dtype; returns how many were
    replaced."""
    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear) and child.weight is not None:
                new = replacement(child, batch_hint)
                if new is not None:
                    swaps.append((parent, name, new))
    for parent, name, new in swaps:
        setattr(parent, name, new)
    return len(swaps)
