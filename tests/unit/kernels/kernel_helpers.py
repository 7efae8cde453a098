"""Shared by the kernel tests: tolerances, comparison, cases, interpreted module loading.

Triton (3.9) reads TRITON_INTERPRET when it is first imported (its own `tl.max`, `tl.sum`...
are jit functions), when a kernel is decorated and when it launches. So a process runs
either interpreted kernels (no CUDA: the CPU cases) or compiled ones (the `gpu` cases), and
the CPU cases load private copies of the `*_triton` modules with the variable set.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import torch

from pipeline.kernels.paged_attention import paged_decode_attention_torch

# A Triton kernel against the torch reference computed in fp32 from the same (already
# rounded) inputs: (atol, rtol). For bf16/fp16 this covers rounding the output itself.
TOLERANCES = {
    torch.float32: (2e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
DTYPES = list(TOLERANCES)

_INTERPRETED: dict[str, ModuleType] = {}


def import_triton_for_this_process() -> None:
    """Import triton interpreted unless CUDA is here (and TRITON_INTERPRET is not set)."""
    if "triton" in sys.modules:
        return
    if torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
        importlib.util.find_spec("triton")  # compiled mode: imported when first used
        return
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401
    except ImportError:
        pass  # the `kernels` fixture reports it
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


def triton_is_interpreted() -> bool:
    import triton.language.standard as standard

    return type(standard.max).__name__ == "InterpretedFunction"


def load_interpreted(name: str) -> ModuleType:
    """A private copy of `pipeline.kernels.<name>_triton`; TRITON_INTERPRET=1 must be set."""
    if name not in _INTERPRETED:
        spec = importlib.util.find_spec(f"pipeline.kernels.{name}_triton")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # decorates the kernels as interpreted functions
        _INTERPRETED[name] = module
    return _INTERPRETED[name]


def assert_close(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(got.float().cpu(), ref.float().cpu(), atol=atol, rtol=rtol)


def linear_case(dtype, rows: int, n: int, k: int, bias: bool, seed: int = 0):
    """x [rows, k], w [n, k], b [n] (or None) in `dtype`, and F.linear of them in float64 (the
    inputs as rounded): a C linear kernel's case."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / max(k, 1) ** 0.5).to(dtype)
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    ref = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    return x, w, b, ref


def make_case(device, dtype, kv_heads, group, contexts, bs=16, head_dim=32, seed=0):
    """A ragged paged-attention batch: q, k_cache, v_cache, shuffled block tables, lengths."""
    g = torch.Generator().manual_seed(seed)
    b, max_blocks = len(contexts), -(-max(contexts) // bs) + 1  # one spare column of padding
    num_blocks = b * max_blocks + 3
    k = torch.randn(kv_heads, num_blocks, bs, head_dim, generator=g)
    v = torch.randn(kv_heads, num_blocks, bs, head_dim, generator=g)
    q = torch.randn(b, kv_heads * group, head_dim, generator=g)
    tables = torch.randperm(num_blocks, generator=g)[: b * max_blocks].view(b, max_blocks)
    ctx = torch.tensor(contexts)
    return [t.to(device) for t in (q.to(dtype), k.to(dtype), v.to(dtype), tables, ctx)]


def reference(q, k, v, tables, ctx, scale):
    """The torch decode-attention reference in fp32, on CPU."""
    args = [t.cpu() for t in (q.float(), k.float(), v.float(), tables, ctx)]
    return paged_decode_attention_torch(*args, scale)
