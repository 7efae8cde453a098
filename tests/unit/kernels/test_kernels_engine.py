"""The engine with every Triton kernel wired in (STEPWISE_KERNELS=triton, interpreted on CPU)
generates what it generates on the torch references: decode attention, the KV store, the
sampler's statistics, and a KV export/import between two engines."""

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.kernels import dispatch

PROMPTS = [[5 + (3 * i + j) % 300 for j in range(n)] for i, n in enumerate((1, 15, 16, 17))]


def engines(path, device, n=2):
    kw = dict(model=str(path), dtype="float32", device=device.type, block_size=16)
    return [Engine(EngineConfig(**kw)) for _ in range(n)]


def run(path, device):
    a, b = engines(path, device)
    a.runner.keep_logits = True
    greedy = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    tokens = [list(o.token_ids) for o in a.generate(PROMPTS, greedy)]
    logits = dict(a.runner.last_logits)
    # Hand a sequence over after its first token: export from a, import into b, go on there.
    seq = a.add(Request("h", PROMPTS[3], greedy))
    while seq.num_output_tokens < 1:
        a.step()
    handed = b.import_kv(a.export_kv("h"), greedy)
    while b.has_unfinished():
        b.step()
    return tokens, logits, list(handed.token_ids)


@pytest.mark.parametrize("family", ["llama"])
def test_engine_tokens_match_with_triton_kernels(tiny_models, kernels, device, family, monkeypatch):
    used = set()
    monkeypatch.setattr(dispatch, "triton_module", lambda name: used.add(name) or kernels(name))
    monkeypatch.setenv(dispatch.ENV, "torch")
    ref_tokens, ref_logits, ref_handed = run(tiny_models[family], device)
    monkeypatch.setenv(dispatch.ENV, "triton")
    tokens, logits, handed = run(tiny_models[family], device)
    assert used == {"paged_attention", "kv_store", "logits_stats", "kv_transfer"}
    assert tokens == ref_tokens and handed == ref_handed
    for rid, row in ref_logits.items():
        torch.testing.assert_close(logits[rid].cpu(), row.cpu(), atol=1e-4, rtol=1e-4)
