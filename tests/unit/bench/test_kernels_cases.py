"""bench/kernels.py: each case times its own Triton kernel (pure: fake kernel modules).

The first GPU run (2026-12-04, H200) found every case timing the last kernel bound: the
cases' lambdas read a loop-reassigned name when called. Nothing here needs a GPU."""

from types import SimpleNamespace

import torch

from tests.unit.bench.conftest import load_bench

kernels = load_bench("kernels")
Shapes, cases = kernels.Shapes, kernels.cases


def test_every_case_calls_its_own_kernel():
    called: list[str] = []

    def fake(name):
        return lambda *args: called.append(name)

    mods = {
        "paged_attention": SimpleNamespace(
            paged_decode_attention_triton=fake("paged_decode_attention")
        ),
        "kv_store": SimpleNamespace(store_kv_triton=fake("store_kv")),
        "logits_stats": SimpleNamespace(logits_stats_triton=fake("logits_stats")),
        "kv_transfer": SimpleNamespace(
            export_blocks_triton=fake("export_blocks"), import_blocks_triton=fake("import_blocks")
        ),
    }
    small = Shapes(batch=2, context=64, layers=1, vocab=128, store_tokens=8, export_tokens=32)
    built = cases(small, torch.float32, torch.device("cpu"), mods)
    for case in built:
        case.triton()
    assert called == [case.name for case in built]
    assert len(set(called)) == 5
