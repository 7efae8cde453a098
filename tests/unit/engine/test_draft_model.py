"""Speculative decoding with a draft model (`draft_model`, draft.py): the target's outputs are
the tokens decoding without speculation gives, whatever the draft proposes; a draft that is the
target itself has its greedy proposals kept; its per-sequence caches follow rollbacks and go
when the sequence ends; a draft with another vocabulary is refused."""

from dataclasses import replace

import pytest

from pipeline.config import EngineConfig, SpeculativeConfig
from pipeline.engine import Engine, Request, SamplingParams
from pipeline.errors import ModelLoadError
from tests.model_factory import make_tiny_model

PATTERN = [11, 12, 13, 14, 15]
PROMPTS = [PATTERN * 4, [3, 4] * 9 + PATTERN, [40, 41, 42]]


def engines(target: str, draft: str, k: int = 4) -> tuple[Engine, Engine]:
    base = EngineConfig(model=target, dtype="float32", num_threads=1, num_kv_blocks=64,
                        block_size=8)  # fmt: skip
    spec = SpeculativeConfig(method="draft_model", model=draft, num_speculative_tokens=k)
    return Engine(base), Engine(replace(base, speculative=spec))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_outputs_are_the_target_s_whatever_the_draft(tiny_models, temperature):
    """A draft of other weights (qwen2 for a llama target, one vocabulary): mostly rejected,
    and what is kept is exactly what the target samples there, seed for seed."""
    off, on = engines(str(tiny_models["llama"]), str(tiny_models["qwen2"]))
    p = SamplingParams(temperature=temperature, seed=7, max_tokens=40, ignore_eos=True)
    want = [o.token_ids for o in off.generate(PROMPTS, p)]
    assert [o.token_ids for o in on.generate(PROMPTS, p)] == want
    assert on.stats.num_spec_proposed > 0
    assert on.proposer is not None and on.proposer.draft is not None
    assert on.proposer.draft.states == {}  # every sequence's cache went with it


def test_the_target_as_its_own_draft_has_its_greedy_proposals_kept(tiny_models):
    target = str(tiny_models["llama"])
    off, on = engines(target, target)
    p = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    want = [o.token_ids for o in off.generate(PROMPTS, p)]
    assert [o.token_ids for o in on.generate(PROMPTS, p)] == want
    st = on.stats
    # the same model, greedy: every proposal is the target's own next token (fp32 on both
    # sides, batched or not, may tie-break apart very rarely)
    assert st.num_spec_accepted >= 0.9 * st.num_spec_proposed > 0
    assert st.num_forwards < off.stats.num_forwards / 2


def test_a_rollback_cuts_the_draft_s_cache_back(tiny_models):
    target = str(tiny_models["llama"])
    off, on = engines(target, target)
    p = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    want = off.generate([PROMPTS[0]], p)[0].token_ids
    seq = on.add(Request("r", PROMPTS[0], p))
    while seq.num_output_tokens < 25:
        on.step()
    draft = on.proposer.draft
    assert len(draft.states["r"].tokens) > len(PROMPTS[0]) + 20
    at = len(PROMPTS[0]) + 9
    on.rollback("r", at)
    on.step()  # the next proposal starts from the sequence as it now stands
    kept = draft.states["r"].tokens
    assert kept[: seq.num_tokens - 1] == seq.token_ids[: seq.num_tokens - 1]
    assert draft.states["r"].cache.get_seq_length() == len(kept)
    while "r" in on.seqs:
        on.step()
    assert seq.output_token_ids == want
    # an aborted sequence's cache goes too
    on.add(Request("x", PROMPTS[1], p))
    on.step()
    on.step()
    assert "x" in draft.states
    on.abort("x")
    assert "x" not in draft.states


def test_a_draft_must_share_the_target_s_vocabulary(tiny_models, tmp_path):
    import transformers

    other = make_tiny_model("llama", tmp_path)
    cfg = transformers.AutoConfig.from_pretrained(other)
    cfg.vocab_size = 300  # another tokenizer
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(tmp_path / "small-vocab", safe_serialization=True)
    with pytest.raises(ModelLoadError, match="share the target's tokenizer"):
        engines(str(tiny_models["llama"]), str(tmp_path / "small-vocab"))
    with pytest.raises(ModelLoadError, match="draft model"):
        engines(str(tiny_models["llama"]), str(tmp_path / "no-such-model"))


def test_the_config_names_the_draft_as_vllm_does():
    cfg = SpeculativeConfig.from_json(
        '{"method": "draft_model", "model": "smollm2", "num_speculative_tokens": 3}'
    )
    assert cfg is not None and cfg.model == "smollm2" and cfg.num_speculative_tokens == 3
    assert SpeculativeConfig(method="draft_model", model="x").num_speculative_tokens == 4
    with pytest.raises(ValueError, match="draft_model needs `model`"):
        SpeculativeConfig.from_json('{"method": "draft_model"}')
    with pytest.raises(ValueError, match="method ngram takes none"):
        SpeculativeConfig.from_json('{"method": "ngram", "model": "smollm2"}')


def test_a_bundled_model_as_its_own_draft():
    """The tiny reasoner (its own 100-token vocabulary) drafting for itself: greedy proposals
    are the target's own tokens, kept, and the outputs are those without speculation."""
    from pipeline.models.resolve import resolve_model

    path = str(resolve_model("tiny-reasoner"))
    off, on = engines(path, "tiny-reasoner")
    prompts = ["Q: What is 12 + 30 - 5?\n", "Q: What is 7 * 8?\n"]
    p = SamplingParams(temperature=0.0, max_tokens=80)
    want = [o.token_ids for o in off.generate(prompts, p)]
    assert [o.token_ids for o in on.generate(prompts, p)] == want
    st = on.stats
    assert st.num_spec_accepted >= 0.9 * st.num_spec_proposed > 0
