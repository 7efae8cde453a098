"""Step-wise control: rollback, export/import, prefix caching, preemption, pause/resume."""

import shutil

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.errors import InvalidRequestError
from tests.model_factory import add_char_tokenizer

SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=48, ignore_eos=True)


def make_engine(path, **kw):
    kw.setdefault("num_kv_blocks", 64)
    kw.setdefault("block_size", 8)
    return Engine(EngineConfig(model=str(path), dtype="float32", **kw))


def prompt(n, seed=3, vocab=320):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run_until(engine, request_id, num_output_tokens):
    seq = engine.seqs[request_id]
    while seq.num_output_tokens < num_output_tokens:
        engine.step()
    return seq


def finish(engine):
    while engine.has_unfinished():
        engine.step()


def reference(path, ids, params=SAMPLED):
    return make_engine(path).generate([ids], params)[0].token_ids


def test_rollback_then_redecode_with_same_seed_reproduces_the_run(llama_dir):
    ids = prompt(21)
    expected = reference(llama_dir, ids)
    engine = make_engine(llama_dir)
    seq = engine.add(Request("r", ids, SAMPLED))
    run_until(engine, "r", 30)
    engine.rollback("r", len(ids) + 11)  # mid-block: exercises the partial-block path
    assert seq.num_tokens == len(ids) + 11
    finish(engine)
    assert seq.output_token_ids == expected


def test_rollback_with_a_new_seed_resamples_only_the_tail(llama_dir):
    ids = prompt(21)
    expected = reference(llama_dir, ids)
    engine = make_engine(llama_dir)
    seq = engine.add(Request("r", ids, SAMPLED))
    run_until(engine, "r", 30)
    engine.rollback("r", len(ids) + 16, seed=99)
    finish(engine)
    out = seq.output_token_ids
    assert out[:16] == expected[:16]
    assert out[16:] != expected[16:]
    assert len(out) == SAMPLED.max_tokens


def test_rollback_into_a_block_shared_with_another_sequence_copies_on_write(llama_dir):
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    ids = prompt(20)
    engine = make_engine(llama_dir)
    b = engine.add(Request("b", ids, greedy))
    run_until(engine, "b", 20)
    c_ids = ids + b.output_token_ids[:16]
    c = engine.add(Request("c", c_ids, greedy))
    engine.step()
    assert c.num_cached_tokens == 32  # four full blocks of b's, shared
    shared = c.block_table[3]
    assert b.block_table[3] == shared
    engine.rollback("b", len(ids) + 6)  # into block 3: b must get its own copy
    assert b.block_table[3] != shared and c.block_table[3] == shared
    finish(engine)
    assert c.output_token_ids == reference(llama_dir, c_ids, greedy)
    assert b.output_token_ids == reference(llama_dir, ids, greedy)


def test_export_import_continues_exactly(llama_dir):
    ids = prompt(19)
    expected = reference(llama_dir, ids)
    src = make_engine(llama_dir)
    src.add(Request("r", ids, SAMPLED))
    run_until(src, "r", 1)  # prefill + first token, as a prefill worker does
    export = src.export_kv("r")
    assert export.kv.shape == (2, 2, 2, len(ids), 16)  # [layers, 2, kv_heads, tokens, head_dim]
    src.abort("r")
    dst = make_engine(llama_dir, block_size=16)  # a different block size on purpose
    seq = dst.import_kv(export, SAMPLED)
    finish(dst)
    assert seq.output_token_ids == expected
    assert dst.stats.num_prefill_tokens == 0  # nothing was recomputed


def test_export_mid_decode_then_import(llama_dir):
    ids = prompt(9)
    expected = reference(llama_dir, ids)
    src = make_engine(llama_dir)
    src.add(Request("r", ids, SAMPLED))
    run_until(src, "r", 20)
    dst = make_engine(llama_dir)
    seq = dst.import_kv(src.export_kv("r"), SAMPLED)
    finish(dst)
    assert seq.output_token_ids == expected


def test_prefix_cache_hit_gives_the_same_logits_as_a_miss(llama_dir):
    ids = prompt(40)
    longer = ids + prompt(7, seed=4)

    def last_logits(engine):
        engine.runner.keep_logits = True
        engine.add(Request("x", longer, SamplingParams(temperature=0, max_tokens=1)))
        logits = None
        while engine.has_unfinished():
            engine.step()
            logits = engine.runner.last_logits.get("x", logits)
        return logits, engine.seqs.get("x")

    warm = make_engine(llama_dir)
    warm.generate([ids], SamplingParams(temperature=0, max_tokens=1))
    hit, _ = last_logits(warm)
    assert warm.block_manager.num_prefix_hits == 40
    cold = make_engine(llama_dir, enable_prefix_caching=False)
    miss, _ = last_logits(cold)
    assert cold.block_manager.num_prefix_hits == 0
    assert torch.allclose(hit, miss, atol=1e-5)


def test_preemption_under_a_tiny_pool_still_completes_every_sequence_correctly(llama_dir):
    prompts = [prompt(n, seed=n) for n in (20, 13, 27, 9, 16, 22)]
    params = [
        SamplingParams(temperature=0.8, seed=10 + i, max_tokens=40, ignore_eos=True)
        for i in range(len(prompts))
    ]
    roomy = make_engine(llama_dir).generate(prompts, params)
    tight = make_engine(llama_dir, num_kv_blocks=12)  # 96 slots for ~6 x 60 tokens
    outs = tight.generate(prompts, params)
    assert tight.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == [o.token_ids for o in roomy]
    assert tight.block_manager.num_free_blocks == 12


def test_pause_and_resume_do_not_change_the_output(llama_dir):
    ids = prompt(12)
    expected = reference(llama_dir, ids)
    engine = make_engine(llama_dir)
    seq = engine.add(Request("r", ids, SAMPLED))
    other = engine.add(Request("o", prompt(10, seed=8), SAMPLED))
    run_until(engine, "r", 10)
    engine.pause("r")
    blocks = list(seq.block_table)
    for _ in range(5):
        engine.step()
    assert seq.num_output_tokens == 10 and seq.block_table == blocks
    assert other.num_output_tokens > 10
    engine.resume("r")
    finish(engine)
    assert seq.output_token_ids == expected


def test_abort_releases_blocks(llama_dir):
    engine = make_engine(llama_dir)
    engine.add(Request("r", prompt(30), SAMPLED))
    engine.step()
    assert engine.block_manager.num_free_blocks < 64
    engine.abort("r")
    assert engine.block_manager.num_free_blocks == 64 and not engine.has_unfinished()


def test_steps_end_at_the_delimiter_and_pause_on_step_end_holds_the_sequence(tmp_path, llama_dir):
    path = tmp_path / "llama-tok"
    shutil.copytree(llama_dir, path)
    add_char_tokenizer(path)
    greedy = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    engine = make_engine(path)
    ids = prompt(10, vocab=97)
    free_run = engine.generate([ids], greedy)[0]
    # Pick a character the model emits as the step delimiter, so steps actually happen.
    texts = [engine.tokenizer.token_texts()[t] for t in free_run.token_ids]
    delim = next(t for t in texts if len(t) == 1)
    engine = make_engine(path, step_delimiter=delim)
    expected_ends = [i + 1 for i, t in enumerate(texts) if delim in t]
    stepped = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, pause_on_step_end=True)
    seq = engine.add(Request("s", ids, stepped))
    pauses = 0
    while engine.has_unfinished():
        for out in engine.step():
            if out.paused:
                pauses += 1
                assert out.ends_step and engine.scheduler.paused["s"] is seq
                engine.resume("s")
    assert seq.output_token_ids == free_run.token_ids
    assert [e - seq.num_prompt_tokens for e in seq.step_ends] == expected_ends
    assert pauses == len([e for e in expected_ends if e < 64])


def test_step_detector_finds_delimiters_that_straddle_tokens():
    from pipeline.engine.tokenizer import StepBoundaryDetector

    det = StepBoundaryDetector(["a", "\n", "b\n", "\n\nc"], "\n\n")
    ends, tail = det.feed("", 1)
    assert not ends and tail == "\n"
    assert det.feed(tail, 1) == (True, "")
    assert det.feed("", 3) == (True, "")
    assert det.feed("", 0) == (False, "a")


def test_a_large_ragged_batch_decodes_like_each_sequence_alone(llama_dir):
    # 20 sequences: decode attention splits them into length-sorted groups.
    prompts = [prompt(n, seed=n) for n in range(3, 63, 3)]
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    batched = make_engine(llama_dir, num_kv_blocks=256).generate(prompts, greedy)
    for ids, out in zip(prompts, batched, strict=True):
        assert out.token_ids == reference(llama_dir, ids, greedy)


def test_a_held_finish_waits_for_the_caller_and_a_rollback_reopens_it(llama_dir):
    ids = prompt(13)
    held = SamplingParams(temperature=0.8, seed=5, max_tokens=20, ignore_eos=True)
    expected = reference(llama_dir, ids, held)
    held.pause_on_finish = True
    engine = make_engine(llama_dir)
    seq = engine.add(Request("h", ids, held))
    outs = []
    while engine.scheduler.has_schedulable:
        outs += engine.step()
    assert outs[-1].paused and not outs[-1].finished and outs[-1].finish_reason == "length"
    assert seq.pending_finish == "length" and engine.has_unfinished() and not seq.is_finished
    assert seq.output_token_ids == expected
    # A late rejection of the tail: roll back and decode it again with another seed.
    engine.rollback("h", len(ids) + 12, seed=77)
    assert seq.pending_finish is None
    engine.resume("h")
    while engine.scheduler.has_schedulable:
        engine.step()
    assert seq.output_token_ids[:12] == expected[:12] and seq.num_output_tokens == 20
    engine.finish("h")
    assert seq.is_finished and seq.finish_reason == "length" and not engine.has_unfinished()
    assert engine.block_manager.num_free_blocks == 64


def test_charged_rollbacks_count_toward_max_tokens(llama_dir):
    ids = prompt(9)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, charge_rollbacks=True)
    engine = make_engine(llama_dir)
    seq = engine.add(Request("c", ids, params))
    run_until(engine, "c", 10)
    engine.rollback("c", len(ids) + 4)  # 6 tokens discarded
    finish(engine)
    assert seq.num_discarded_tokens == 6 and seq.num_output_tokens == 14
    assert seq.finish_reason == "length"


def test_appended_tokens_are_computed_and_sampling_continues_after_them(llama_dir):
    ids, cue = prompt(11), prompt(5, seed=9)
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    # Reference: the prompt, 4 generated tokens and the cue, all as one prompt.
    engine = make_engine(llama_dir)
    first = engine.generate([ids], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    head = ids + first[0].token_ids
    expected = make_engine(llama_dir).generate([head + cue], greedy)[0].token_ids
    engine = make_engine(llama_dir)
    long_greedy = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    seq = engine.add(Request("a", ids, long_greedy))
    run_until(engine, "a", 4)
    engine.append_tokens("a", cue)
    assert seq.token_ids == head + cue
    run_until(engine, "a", 4 + len(cue) + 12)
    assert seq.token_ids[len(head) + len(cue) :] == expected
    with pytest.raises(InvalidRequestError):
        engine.append_tokens("a", [10**6])
