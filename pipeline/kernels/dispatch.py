"""Picks a kernel's implementation: Triton on CUDA tensors, a C kernel (where one exists and
builds) on CPU tensors, the torch reference elsewhere.

STEPWISE_KERNELS=auto (default) | triton | torch, from the process's settings (tests flip it
with `settings.install`):
`triton` forces the Triton kernels on any device (on CPU that needs TRITON_INTERPRET=1 set
before Triton is first imported: it reads it at import, decoration and launch);
`torch` forces the references everywhere (a GPU run without Triton, or to compare).
The `*_triton` modules are imported only when first chosen, so Triton stays optional.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import torch

from pipeline.config import runtime

ENV = "STEPWISE_KERNELS"
BACKENDS = ("auto", "triton", "torch")


class KernelArgumentError(ValueError):
    """A kernel was called with tensors of the wrong shape, stride, dtype or device."""

    code = "kernel_argument"


def backend() -> str:
    """The process's STEPWISE_KERNELS (its settings, read once at start; a bad value fails
    there, naming the variable)."""
    return runtime().kernels


@functools.cache
def has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(t: torch.Tensor) -> bool:
    """Whether a kernel on `t` (its main input) runs the Triton implementation."""
    choice = backend()
    if choice == "torch":
        return False
    if choice == "triton":
        return True
    return t.is_cuda and has_triton()


def use_cpu_kernel(t: torch.Tensor) -> bool:
    """Whether a kernel on `t` may run its C implementation (the caller checks it built)."""
    return backend() == "auto" and t.device.type == "cpu"


def fp32_rows_on_cpu(t: torch.Tensor) -> bool:
    """Whether `t` is what the C row kernels (logits statistics, sampling) take: [S, V] fp32
    on CPU, V > 0, each row dense."""
    return (
        t.device.type == "cpu"
        and t.dtype == torch.float32
        and t.dim() == 2
        and t.shape[1] > 0
        and t.stride(1) == 1
    )


def triton_module(name: str) -> ModuleType:
    """`pipeline.kernels.<name>_triton`, imported on first use."""
    return importlib.import_module(f"pipeline.kernels.{name}_triton")


def argument_error(kernel: str, message: str) -> KernelArgumentError:
    """The error for a bad argument (raise it where building `message` should wait for one)."""
    return KernelArgumentError(f"{kernel}: {message}")


def check(cond: bool, kernel: str, message: str) -> None:
    if not cond:
        raise argument_error(kernel, message)


def check_dtype(t: torch.Tensor, kernel: str, name: str, dtypes: tuple[torch.dtype, ...]) -> None:
    check(t.dtype in dtypes, kernel, f"{name} has dtype {t.dtype}, expected one of {dtypes}")


def check_contiguous_last(t: torch.Tensor, kernel: str, name: str) -> None:
    check(
        t.stride(-1) == 1,
        kernel,
        f"{name} must be contiguous in its last dim, strides {t.stride()}",
    )
