"""What the two C linears (bf16 and fp32, pipeline/kernels/linear_cpu.py) share: strided and
empty inputs, one and two threads, a row alone against the same row in any batch, bad
arguments. Each kernel's own numbers and builds: test_linear_bf16_cpu.py, test_linear_f32_cpu.py.
"""

import pytest
import torch

from pipeline.kernels import cpu_build, linear_bf16_cpu, linear_f32_cpu
from pipeline.kernels.dispatch import KernelArgumentError
from tests.unit.kernels.kernel_helpers import assert_close, linear_case

KERNELS = {"bf16": (linear_bf16_cpu, torch.bfloat16), "f32": (linear_f32_cpu, torch.float32)}


@pytest.fixture(params=list(KERNELS))
def kernel(request):
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: linears stay on oneDNN / F.linear")
    module, dtype = KERNELS[request.param]
    assert cpu_build.load(module.LIBRARY) is not None
    return module, dtype


def test_strided_rows_and_no_rows(kernel):
    module, dtype = kernel
    x, w, _, ref = linear_case(dtype, 5, 33, 64, False)
    wide = torch.cat([x, torch.zeros_like(x)], dim=1)[:, :64]
    assert not wide.is_contiguous()
    packed = module.pack(w)
    assert_close(module.linear(wide, packed, None, 33), ref, dtype)
    assert module.linear(x[:0], packed, None, 33).shape == (0, 33)


def test_same_result_on_one_and_two_threads(kernel):
    # Large enough to run in parallel; each output is summed by one thread, so they are equal.
    module, dtype = kernel
    x, w, b, _ = linear_case(dtype, 32, 1000, 256, True)
    packed, before = module.pack(w), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = module.linear(x, packed, b, 1000)
        torch.set_num_threads(2)
        two = module.linear(x, packed, b, 1000)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_a_row_comes_out_the_same_alone_or_in_any_batch(kernel):
    # Each output is one fp32 chain over k in order, whatever micro-kernel its rows fall in and
    # whichever thread runs its panel: a sequence's logits do not depend on what else is in the
    # batch, so speculation's verifying pass (k + 1 rows) gives what one-row decoding gives.
    module, dtype = kernel
    x, w, b, _ = linear_case(dtype, 23, 1000, 200, True)
    packed = module.pack(w)
    batch = module.linear(x, packed, b, 1000)
    for i in range(23):
        assert torch.equal(module.linear(x[i : i + 1], packed, b, 1000)[0], batch[i])
    for lo, hi in ((3, 8), (0, 9), (5, 22)):
        assert torch.equal(module.linear(x[lo:hi], packed, b, 1000), batch[lo:hi])


def test_empty_rows_of_k_give_the_bias(kernel):
    module, dtype = kernel
    x, w, b, _ = linear_case(dtype, 3, 20, 0, True)
    assert torch.equal(module.linear(x, module.pack(w), b, 20), b.expand(3, 20))


def test_bad_arguments_raise(kernel):
    module, dtype = kernel
    other = torch.float64
    x, w, b, _ = linear_case(dtype, 3, 20, 16, True)
    packed = module.pack(w)
    with pytest.raises(KernelArgumentError, match=module.LIBRARY):
        module.linear(x.to(other), packed, b, 20)
    with pytest.raises(KernelArgumentError, match="packed weight"):
        module.linear(x, packed, b, 40)
    with pytest.raises(KernelArgumentError, match="bias"):
        module.linear(x, packed, b[:10], 20)
    with pytest.raises(KernelArgumentError, match="bias"):
        module.linear(x, packed, b.to(other), 20)
    with pytest.raises(KernelArgumentError, match="weight must be 2-D"):
        module.pack(w.to(other))
    with pytest.raises(KernelArgumentError, match=rf"x {dtype} \(16,\)"):
        module.linear(x[0], packed, b, 20)
    with pytest.raises(KernelArgumentError, match="bias"):  # every other value: not dense
        module.linear(x, packed, torch.stack([b, b], dim=1)[:, 0], 20)
