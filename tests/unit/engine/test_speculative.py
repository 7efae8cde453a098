"""Speculative decoding in the native engine (`ngram`, `suffix`): the proposers, the verifier,
and the engine's outputs, which must be the very tokens decoding without speculation gives
(greedy and sampled, seed for seed), with step-wise control exact: one token per sequence per
step, step ends and pauses where they fall, rollback and preemption as without it, and the
slots of rejected proposals returned to the pool."""

from dataclasses import replace

import pytest
import torch

from pipeline.config import EngineConfig, SpeculativeConfig
from pipeline.engine import Engine, Request, SamplingParams
from pipeline.engine.speculative import Acceptance, Proposer, num_accepted, propose_ngram
from pipeline.kernels import cpu_linear, linear_bf16_cpu
from pipeline.models.resolve import resolve_model

SPEC = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)
SUFFIX = SpeculativeConfig(method="suffix", num_speculative_tokens=6)
METHODS = {"ngram": SPEC, "suffix": SUFFIX}


# -- the proposer and the verifier (pure) -------------------------------------------------------


def test_ngram_proposes_what_followed_the_latest_earlier_occurrence():
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert propose_ngram(tokens, 3, 2, 3) == [7, 8, 5]  # the later "1 2 3" wins
    assert propose_ngram(tokens, 10, 2, 3) == [7, 8, 5, 1, 2, 3]  # up to the end
    assert propose_ngram([4, 5, 6, 4, 5], 2, 2, 4) == [6, 4]
    assert propose_ngram([4, 5, 6, 7], 2, 2, 4) == []  # no repeat
    assert propose_ngram([4, 4], 3, 1, 2) == [4]  # the suffix itself is never its own match
    assert propose_ngram([1, 2], 3, 2, 2) == []


def test_longer_ngrams_are_tried_first():
    # "5 6" last occurred before 0; "4 5 6" only before 9.
    tokens = [4, 5, 6, 9, 3, 5, 6, 0, 4, 5, 6]
    assert propose_ngram(tokens, 1, 2, 3) == [9]
    assert propose_ngram(tokens, 1, 2, 2) == [0]


def test_accepted_while_the_target_agrees():
    assert num_accepted([5, 6, 7], [5, 6, 7, 8]) == 3
    assert num_accepted([5, 6, 7], [5, 9, 7, 8]) == 1
    assert num_accepted([5, 6, 7], [4, 6, 7, 8]) == 0
    assert num_accepted([5, 6, 7], [5, 6]) == 1  # a chunk cut short checks fewer


def test_the_config_reads_vllm_json_and_refuses_nonsense():
    cfg = SpeculativeConfig.from_json('{"method": "ngram", "num_speculative_tokens": 3}')
    assert cfg == SpeculativeConfig(num_speculative_tokens=3)
    assert SpeculativeConfig.from_json("  ") is None
    # vLLM's defaults: k 4 for ngram, the tree depth for suffix
    assert SpeculativeConfig().num_speculative_tokens == 4
    got = SpeculativeConfig.from_json('{"method": "suffix", "suffix_decoding_max_tree_depth": 16}')
    assert got.num_speculative_tokens == 16
    assert SpeculativeConfig().size_by_cost  # ours, on unless turned off
    assert not SpeculativeConfig.from_json('{"size_by_cost": false}').size_by_cost
    for bad in (
        '{"method": "eagle"}', '{"num_speculative_tokens": 0}', '{"k": 1}', "{",
        '{"method": "suffix", "suffix_decoding_min_token_prob": 2}',
        '{"method": "suffix", "suffix_decoding_max_tree_depth": 1}',
        '{"size_by_cost": "no"}',
    ):  # fmt: skip
        with pytest.raises(ValueError):
            SpeculativeConfig.from_json(bad)


# -- the engine ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reasoner() -> str:
    return str(resolve_model("tiny-reasoner"))


PROMPTS = ["Q: What is 12 + 30 - 5?\n", "Q: Solve for x: 4x + 42 = 94.\n", "Q: What is 7 * 8?\n"]


def engines(path: str, spec: SpeculativeConfig = SPEC, **kw) -> tuple[Engine, Engine]:
    base = EngineConfig(model=path, dtype="float32", num_threads=1, **kw)
    return Engine(base), Engine(replace(base, speculative=spec))


@pytest.fixture(params=list(METHODS))
def spec(request) -> SpeculativeConfig:
    return METHODS[request.param]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_outputs_are_the_tokens_decoding_without_speculation_gives(reasoner, spec, temperature):
    off, on = engines(reasoner, spec)
    params = [SamplingParams(temperature=temperature, seed=i, max_tokens=160) for i in range(3)]
    want = [o.token_ids for o in off.generate(PROMPTS, params)]
    got = [o.token_ids for o in on.generate(PROMPTS, params)]
    assert got == want
    assert on.stats.num_spec_accepted > 0 and on.stats.num_forwards < off.stats.num_forwards


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_random_models_too(tiny_models, family, spec):
    """Random weights: proposals mostly fail; what is kept must still be exactly right."""
    off, on = engines(str(tiny_models[family]), spec, num_kv_blocks=64, block_size=8)
    pattern = [11, 12, 13, 14, 15]
    prompts = [pattern * 6, [3, 4] * 9 + pattern]
    for temperature in (0.0, 0.9):
        p = SamplingParams(temperature=temperature, seed=7, max_tokens=40, ignore_eos=True)
        want = [o.token_ids for o in off.generate(prompts, p)]
        assert [o.token_ids for o in on.generate(prompts, p)] == want
    assert on.stats.num_spec_proposed > 0


def test_bf16_on_the_c_linear_too(tiny_models, spec, monkeypatch):
    """bf16 where oneDNN cannot pack it (AVX2-only hosts) runs on the C bf16 linear, whose rows
    do not depend on the batch: speculation's verifying pass gives the very tokens there too."""
    if not linear_bf16_cpu.has_vector_path():
        pytest.skip("no vector path of the C bf16 linear on this CPU: bf16 stays on F.linear")
    monkeypatch.setattr(cpu_linear, "supports", lambda dtype: dtype != torch.bfloat16)
    base = EngineConfig(
        model=str(tiny_models["llama"]), dtype="bfloat16", num_threads=1, num_kv_blocks=64,
        block_size=8,
    )  # fmt: skip
    off, on = Engine(base), Engine(replace(base, speculative=spec))
    assert any(isinstance(m, cpu_linear.Bf16Linear) for m in on.runner.model.modules())
    prompts = [[11, 12, 13, 14, 15] * 6, [3, 4] * 9 + [11, 12, 13]]
    for temperature in (0.0, 0.9):
        p = SamplingParams(temperature=temperature, seed=7, max_tokens=40, ignore_eos=True)
        want = [o.token_ids for o in off.generate(prompts, p)]
        assert [o.token_ids for o in on.generate(prompts, p)] == want
    assert on.stats.num_spec_accepted > 0


def trace(engine: Engine, ids: list[int], params: SamplingParams) -> list[tuple]:
    """Every output of one sequence driven with pause_on_step_end (strict verification's
    pattern): (token, ends_step, paused), resuming after each pause; at most one a step."""
    seq = engine.add(Request("r", ids, params))
    events = []
    while "r" in engine.seqs:
        outs = engine.step()
        assert len(outs) <= 1
        for o in outs:
            events.append((o.token_id, o.ends_step, o.paused))
            if o.paused:
                engine.resume("r")
    return events + [tuple(seq.output_token_ids)]


def test_step_ends_pause_where_they_fall(reasoner, spec):
    off, on = engines(reasoner, spec)
    ids = off.tokenizer.encode(PROMPTS[1], add_special_tokens=False)
    params = SamplingParams(temperature=0.7, seed=3, max_tokens=160, pause_on_step_end=True)
    want = trace(off, ids, params)
    assert sum(e[2] for e in want[:-1]) > 2  # several steps, each a pause
    assert trace(on, ids, params) == want


def test_in_a_batch_verified_runs_go_out_before_the_next_forward_which_carries_everyone(
    reasoner, spec
):
    """A step hands out verified tokens or runs a forward, never both, and a forward carries
    every running sequence: none sits out while another drains its run, which would leave it
    one token a forward, as without speculation."""
    off, on = engines(reasoner, spec)
    params = [SamplingParams(temperature=0.0, seed=i, max_tokens=120) for i in range(3)]
    ids = [on.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
    seqs = [
        on.add(Request(f"r{i}", x, p)) for i, (x, p) in enumerate(zip(ids, params, strict=True))
    ]
    handing_steps = 0
    while on.seqs:
        holding = any(seq.spec_buffer for seq in on.scheduler.running)
        alive = len(on.seqs)  # none paused: each is waiting or running
        forwards = on.stats.num_forwards
        on.step()
        if holding:
            handing_steps += 1
            assert on.stats.num_forwards == forwards  # handed out, nothing computed
        elif on.stats.num_forwards > forwards:
            assert on.last_num_scheduled == alive  # everyone in the forward
    assert handing_steps > 0 and on.stats.num_spec_accepted > 0
    want = [o.token_ids for o in off.generate(ids, params)]
    assert [seq.output_token_ids for seq in seqs] == want
    assert on.stats.num_forwards < off.stats.num_forwards - on.stats.num_spec_accepted / 3


def test_rollback_mid_run_decodes_as_a_fresh_run_would(reasoner, spec):
    off, on = engines(reasoner, spec)
    ids = off.tokenizer.encode(PROMPTS[0], add_special_tokens=False)
    params = SamplingParams(temperature=0.7, seed=5, max_tokens=120, ignore_eos=True)
    want = off.generate([ids], params)[0].token_ids
    seq = on.add(Request("r", ids, params))
    while seq.num_output_tokens < 30:
        on.step()
    on.rollback("r", len(ids) + 17)  # tokens verified ahead are dropped with the rest
    while "r" in on.seqs:
        on.step()
    assert seq.output_token_ids == want


def test_preemption_under_a_small_pool_keeps_the_outputs(reasoner, spec):
    off, on = engines(reasoner, spec, num_kv_blocks=24, block_size=8)
    params = [SamplingParams(temperature=0.5, seed=i, max_tokens=80) for i in range(3)]
    want = [o.token_ids for o in off.generate(PROMPTS, params)]
    assert [o.token_ids for o in on.generate(PROMPTS, params)] == want


def test_a_budget_is_never_overrun(reasoner, spec):
    _, on = engines(reasoner, spec)
    for n in (1, 2, 3, 7):
        out = on.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        assert len(out[0].token_ids) == n


def test_a_sequence_whose_proposals_fail_stops_proposing_for_a_while():
    acc = Acceptance()
    assert acc.k(4, 100) == 4
    for i in range(Acceptance.MIN_PASSES):
        acc.update(0, 100 + i)
    assert acc.k(4, 108) == 0  # paused ...
    assert acc.k(4, 108 + Acceptance.PAUSE_TOKENS) == 4  # ... then tried afresh
    good = Acceptance()
    for i in range(10):
        good.update(3, 100 + i)
    assert good.k(4, 110) == 4
    good.update(0, 111)
    good.update(0, 112)
    assert 1 <= good.k(4, 112) < 4  # misses shorten the next proposal


def test_suffix_proposes_as_far_as_its_tree_says_yet_pauses_after_misses():
    acc = Proposer(SpeculativeConfig(method="suffix")).acceptance()
    ngram = Proposer(SpeculativeConfig(method="ngram")).acceptance()
    assert not acc.follow_mean and ngram.follow_mean
    for i in range(3):
        acc.update(1, 100 + i)
        ngram.update(1, 100 + i)
    assert acc.k(24, 103) == 24  # not cut to about the mean: the tree's estimate sizes it
    assert ngram.k(24, 103) == 2
    for i in range(Acceptance.MIN_PASSES * 2):
        acc.update(0, 104 + i)
    assert acc.k(24, 120) == 0  # passes that kept nothing pause it all the same


def test_rejected_proposals_slots_go_back_to_the_pool(tiny_models, spec):
    # Random weights reject most proposals; after every step each sequence holds no block past
    # the positions it keeps (its tokens and those verified ahead), and at the end the pool is
    # whole again.
    _, on = engines(str(tiny_models["llama"]), spec, num_kv_blocks=64, block_size=4)
    bm = on.block_manager
    free_at_start = bm.num_free_blocks
    pattern = [11, 12, 13, 14, 15, 16, 17]
    for i, prompt in enumerate([pattern * 5, [3, 4] * 9 + pattern]):
        # greedy on random weights falls into loops: proposals come, some are rejected
        p = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
        on.add(Request(f"r{i}", prompt, p))
    while on.seqs:
        on.step()
        for seq in on.scheduler.running:
            held = seq.num_tokens + len(seq.spec_buffer)
            assert len(seq.block_table) <= bm.num_blocks_for(held), seq.request_id
    st = on.stats
    assert st.num_spec_proposed > st.num_spec_accepted  # some were rejected
    assert bm.num_free_blocks == free_at_start


def test_no_proposals_while_the_batch_is_larger_than_disable_by_batch_size(reasoner):
    off, on = engines(reasoner, replace(SPEC, disable_by_batch_size=2))
    params = [SamplingParams(temperature=0.0, max_tokens=60 + 30 * i) for i in range(3)]
    want = [o.token_ids for o in off.generate(PROMPTS, params)]
    calls, propose = [], on._propose

    def watched():  # the batch each proposal round saw, and whether it proposed
        before = on.stats.num_spec_proposed
        propose()
        calls.append((len(on.scheduler.running), on.stats.num_spec_proposed > before))

    on._propose = watched
    assert [o.token_ids for o in on.generate(PROMPTS, params)] == want
    assert any(made for _, made in calls)  # the tail, two or fewer running, proposed
    assert all(running <= 2 for running, made in calls if made)
    assert any(running == 3 for running, _ in calls)  # the full batch was seen, not served
