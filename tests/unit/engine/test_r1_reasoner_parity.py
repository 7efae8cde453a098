"""The bundled R1-style reasoner (SmolLM2 + the repo's LoRA adapter, merged by
`stepwise models prepare r1-reasoner`; scripts/setup.sh does it): the engine's greedy output is
HF transformers' on 16 held-out prompts, chat template and all, each in the qwen3 format (32
when the model was released; the suite checks half of them for time). HF decodes the 16 as one
left-padded batch (tests/model_factory.hf_greedy_batch: 27 s here against 74 s one at a time,
the same tokens on these prompts)."""

import pytest
import torch
import transformers

from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.evals.runner import prompts_for
from pipeline.evals.tasks import load_problems
from pipeline.models.paths import is_current, is_prepared, r1_dir
from tests.model_factory import hf_greedy_batch

PATH = r1_dir()
MAX_TOKENS = 48  # the opening of the thinking: where template, markers and prose all show
NUM_PROMPTS = 16
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (is_prepared(PATH) and is_current(PATH)),
        reason="r1-reasoner not prepared: run `stepwise models prepare r1-reasoner`",
    ),
]


@pytest.fixture(scope="module")
def engine():
    return Engine(EngineConfig(model=str(PATH), dtype="float32", kv_cache_memory_gb=0.25))


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    problems = load_problems("broad", NUM_PROMPTS, 7)  # held out (seeds < TRAIN_SEED_BASE)
    assert len(problems) == NUM_PROMPTS
    chats = prompts_for(problems, engine.tokenizer, engine.reasoning_format)
    assert all(isinstance(c, list) for c in chats)  # through the chat template
    return [engine.encode_prompt(c) for c in chats]


def test_named_qwen3_and_greedy_equal_to_hf_on_held_out_prompts(engine, prompts):
    assert engine.reasoning_format.name == "qwen3"
    hf = transformers.AutoModelForCausalLM.from_pretrained(PATH, dtype=torch.float32).eval()
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = engine.generate(prompts, params)
    with torch.no_grad():
        refs = hf_greedy_batch(hf, prompts, MAX_TOKENS)
    for out, ref in zip(outs, refs, strict=True):
        assert out.token_ids == ref, engine.tokenizer.decode(out.token_ids)
    # Real reasoning, not noise: the model opens its thinking block as trained.
    assert (
        sum(engine.tokenizer.decode(o.token_ids).lstrip().startswith("<think>") for o in outs)
        >= NUM_PROMPTS - 1
    )
