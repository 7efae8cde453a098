"""C paged decode attention for CPU tensors: same signature as `paged_decode_attention_torch`.

csrc/paged_attention_cpu.c reads each sequence's K/V in place through its block table (no
gather into a padded buffer), fp32 softmax and accumulation, on torch's OpenMP threads.
fp32 and bf16; other dtypes, or a host without a C compiler, keep the torch reference
(`is_supported`).
"""

from __future__ import annotations

import ctypes

import torch

from pipeline.kernels import cpu_build
from pipeline.kernels.dispatch import check, check_contiguous_last, check_dtype

KERNEL = "paged_decode_attention_cpu"
LIBRARY = "paged_attention_cpu"
DTYPES = (torch.float32, torch.bfloat16)
# Return codes of the C entry points (enum in csrc/paged_attention_cpu.c).
_NO_MEMORY, _BAD_CONTEXT, _BAD_BLOCK = -1, -2, -3


class _Shape(ctypes.Structure):
    # Mirrors `struct attn_shape` in csrc/paged_attention_cpu.c.
    _INT64 = ("b", "kvh", "g_heads", "d", "bs", "sq_b", "sq_h", "so_b", "so_h")
    _INT64 += ("sk_h", "sk_blk", "sv_h", "sv_blk", "sbt", "table_width", "num_blocks")
    _fields_ = [(name, ctypes.c_int64) for name in _INT64] + [("scale", ctypes.c_float)]


def is_supported(q: torch.Tensor) -> bool:
    """Whether this kernel runs for `q` here (a CPU tensor of an fp32/bf16 dtype, built)."""
    return q.device.type == "cpu" and q.dtype in DTYPES and cpu_build.is_built(LIBRARY)


def _well_formed(q, k_cache, v_cache, tables, ctx) -> bool:
    """Every argument as the kernel takes it, in one expression: called every layer of every
    step, so no message is built unless `_explain` has one to raise."""
    if q.dim() != 3 or k_cache.dim() != 4:
        return False
    b, h, d = q.shape
    kvh, d_cache = k_cache.shape[0], k_cache.shape[3]
    return (
        v_cache.shape == k_cache.shape
        and d_cache == d
        and h % kvh == 0
        and q.dtype in DTYPES
        and k_cache.dtype == v_cache.dtype == q.dtype
        and k_cache.device.type == v_cache.device.type == "cpu"
        and k_cache.stride(2) == v_cache.stride(2) == d
        and k_cache.stride(3) == v_cache.stride(3) == q.stride(2) == 1
        and tables.dim() == 2
        and tables.shape[0] == b
        and ctx.shape == (b,)
    )


def _explain(q, k_cache, v_cache, tables, ctx) -> None:
    """Raise KernelArgumentError for the first argument `_well_formed` refused."""
    check(q.dim() == 3 and k_cache.dim() == 4, KERNEL, "q must be [B, H, D], caches 4-D")
    b, h, d = q.shape
    kvh, _, _, dk = k_cache.shape
    check(v_cache.shape == k_cache.shape, KERNEL, "k_cache and v_cache differ in shape")
    check(dk == d and h % kvh == 0, KERNEL, f"q {tuple(q.shape)} vs cache {tuple(k_cache.shape)}")
    check_dtype(q, KERNEL, "q", DTYPES)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check(t.dtype == q.dtype, KERNEL, f"{name} is {t.dtype}, q is {q.dtype}")
        check(t.device.type == "cpu", KERNEL, f"{name} is on {t.device}")
        check(t.stride(2) == d, KERNEL, f"{name} rows of head_dim must be dense: {t.stride()}")
        check_contiguous_last(t, KERNEL, name)
    check_contiguous_last(q, KERNEL, "q")
    check(tables.dim() == 2 and tables.shape[0] == b, KERNEL, "block_tables must be [B, blocks]")
    check(ctx.shape == (b,), KERNEL, "context_lens must be [B]")
    raise AssertionError("_well_formed and _explain disagree")  # pragma: no cover


def paged_decode_attention_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    workspace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """One query token per sequence. q: [B, H, D] -> [B, H, D]; `workspace` is unused.

    Lengths and block ids are checked in C (no extra torch ops per layer); an id outside the
    cache or a context longer than its table raises KernelArgumentError, as torch would.
    """
    del workspace  # the kernel reads the cache in place: nothing to gather into
    # No-ops for the engine's int64 tensors.
    tables = block_tables.to(torch.int64).contiguous()
    ctx = context_lens.to(torch.int64).contiguous()
    if not _well_formed(q, k_cache, v_cache, tables, ctx):
        _explain(q, k_cache, v_cache, tables, ctx)  # raises, naming what is wrong
    b, h, d = q.shape
    kvh, _, bs, _ = k_cache.shape
    out = torch.empty_like(q)
    if b == 0:
        return out
    shape = _Shape(
        b, kvh, h // kvh, d, bs,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        tables.stride(0), tables.shape[1], k_cache.shape[1], scale,
    )  # fmt: skip
    fn = cpu_build.entry(LIBRARY, "paged_decode_attention", q.dtype)
    ptr = cpu_build.ptr
    rc = fn(
        ptr(q), ptr(k_cache), ptr(v_cache), ptr(tables), ptr(ctx), ptr(out), ctypes.byref(shape)
    )
    if rc == _NO_MEMORY:
        raise MemoryError(f"{KERNEL}: could not allocate its scratch memory")
    check(rc != _BAD_CONTEXT, KERNEL, "a context length is negative or longer than its table")
    check(rc != _BAD_BLOCK, KERNEL, f"a block id lies outside 0..{k_cache.shape[1] - 1}")
    check(rc == 0, KERNEL, f"failed with code {rc}")
    return out
