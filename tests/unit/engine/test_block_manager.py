"""Block accounting, prefix caching and rollback, without torch."""

from pipeline.engine import block_manager as bm_mod
from pipeline.engine.block_manager import BlockManager
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence


def seq(tokens, rid="r"):
    return Sequence(rid, list(tokens), SamplingParams(), seed=0, arrival=0)


def admit(bm, s):
    cached = bm.match_prefix(s)
    base = len(cached) * bm.block_size
    n = s.num_tokens - base
    assert bm.can_allocate(s, n, cached)
    bm.allocate(s, n, cached)
    prev = s.num_computed_tokens
    s.num_computed_tokens += n
    bm.cache_full_blocks(s, prev)
    return cached


def test_allocate_and_free_return_every_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(range(10))
    admit(bm, s)
    assert len(s.block_table) == 3 and bm.num_free_blocks == 5
    bm.free(s)
    assert bm.num_free_blocks == 8 and s.block_table == []


def test_prefix_hit_shares_full_blocks_and_counts_refs():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq(range(10), "a")
    admit(bm, a)
    b = seq(list(range(8)) + [99, 98, 97], "b")
    cached = admit(bm, b)
    assert cached == a.block_table[:2]
    assert b.num_cached_tokens == 8
    assert all(bm.blocks[i].ref_count == 2 for i in cached)
    bm.free(a)
    assert all(bm.blocks[i].ref_count == 1 for i in cached)


def test_last_token_is_never_served_from_cache():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq(range(8), "a")
    admit(bm, a)
    # Same 8 tokens: both blocks are cached, but only the first may be used.
    b = seq(range(8), "b")
    assert bm.match_prefix(b) == a.block_table[:1]


def test_freed_blocks_keep_their_hash_until_reused():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq(range(9), "a")
    admit(bm, a)
    bm.free(a)
    b = seq(range(9), "b")
    assert len(bm.match_prefix(b)) == 2
    admit(bm, b)
    assert bm.num_free_blocks == 1  # two shared from the free list + one new


def test_hash_collision_is_caught_by_token_comparison(monkeypatch):
    monkeypatch.setattr(bm_mod, "hash_block", lambda prev, tokens: 42)
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq([1, 2, 3, 4, 5], "a")
    admit(bm, a)
    b = seq([9, 9, 9, 9, 5], "b")
    assert bm.match_prefix(b) == []


def test_eviction_drops_the_stale_hash():
    bm = BlockManager(num_blocks=2, block_size=4)
    a = seq(range(5), "a")
    admit(bm, a)
    bm.free(a)
    c = seq([50, 51, 52, 53, 54, 55, 56, 57], "c")
    assert bm.match_prefix(c) == []
    admit(bm, c)  # reuses both blocks: a's cached block is evicted
    assert bm.match_prefix(seq(range(5), "d")) == []


def test_truncate_private_partial_block_unhashes_it():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(range(12))
    admit(bm, s)
    full = s.block_table[1]
    bm.truncate(s, 7)  # keep tokens 0..6; token 6 is re-fed, so KV for 0..5 stays
    assert s.num_tokens == 7 and s.num_computed_tokens == 6
    assert len(s.block_table) == 2 and s.block_table[1] == full
    assert bm.blocks[full].hash == bm_mod.NO_HASH
    assert bm.num_free_blocks == 6


def test_truncate_into_shared_block_copies_on_write():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq(range(10), "a")
    admit(bm, a)
    b = seq(list(range(8)) + [70, 71], "b")
    admit(bm, b)
    shared = b.block_table[1]
    bm.truncate(b, 7)
    assert b.block_table[1] != shared
    assert bm.take_pending_copies() == [(shared, b.block_table[1])]
    assert bm.blocks[shared].ref_count == 1  # still a's, intact
    assert bm.match_prefix(seq(range(9), "c")) == a.block_table[:2]


def test_truncate_keeps_step_ends_before_the_cut():
    s = seq(range(4))
    s.token_ids += [5, 6, 7, 8, 9]
    s.step_ends = [6, 8]
    s.num_computed_tokens = 8
    s.truncate(7)
    assert s.step_ends == [6] and s.step_start == 6


def test_pinned_blocks_outlive_their_sequence_until_unpinned():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(range(10))
    admit(bm, s)
    table = list(s.block_table)
    bm.pin(table)
    bm.free(s)  # the sequence ends; a reader still holds its blocks
    assert bm.num_free_blocks == 5 and all(bm.blocks[b].ref_count == 1 for b in table)
    other = seq(range(100, 124), "o")
    assert not bm.can_allocate(other, 24, [])  # 6 blocks needed, 5 free: pinned ones stay out
    bm.unpin(table)
    assert bm.num_free_blocks == 8


def test_generation_changes_when_a_block_gets_new_content_only():
    gens = [0] * 4  # any mutable sequence: shared memory in the pipeline
    bm = BlockManager(num_blocks=4, block_size=4, generations=gens)
    a = seq(range(8), "a")
    admit(bm, a)
    table = list(a.block_table)
    first = [gens[b] for b in table]
    assert first == [1, 1]
    bm.free(a)
    b = seq(list(range(8)) + [50], "b")  # a prefix hit takes the same blocks, same content
    admit(bm, b)
    assert [gens[x] for x in b.block_table[:2]] == first
    bm.free(b)
    c = seq(range(200, 216), "c")  # fills the pool: every block gets new content
    admit(bm, c)
    assert [gens[b] for b in table] == [2, 2]
