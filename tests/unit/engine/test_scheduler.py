"""Continuous batching decisions, without a model."""

from pipeline.engine.block_manager import BlockManager
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.scheduler import Scheduler
from pipeline.engine.sequence import Sequence, SequenceStatus


def make(num_blocks=16, block_size=4, max_seqs=8, budget=32):
    bm = BlockManager(num_blocks, block_size)
    return bm, Scheduler(bm, max_seqs, budget)


def seq(n, rid):
    # Distinct tokens per request, so prefix caching does not share blocks between them.
    base = 1000 * (1 + sum(map(ord, rid)))
    return Sequence(rid, list(range(base, base + n)), SamplingParams(), seed=0, arrival=0)


def run_step(sched, sample_token=7):
    """What the engine does after a forward: advance computed counts, append sampled tokens."""
    out = sched.schedule()
    for s in out.scheduled:
        samples = s.samples
        prev = s.seq.num_computed_tokens
        s.seq.num_computed_tokens += s.num_new_tokens
        sched.block_manager.cache_full_blocks(s.seq, prev)
        if samples:
            s.seq.token_ids.append(sample_token)
    return out


def test_chunked_prefill_respects_the_token_budget():
    _, sched = make(budget=16)
    a, b = seq(20, "a"), seq(10, "b")
    sched.add(a)
    sched.add(b)
    out = run_step(sched)
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 16)]
    out = run_step(sched)
    # a finishes its prompt (4 tokens) and samples; b gets the rest of the budget.
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 4), ("b", 10)]
    assert a.num_tokens == 21 and b.num_tokens == 11
    out = run_step(sched)
    assert [s.num_new_tokens for s in out.scheduled] == [1, 1]


def test_max_num_seqs_caps_the_batch():
    _, sched = make(max_seqs=2, budget=100)
    for i in range(3):
        sched.add(seq(4, f"s{i}"))
    out = run_step(sched)
    assert len(out.scheduled) == 2 and len(sched.waiting) == 1


def test_preemption_frees_the_youngest_and_requeues_it_first():
    bm, sched = make(num_blocks=4, block_size=4, budget=64)
    a, b = seq(7, "a"), seq(7, "b")
    sched.add(a)
    sched.add(b)
    run_step(sched)  # both prefilled: 2 blocks each, pool full; each now has 8 tokens
    out = run_step(sched)  # both decode token 8 inside their second block: fits
    assert not out.preempted
    out = run_step(sched)  # token 9 needs a third block: b is preempted
    assert [s.request_id for s in out.preempted] == ["b"]
    assert b.status is SequenceStatus.WAITING and sched.waiting[0] is b
    assert b.block_table == [] and b.num_computed_tokens == 0
    assert sched.num_preemptions == 1


def test_a_lone_sequence_that_cannot_grow_preempts_itself():
    bm, sched = make(num_blocks=2, block_size=4, budget=64)
    a = seq(7, "a")
    sched.add(a)
    run_step(sched)
    run_step(sched)
    out = run_step(sched)
    assert out.preempted == [a] and out.scheduled == []


def test_pause_keeps_blocks_and_resume_skips_the_queue():
    bm, sched = make(budget=64)
    a, b = seq(6, "a"), seq(6, "b")
    sched.add(a)
    run_step(sched)
    blocks = list(a.block_table)
    sched.pause(a)
    assert a.status is SequenceStatus.PAUSED and a.block_table == blocks
    sched.add(b)
    out = run_step(sched)
    assert [s.seq.request_id for s in out.scheduled] == ["b"]
    sched.resume(a)
    assert sched.waiting[0] is a
    out = run_step(sched)
    ids = {s.seq.request_id: s.num_new_tokens for s in out.scheduled}
    assert ids == {"b": 1, "a": 1}  # a re-enters with its KV: one token, not a re-prefill
    assert a.block_table[: len(blocks)] == blocks


def test_finish_releases_blocks():
    bm, sched = make()
    a = seq(9, "a")
    sched.add(a)
    run_step(sched)
    sched.finish(a, "stop")
    assert bm.num_free_blocks == bm.num_blocks and a.finish_reason == "stop"
    assert not sched.has_schedulable


def test_a_more_urgent_request_is_admitted_before_waiting_ones():
    _, sched = make(max_seqs=1, budget=64)
    first, later, urgent, urgent2 = seq(4, "a"), seq(4, "b"), seq(4, "p"), seq(4, "q")
    urgent.priority = urgent2.priority = -1
    for s in (first, later, urgent, urgent2):
        sched.add(s)
    # Lower priority values first; arrival order among equals.
    assert [s.request_id for s in sched.waiting] == ["p", "q", "a", "b"]
    out = run_step(sched)
    assert [s.seq.request_id for s in out.scheduled] == ["p"]
