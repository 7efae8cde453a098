"""Triton KV export/import vs the torch references: exact copies between the engine's pool
[L, 2, KVH, blocks, bs, D] and the head-major handoff layout [L, 2, KVH, tokens, D], for token
counts at block boundaries, importing from a view of a whole-block buffer (as KVExport.kv is),
and a KVCache round trip through the dispatcher."""

import pytest
import torch

from pipeline.engine.kv_cache import KVCache
from pipeline.kernels import cpu_build, dispatch, kv_copy_cpu
from pipeline.kernels.kv_transfer import (
    block_runs,
    copy_blocks_between,
    export_blocks_torch,
    import_blocks_torch,
)
from tests.unit.kernels.kernel_helpers import DTYPES

BS = 4
SHAPE = (2, 2, 2, 9, BS, 8)  # layers, K|V, kv heads, blocks, block size, head dim


def pool(device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SHAPE, generator=g).to(dtype).to(device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_export_matches_reference(kernels, device, dtype):
    mod = kernels("kv_transfer")
    kv = pool(device, dtype)
    blocks = torch.tensor([7, 0, 3], device=device)
    out = torch.empty(2, 2, 2, 3 * BS, 8, dtype=dtype, device=device)
    ref = torch.empty_like(out)
    mod.export_blocks_triton(kv, blocks, out)
    export_blocks_torch(kv, blocks, ref)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("num_tokens", [1, BS - 1, BS, BS + 1, 3 * BS + 2])
def test_import_matches_reference(kernels, device, num_tokens):
    mod = kernels("kv_transfer")
    nb = -(-num_tokens // BS)
    src_pool = pool(device, torch.bfloat16, seed=1)
    whole = torch.empty(2, 2, 2, nb * BS, 8, dtype=torch.bfloat16, device=device)
    export_blocks_torch(src_pool, torch.arange(nb, device=device), whole)
    src = whole[:, :, :, :num_tokens]  # a view: not contiguous unless whole blocks
    blocks = torch.tensor([8, 2, 5, 1][:nb], device=device)
    kv, ref = pool(device, torch.bfloat16), pool(device, torch.bfloat16)
    mod.import_blocks_triton(kv, blocks, src)
    import_blocks_torch(ref, blocks, src)
    assert torch.equal(kv, ref)


def test_kv_cache_round_trip_through_the_dispatcher(kernels, device, monkeypatch):
    mod = kernels("kv_transfer")
    monkeypatch.setattr(dispatch, "triton_module", lambda name: mod)
    results = {}
    for choice in ("torch", "triton"):
        monkeypatch.setenv(dispatch.ENV, choice)
        src = KVCache(2, 9, BS, 2, 8, torch.float32, device)
        src.kv.copy_(pool(device, torch.float32))
        exported = src.export([4, 6, 1], 2 * BS + 3)
        dst = KVCache(2, 9, BS, 2, 8, torch.float32, device)
        dst.import_([0, 8, 3], exported)
        results[choice] = (exported.clone(), dst.kv.clone())
    assert torch.equal(results["torch"][0], results["triton"][0])
    assert torch.equal(results["torch"][1], results["triton"][1])
    assert torch.equal(results["triton"][1][:, :, :, 8], pool(device, torch.float32)[:, :, :, 6])


def test_wrapper_rejects_bad_arguments(kernels, device):
    mod = kernels("kv_transfer")
    kv = pool(device, torch.float32)
    out = torch.empty(2, 2, 2, 2 * BS, 8, device=device)
    blocks = torch.tensor([1, 2], device=device)
    with pytest.raises(dispatch.KernelArgumentError, match="need 1 blocks"):
        mod.import_blocks_triton(kv, blocks, out[:, :, :, :3])
    with pytest.raises(dispatch.KernelArgumentError, match="buffer dtype"):
        mod.export_blocks_triton(kv, blocks, out.half())
    with pytest.raises(dispatch.KernelArgumentError, match="handoff buffer must be"):
        mod.export_blocks_triton(kv, blocks, out.transpose(2, 3))
    with pytest.raises(dispatch.KernelArgumentError, match="must be contiguous"):
        mod.export_blocks_triton(kv.transpose(3, 4), blocks, out)


def test_block_runs_coalesce_only_blocks_that_step_together():
    assert block_runs([4, 5, 6, 9, 2], [0, 1, 2, 3, 7]) == [(4, 0, 3), (9, 3, 1), (2, 7, 1)]
    assert block_runs([], []) == []


@pytest.mark.parametrize("kernels_env", ["auto", "torch"])  # auto: the C copy (kv_copy_cpu)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_pool_to_pool_copy_matches_per_block_reference(kernels_env, dtype, monkeypatch):
    monkeypatch.setenv(dispatch.ENV, kernels_env)
    src = pool("cpu", dtype, seed=1)
    dst = torch.zeros(2, 2, 2, 12, BS, 8, dtype=dtype)  # a pool of another size
    src_blocks, dst_blocks = [3, 4, 5, 0, 8], [6, 7, 8, 1, 2]
    copy_blocks_between(dst, dst_blocks, src, src_blocks)
    ref = torch.zeros_like(dst)
    for s, d in zip(src_blocks, dst_blocks, strict=True):
        ref[:, :, :, d] = src[:, :, :, s]
    assert torch.equal(dst, ref)
    with pytest.raises(ValueError, match="pool shapes differ"):
        copy_blocks_between(torch.zeros(2, 2, 2, 12, BS, 4, dtype=dtype), [0], src, [0])


def test_c_pool_copy_is_used_on_cpu_and_checks_its_runs(monkeypatch):
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the torch copy serves")
    assert kv_copy_cpu.is_supported(pool("cpu", torch.float32), pool("cpu", torch.float32))
    calls = []
    real = kv_copy_cpu.copy_block_runs
    monkeypatch.setattr(kv_copy_cpu, "copy_block_runs", lambda *a: calls.append(a[2]) or real(*a))
    src, dst = pool("cpu", torch.float32, seed=2), torch.zeros(2, 2, 2, 12, BS, 8)
    copy_blocks_between(dst, [0, 1, 5], src, [2, 3, 7])
    assert calls == [[(2, 0, 2), (7, 5, 1)]]
    assert torch.equal(dst[:, :, :, [0, 1, 5]], src[:, :, :, [2, 3, 7]])
    with pytest.raises(dispatch.KernelArgumentError, match="outside a pool"):
        real(dst, src, [(0, 11, 2)])  # dst has 12 blocks: 11 + 2 is past its end
    assert not kv_copy_cpu.is_supported(dst, src.transpose(3, 4))
