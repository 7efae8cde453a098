"""The C KV store (csrc/kv_store_cpu.c) against the torch reference: the same caches after a
store, for strided K/V as the engine passes them (views of the fused qkv projection), slots of
-1 skipped, every element type, past the threshold for going parallel; bad slots raise."""

import pytest
import torch

from pipeline.kernels import cpu_build, dispatch, kv_store, kv_store_cpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the engine keeps the torch reference")
    assert cpu_build.load(kv_store_cpu.LIBRARY) is not None


def case(t, kvh=3, heads=9, d=64, blocks=40, bs=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(2, kvh, blocks, bs, d, generator=g).to(dtype)
    # k and v as the engine has them: slices of one [T, (H + 2 KVH) D] projection
    qkv = torch.randn(t, (heads + 2 * kvh) * d, generator=g).to(dtype)
    _, k, v = qkv.split([heads * d, kvh * d, kvh * d], dim=-1)
    k, v = k.view(t, kvh, d), v.view(t, kvh, d)
    slots = torch.randperm(blocks * bs, generator=g)[:t]
    return cache[0], cache[1], k, v, slots


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t", [1, 7, 600])  # 600 rows: past the parallel threshold
def test_the_c_store_writes_what_the_reference_writes(dtype, t):
    kc, vc, k, v, slots = case(t, dtype=dtype)
    slots[::5] = -1  # padded rows: skipped
    ref_k, ref_v = kc.clone(), vc.clone()
    kv_store.store_kv_torch(ref_k, ref_v, k, v, slots)
    kv_store_cpu.store_kv_cpu(kc, vc, k, v, slots)
    assert torch.equal(kc, ref_k) and torch.equal(vc, ref_v)


def test_contiguous_rows_and_an_empty_batch():
    kc, vc, k, v, slots = case(5)
    k, v = k.contiguous(), v.contiguous()
    ref_k, ref_v = kc.clone(), vc.clone()
    kv_store.store_kv_torch(ref_k, ref_v, k, v, slots)
    kv_store_cpu.store_kv_cpu(kc, vc, k, v, slots)
    assert torch.equal(kc, ref_k) and torch.equal(vc, ref_v)
    before = kc.clone()
    kv_store_cpu.store_kv_cpu(kc, vc, k[:0], v[:0], slots[:0])
    assert torch.equal(kc, before)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda c: c.update(slots=torch.tensor([0, 640, 1])), "outside -1..639"),
        (lambda c: c.update(slots=torch.tensor([0, -2, 1])), "outside -1..639"),
        (lambda c: c.update(slots=torch.tensor([0, 1, 2], dtype=torch.int32)), "slots"),
        (lambda c: c.update(k=c["k"].to(torch.bfloat16)), "dtypes"),
        (lambda c: c.update(k=c["k"][:, :2]), "k "),
        (lambda c: c.update(kc=c["kc"].transpose(1, 2)), "caches"),
    ],
)
def test_bad_arguments_raise_and_write_nothing(change, match):
    kc, vc, k, v, _ = case(3)
    args = {"kc": kc, "vc": vc, "k": k, "v": v, "slots": torch.tensor([0, 1, 2])}
    change(args)
    before = kc.clone()
    with pytest.raises(dispatch.KernelArgumentError, match=match):
        kv_store_cpu.store_kv_cpu(args["kc"], args["vc"], args["k"], args["v"], args["slots"])
    assert torch.equal(kc, before)


def test_dispatch_takes_c_on_cpu_and_the_reference_when_forced(monkeypatch):
    calls = []
    real = kv_store_cpu.store_kv_cpu
    monkeypatch.setattr(kv_store_cpu, "store_kv_cpu", lambda *a: calls.append(1) or real(*a))
    kc, vc, k, v, slots = case(4)
    kv_store.store_kv(kc, vc, k, v, slots)
    assert calls == [1]
    monkeypatch.setenv(dispatch.ENV, "torch")
    kv_store.store_kv(kc, vc, k, v, slots)
    assert calls == [1]
