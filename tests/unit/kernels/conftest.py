"""Every Triton kernel case runs on CPU under the Triton interpreter and, marked `gpu`, on
CUDA with the compiled kernels. Run the `gpu` cases in a process of their own (`-m gpu`, as
scripts/gpu_check.sh does): the interpreter must not be on while Triton compiles.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.unit.kernels.kernel_helpers import (
    import_triton_for_this_process,
    load_interpreted,
    triton_is_interpreted,
)

import_triton_for_this_process()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> torch.device:
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(request.param)


@pytest.fixture
def kernels(device, monkeypatch):
    """load(name) -> the `pipeline.kernels.<name>_triton` module that runs on `device`."""
    try:
        import triton  # noqa: F401
    except ImportError:  # a dev dependency: a missing one is a failure, not a skip
        pytest.fail("triton is not installed: pip install -e '.[dev]'")
    if device.type == "cuda":
        if triton_is_interpreted():
            pytest.skip("triton was imported with TRITON_INTERPRET=1: run `-m gpu` without it")
        return lambda name: importlib.import_module(f"pipeline.kernels.{name}_triton")
    if not triton_is_interpreted():
        if torch.cuda.is_available():  # this process compiles for the GPU (see kernel_helpers)
            pytest.skip("CUDA process: the interpreter cases run in CPU CI (or TRITON_INTERPRET=1)")
        pytest.fail("triton was imported before TRITON_INTERPRET=1 could be set")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return load_interpreted
