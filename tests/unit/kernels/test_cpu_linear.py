import pytest
import torch
from torch import nn

from pipeline.kernels import cpu_linear, linear_bf16_cpu
from pipeline.kernels.cpu_linear import (
    Bf16Linear,
    PackedLinear,
    is_available,
    prepack_linears,
    supports,
)

pytestmark = pytest.mark.skipif(not is_available(), reason="this torch build has no oneDNN ops")


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 32, 100])
def test_packed_linear_matches_f_linear(dtype, atol, bias, rows):
    if not supports(dtype):
        pytest.skip(f"oneDNN cannot pack {dtype} on this CPU (bf16 needs AVX-512 or AVX-NE)")
    torch.manual_seed(rows)
    lin = nn.Linear(96, 200, bias=bias).to(dtype)
    x = torch.randn(rows, 96, dtype=dtype)
    ref = lin(x)
    got = PackedLinear(lin, batch_hint=32)(x)
    assert got.dtype == dtype and got.shape == ref.shape
    assert torch.allclose(got.float(), ref.float(), atol=atol, rtol=1e-2)


def test_prepack_swaps_only_cpu_linears_and_keeps_3d_inputs_working(monkeypatch):
    monkeypatch.setenv("STEPWISE_KERNELS", "torch")  # fp32 on oneDNN, not the C kernel
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 4)))
    x = torch.randn(2, 3, 8)
    ref = model(x)
    assert prepack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[2][0], PackedLinear)
    assert torch.allclose(model(x), ref, atol=1e-5)


@pytest.fixture
def no_onednn_bf16(monkeypatch):
    """This CPU as an AVX2-only one: oneDNN's bf16 reorder raises (its message there)."""

    def reorder(w, batch_hint):
        if w.dtype == torch.bfloat16:
            raise RuntimeError("bf16 path needs the cpu support avx_ne_convert or avx512bw")
        return torch.ops.mkldnn._reorder_linear_weight(w, batch_hint)

    class Ops:
        _reorder_linear_weight = staticmethod(reorder)
        _linear_pointwise = torch.ops.mkldnn._linear_pointwise

    monkeypatch.setattr(cpu_linear, "_OPS", Ops)
    supports.cache_clear()
    yield
    supports.cache_clear()


def _bf16_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4, bias=False)).to(torch.bfloat16)
    return model, torch.randn(2, 3, 8, dtype=torch.bfloat16)


def test_without_onednn_bf16_the_c_kernel_takes_bf16_linears(no_onednn_bf16):
    if not linear_bf16_cpu.has_vector_path():
        pytest.skip("the bf16 kernel has no vector path on this CPU: F.linear stays")
    model, x = _bf16_model()
    ref = model(x)
    assert not supports(torch.bfloat16) and supports(torch.float32)
    assert cpu_linear.bf16_kernel_applies()
    assert prepack_linears(model) == 2
    assert all(isinstance(m, Bf16Linear) for m in model)
    got = model(x)  # 3-D input, and each layer's output feeds the next
    assert got.shape == ref.shape and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), ref.float(), atol=0.05, rtol=2e-2)
    assert torch.allclose(model(x.transpose(0, 1)).transpose(0, 1).float(), got.float())


def test_without_onednn_bf16_or_c_kernels_bf16_stays_on_f_linear(no_onednn_bf16, monkeypatch):
    monkeypatch.setenv("STEPWISE_KERNELS", "torch")  # the references everywhere
    model, x = _bf16_model()
    ref = model(x)
    assert not cpu_linear.bf16_kernel_applies()
    assert prepack_linears(model) == 0
    assert all(isinstance(m, nn.Linear) for m in model)
    assert torch.equal(model(x), ref)


@pytest.mark.parametrize(
    "loop, onednn_packs, amx, applies",
    [(0, False, False, False), (0, True, False, False), (1, False, False, True),
     (1, True, False, False), (2, False, False, True), (3, True, False, True),
     (3, False, False, True), (3, True, True, False)],
)  # fmt: skip
def test_which_bf16_path_each_kernel_loop_gets(monkeypatch, loop, onednn_packs, amx, applies):
    """The C bf16 kernel goes before oneDNN only with its vdpbf16ps loop (3) and no AMX (whose
    tiles oneDNN uses); its AVX2 / NEON loops (1, 2) only where oneDNN cannot pack bf16; the
    portable loop (0) never."""

    class Kernel:
        @staticmethod
        def simd() -> int:
            return loop

    monkeypatch.setattr(linear_bf16_cpu, "KERNEL", Kernel)
    monkeypatch.setattr(cpu_linear, "supports", lambda dtype: onednn_packs)
    monkeypatch.setattr(cpu_linear, "has_amx", lambda: amx)
    assert cpu_linear.bf16_kernel_applies() is applies


def test_with_the_dot_loop_bf16_linears_take_the_c_kernel_though_onednn_packs():
    if linear_bf16_cpu.KERNEL.simd() != cpu_linear.BF16_DOT_LOOP or cpu_linear.has_amx():
        pytest.skip("the bf16 kernel has no AVX-512 BF16 loop on this CPU, or it has AMX")
    model, x = _bf16_model()
    ref = model(x)
    assert prepack_linears(model) == 2
    assert all(isinstance(m, Bf16Linear) for m in model)
    assert torch.allclose(model(x).float(), ref.float(), atol=0.05, rtol=2e-2)
