"""A decoder stack's forward on CPU in one C call (csrc/decoder_cpu.c): every layer's kernels
called from C, in the order the engine's modules call them, instead of ten Python calls a layer.

The driver computes nothing itself: it calls the same C kernels the modules call (the packed
linear of linear_<f32|bf16>_cpu, elementwise_cpu's norms, SiLU and rotary, kv_store_cpu,
paged_attention_cpu) through function pointers taken from their libraries, with the arguments
the modules would give them, so its result is the modules' bit for bit. What it removes is the
Python between the kernels: on the R1-style reasoner (a 135M model, fp32) a decode step of one
sequence took 44.0 ms module by module and 26.7 ms in one call (bench/decoder_stack.py).

`DecoderStack.forward` takes the batch as the C attention path runs it: every row (decode
token or prefill token) one query against its own context, in one call per layer.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from pipeline.kernels import cpu_build, elementwise_cpu, kv_store_cpu, paged_attention_cpu
from pipeline.kernels.dispatch import argument_error, check
from pipeline.kernels.linear_cpu import CLinearKernel, packed_size

LIBRARY = "decoder_cpu"
KERNEL = "decoder_forward_cpu"
DTYPES = (torch.float32, torch.bfloat16)
# Return codes of decoder_forward (enum in csrc/decoder_cpu.c): the failing kernel's offset.
_STORE, _LINEAR, _ATTENTION = -10, -20, -30
_ATTN_NO_MEMORY, _ATTN_BAD_CONTEXT, _ATTN_BAD_BLOCK = -1, -2, -3
_P = ctypes.c_void_p


class _Kernels(ctypes.Structure):
    _fields_ = [
        (name, _P)
        for name in ("rms_norm", "linear", "silu_and_mul", "rotary", "store_kv", "attention")
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        (name, _P)
        for name in (
            "input_norm", "post_norm", "qkv", "qkv_bias", "o", "o_bias",
            "gate_up", "gate_up_bias", "down", "down_bias", "k_cache", "v_cache",
        )
    ]  # fmt: skip


class _Dims(ctypes.Structure):
    _INT64 = ("layers", "t", "hidden", "heads", "kv_heads", "head_dim", "intermediate")
    _INT64 += ("elem_size", "num_slots", "cache_head")
    _fields_ = [(name, ctypes.c_int64) for name in _INT64] + [("eps", ctypes.c_float)]


class _Buffers(ctypes.Structure):
    _fields_ = [
        (name, _P)
        for name in (
            "x", "residual", "h", "qkv", "attn", "gate_up", "act", "cos", "sin",
            "slots", "block_tables", "context_lens",
        )
    ]  # fmt: skip


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer as the driver reads it: norm weights [hidden], projections packed by
    the stack's linear kernel (qkv fused, gate/up fused), biases [out] or None."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


@dataclass(frozen=True)
class StackShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    scale: float  # attention's softmax scale


def is_supported(dtype: torch.dtype) -> bool:
    """Whether the driver and every kernel it calls build here for `dtype`."""
    return (
        dtype in DTYPES
        and cpu_build.is_built(LIBRARY)
        and cpu_build.is_built(elementwise_cpu.LIBRARY)
        and cpu_build.is_built(kv_store_cpu.LIBRARY)
        and cpu_build.is_built(paged_attention_cpu.LIBRARY)
    )


def _address(fn) -> int:
    return ctypes.cast(fn, _P).value


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class DecoderStack:
    """The layers of one model, packed for `linear` (a CLinearKernel of the model's dtype)."""

    def __init__(self, layers: list[LayerWeights], shape: StackShape, linear: CLinearKernel):
        dtype = linear.dtype
        if not is_supported(dtype):
            raise RuntimeError(f"{KERNEL}: a kernel it calls is not built here for {dtype}")
        self.dtype, self.shape, self.layers = dtype, shape, layers
        s = shape
        check(s.heads % s.kv_heads == 0, KERNEL, f"{s.heads} heads over {s.kv_heads} KV heads")
        width = s.heads * s.head_dim + 2 * s.kv_heads * s.head_dim
        sizes = {
            "input_norm": s.hidden, "post_norm": s.hidden, "qkv": (width, s.hidden),
            "o": (s.hidden, s.heads * s.head_dim), "gate_up": (2 * s.intermediate, s.hidden),
            "down": (s.hidden, s.intermediate),
        }  # fmt: skip
        for i, layer in enumerate(layers):
            for name, size in sizes.items():
                self._check_weight(i, name, getattr(layer, name), size, linear)
        suffix = cpu_build.SUFFIXES[str(dtype).removeprefix("torch.")]
        elementwise = cpu_build.load(elementwise_cpu.LIBRARY)
        kv_store = cpu_build.load(kv_store_cpu.LIBRARY)
        attention = cpu_build.load(paged_attention_cpu.LIBRARY)
        # Held while the stack lives: the function pointers below point into these libraries.
        self._libraries = (elementwise, kv_store, attention, cpu_build.load(linear.library))
        self._kernels = _Kernels(
            _address(getattr(elementwise, f"rms_norm_{suffix}")),
            _address(linear.entry()),
            _address(getattr(elementwise, f"silu_and_mul_{suffix}")),
            _address(getattr(elementwise, f"rotary_{suffix}")),
            _address(kv_store.store_kv),
            _address(getattr(attention, f"paged_decode_attention_{suffix}")),
        )
        self._layers = (_Layer * len(layers))()
        for c, layer in zip(self._layers, layers, strict=True):
            for name in LayerWeights.__dataclass_fields__:
                setattr(c, name, _ptr(getattr(layer, name)))
        self._caches_key: tuple[int, ...] = ()
        self._cache_shape: tuple = ()
        self._forward = cpu_build.load(LIBRARY).decoder_forward

    def _check_weight(self, i: int, name: str, t, size, linear: CLinearKernel) -> None:
        if isinstance(size, tuple):  # a projection: packed panels of [out, in], and its bias
            bias = getattr(self.layers[i], f"{name}_bias")
            ok = t.dtype == linear.storage and t.numel() == packed_size(*size)
            ok = ok and (bias is None or (bias.dtype == self.dtype and bias.shape == size[:1]))
            ok = ok and (bias is None or bias.is_contiguous())
        else:
            ok = t.dtype == self.dtype and t.shape == (size,)
        ok = ok and t.is_contiguous() and t.device.type == "cpu"
        check(ok, KERNEL, f"layer {i}'s {name}: {t.dtype} {tuple(t.shape)} for {size}")

    def _bind_caches(self, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Point the layers at their caches (again only when they moved), checking that every
        layer's caches are laid out alike: the attention shape is shared by all layers."""
        check(len(kv_caches) == len(self.layers), KERNEL, "one (k, v) cache pair per layer")
        k0 = kv_caches[0][0]
        shape = (k0.shape, k0.stride(), k0.dtype, k0.device.type)
        for k, v in kv_caches:
            check(
                (k.shape, k.stride(), k.dtype, k.device.type) == shape
                and (v.shape, v.stride(), v.dtype, v.device.type) == shape,
                KERNEL,
                "every layer's K and V caches must share one shape, stride and dtype",
            )
        kvh, blocks, bs, d = k0.shape
        check(
            kvh == self.shape.kv_heads
            and d == self.shape.head_dim
            and k0.dtype == self.dtype
            and k0.stride()[1:] == (bs * d, d, 1),
            KERNEL,
            f"caches {tuple(k0.shape)} {k0.stride()} {k0.dtype} for this stack",
        )
        for c, (k, v) in zip(self._layers, kv_caches, strict=True):
            c.k_cache, c.v_cache = k.data_ptr(), v.data_ptr()
        self._cache_shape = (kvh, blocks, bs, d, k0.stride(0))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, hidden] embeddings; cos, sin: [T, head_dim] (or [T, 1, head_dim]); slots
        [T], block_tables [T, blocks], context_lens [T] int64 (each row's context including
        itself). Stores every row's K/V, runs every layer; returns (the last layer's MLP
        output, the residual stream before it), as the modules' loop does. `x` is overwritten.
        """
        s = self.shape
        t = x.shape[0]
        cos, sin = cos.reshape(t, -1), sin.reshape(t, -1)
        ok = (
            x.shape == (t, s.hidden)
            and x.dtype == cos.dtype == sin.dtype == self.dtype
            and x.is_contiguous()
            and cos.shape == sin.shape == (t, s.head_dim)
            and cos.is_contiguous()
            and sin.is_contiguous()
            and slots.shape == context_lens.shape == (t,)
            and slots.dtype == context_lens.dtype == block_tables.dtype == torch.int64
            and slots.is_contiguous()
            and context_lens.is_contiguous()
            and block_tables.dim() == 2
            and block_tables.shape[0] == t
            and block_tables.is_contiguous()
        )
        if not ok:
            raise argument_error(
                KERNEL,
                f"x {x.dtype} {tuple(x.shape)}, cos/sin {tuple(cos.shape)}, slots "
                f"{tuple(slots.shape)}, tables {tuple(block_tables.shape)} {block_tables.dtype}, "
                f"context_lens {tuple(context_lens.shape)}, for {self.dtype} rows of {s.hidden}",
            )
        key = tuple(c.data_ptr() for pair in kv_caches for c in pair)
        if key != self._caches_key:
            self._bind_caches(kv_caches)
            self._caches_key = key
        residual = torch.empty_like(x)
        if t == 0:
            return x, residual
        q_size, kv_size = s.heads * s.head_dim, s.kv_heads * s.head_dim
        new = x.new_empty
        h, qkv, attn = new((t, s.hidden)), new((t, q_size + 2 * kv_size)), new((t, q_size))
        gate_up, act = new((t, 2 * s.intermediate)), new((t, s.intermediate))
        kvh, blocks, bs, d, head_stride = self._cache_shape
        dims = _Dims(
            len(self.layers), t, s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate,
            x.element_size(), blocks * bs, head_stride, s.eps,
        )  # fmt: skip
        buffers = _Buffers(*(_ptr(b) for b in (x, residual, h, qkv, attn, gate_up, act)))
        buffers.cos, buffers.sin, buffers.slots = cos.data_ptr(), sin.data_ptr(), _ptr(slots)
        buffers.block_tables, buffers.context_lens = _ptr(block_tables), _ptr(context_lens)
        attn_shape = paged_attention_cpu._Shape(
            t, kvh, s.heads // kvh, d, bs, 0, 0, 0, 0,
            head_stride, bs * d, head_stride, bs * d,
            block_tables.shape[1], block_tables.shape[1], blocks, s.scale,
        )  # fmt: skip
        failed = ctypes.c_int64(-1)
        rc = self._forward(
            ctypes.byref(self._kernels), self._layers, ctypes.byref(dims), ctypes.byref(buffers),
            ctypes.byref(attn_shape), ctypes.byref(failed),
        )  # fmt: skip
        if rc != 0:
            raise _error(rc, failed.value, blocks * bs)
        return x, residual


def _error(rc: int, layer: int, num_slots: int) -> Exception:
    """The exception the module path would raise for the same bad input."""
    where = f"{KERNEL} (layer {layer})"
    if rc == _STORE:
        return argument_error(where, f"a slot lies outside -1..{num_slots - 1}")
    if rc == _LINEAR:
        return MemoryError(f"{where}: the linear kernel could not allocate its scratch memory")
    code = rc - _ATTENTION
    if code == _ATTN_NO_MEMORY:
        return MemoryError(f"{where}: attention could not allocate its scratch memory")
    if code == _ATTN_BAD_CONTEXT:
        return argument_error(where, "a context length is negative or longer than its table")
    if code == _ATTN_BAD_BLOCK:
        return argument_error(where, "a block id lies outside the cache")
    return argument_error(where, f"failed with code {rc}")
