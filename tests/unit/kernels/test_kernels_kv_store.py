"""Triton KV store vs the torch reference: exact copies, slots across block boundaries,
-1 rows skipped (and the reference skips them too)."""

import pytest
import torch

from pipeline.kernels import dispatch
from pipeline.kernels.kv_store import store_kv_torch
from tests.unit.kernels.kernel_helpers import DTYPES

BS = 4


def make_case(device, dtype, slots, kv_heads=2, head_dim=8, num_blocks=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (kv_heads, num_blocks, BS, head_dim)
    k_cache, v_cache = (torch.randn(shape, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(len(slots), kv_heads, head_dim, generator=g).to(dtype) for _ in range(2))
    t = [x.to(device) for x in (k_cache, v_cache, k, v)]
    return (*t, torch.tensor(slots, device=device))


# Block boundaries: last slot of block 0, first of block 1, the last slot of the pool.
SLOTS = [0, BS - 1, BS, BS + 1, -1, 4 * BS + 2, 6 * BS - 1, -1]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference_and_skips_minus_one(kernels, device, dtype):
    mod = kernels("kv_store")
    kc, vc, k, v, slots = make_case(device, dtype, SLOTS)
    kc_ref, vc_ref = kc.clone().cpu(), vc.clone().cpu()
    before = kc.clone()
    mod.store_kv_triton(kc, vc, k, v, slots)
    store_kv_torch(kc_ref, vc_ref, k.cpu(), v.cpu(), slots.cpu())
    assert torch.equal(kc.cpu(), kc_ref) and torch.equal(vc.cpu(), vc_ref)
    written = torch.zeros(kc.shape[1] * BS, dtype=torch.bool)
    written[[s for s in SLOTS if s >= 0]] = True
    untouched = kc.view(2, -1, 8)[:, ~written.to(device)]
    assert torch.equal(untouched, before.view(2, -1, 8)[:, ~written.to(device)])


def test_a_layer_view_of_the_pool_and_an_all_padded_batch(kernels, device):
    """The engine passes kv[layer, 0] views of [L, 2, KVH, blocks, bs, D]."""
    mod = kernels("kv_store")
    pool = torch.zeros(3, 2, 2, 5, BS, 8, device=device)
    k, v = torch.randn(3, 2, 8, device=device), torch.randn(3, 2, 8, device=device)
    ref = pool.clone()
    slots = torch.tensor([7, 0, 19], device=device)
    mod.store_kv_triton(pool[1, 0], pool[1, 1], k, v, slots)
    store_kv_torch(ref[1, 0], ref[1, 1], k, v, slots)
    assert torch.equal(pool, ref)
    mod.store_kv_triton(pool[2, 0], pool[2, 1], k, v, torch.full((3,), -1, device=device))
    assert torch.equal(pool, ref)


def test_wrapper_rejects_bad_arguments(kernels, device):
    mod = kernels("kv_store")
    kc, vc, k, v, slots = make_case(device, torch.float32, [1, 2])
    with pytest.raises(dispatch.KernelArgumentError, match="k must be"):
        mod.store_kv_triton(kc, vc, k[:, :1], v, slots)
    with pytest.raises(dispatch.KernelArgumentError, match="slots has dtype"):
        mod.store_kv_triton(kc, vc, k, v, slots.float())
    with pytest.raises(dispatch.KernelArgumentError, match="dtypes differ"):
        mod.store_kv_triton(kc, vc, k.half(), v.half(), slots)
    with pytest.raises(dispatch.KernelArgumentError, match="dense slots"):
        mod.store_kv_triton(kc[:, :, :2], vc[:, :, :2], k, v, slots)
