"""Parity with HF transformers on a real checkpoint: SmolLM2-135M-Instruct (fp32).

Needs the prepared checkpoint (`stepwise models prepare smollm2`; scripts/setup.sh does it).
Tolerance: last-token logits within 2e-3 absolute (logits here span about +-30).
"""

import pytest
import torch
import transformers

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.models.paths import is_prepared, smollm2_dir
from tests.model_factory import hf_greedy_batch

PATH = smollm2_dir()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not is_prepared(PATH), reason="SmolLM2 not prepared: run `stepwise models prepare smollm2`"
    ),
]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Question: If a train travels 60 miles in 1.5 hours, what is its average speed?\nAnswer:",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "1, 1, 2, 3, 5, 8, 13,",
]


@pytest.fixture(scope="module")
def engine():
    return Engine(EngineConfig(model=str(PATH), dtype="float32", kv_cache_memory_gb=0.25))


@pytest.fixture(scope="module")
def hf():
    return transformers.AutoModelForCausalLM.from_pretrained(PATH, dtype=torch.float32).eval()


def test_last_token_logits_match_for_a_ragged_batch(engine, hf):
    engine.runner.keep_logits = True
    batch = [engine.encode_prompt(p) for p in PROMPTS]
    for i, ids in enumerate(batch):
        engine.add(Request(f"l{i}", ids, SamplingParams(temperature=0, max_tokens=1)))
    got = {}
    while engine.has_unfinished():
        engine.step()
        got.update(engine.runner.last_logits)
    with torch.no_grad():
        for i, ids in enumerate(batch):
            ref = hf(torch.tensor([ids])).logits[0, -1]
            assert torch.allclose(got[f"l{i}"], ref, atol=2e-3), (got[f"l{i}"] - ref).abs().max()


def test_greedy_64_token_continuations_are_identical(engine, hf):
    batch = [engine.encode_prompt(p) for p in PROMPTS]
    outs = engine.generate(batch, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
    with torch.no_grad():
        refs = hf_greedy_batch(hf, batch, 64)
    for out, ref in zip(outs, refs, strict=True):
        assert out.token_ids == ref, engine.tokenizer.decode(out.token_ids)
