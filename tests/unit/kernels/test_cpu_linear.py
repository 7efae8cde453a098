import pytest
import torch
from torch import nn

from pipeline.kernels.cpu_linear import PackedLinear, is_available, prepack_linears

pytestmark = pytest.mark.skipif(not is_available(), reason="this torch build has no oneDNN ops")


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 32, 100])
def test_packed_linear_matches_f_linear(dtype, atol, bias, rows):
    torch.manual_seed(rows)
    lin = nn.Linear(96, 200, bias=bias).to(dtype)
    x = torch.randn(rows, 96, dtype=dtype)
    ref = lin(x)
    got = PackedLinear(lin, batch_hint=32)(x)
    assert got.dtype == dtype and got.shape == ref.shape
    assert torch.allclose(got.float(), ref.float(), atol=atol, rtol=1e-2)


def test_prepack_swaps_only_cpu_linears_and_keeps_3d_inputs_working():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 4)))
    x = torch.randn(2, 3, 8)
    ref = model(x)
    assert prepack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[2][0], PackedLinear)
    assert torch.allclose(model(x), ref, atol=1e-5)
