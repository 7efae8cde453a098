"""`suffix` speculation's trees (pipeline/engine/suffix.py): what a job's own text and its
scope's earlier outputs propose, the knobs that cut a proposal (match length, probability),
rollback, the bounded store and its scopes, and through the engine: a later job of one tenant
served from an earlier one's output, another tenant not."""

from dataclasses import replace

from pipeline.config import EngineConfig, SpeculativeConfig
from pipeline.engine import Engine, SamplingParams
from pipeline.engine.suffix import RequestTree, SuffixStore, SuffixTree, propose_suffix
from pipeline.models.resolve import resolve_model

CFG = SpeculativeConfig(method="suffix", num_speculative_tokens=8, suffix_decoding_max_tree_depth=8)


def own(tokens: list[int], k: int = 8, cfg: SpeculativeConfig = CFG, shared=None) -> list[int]:
    tree = RequestTree(cfg.suffix_decoding_max_tree_depth)
    return propose_suffix(cfg, tokens, k, tree, shared)[0]


def test_the_jobs_own_text_continues_its_longest_match():
    # "1 2 3" came before, followed by "4 5 9": the match is 3 long, so up to 3 tokens.
    assert own([1, 2, 3, 4, 5, 9, 1, 2, 3]) == [4, 5, 9]
    assert own([1, 2, 3, 4, 5, 9, 1, 2, 3], k=2) == [4, 5]
    assert own([4, 5, 6, 7]) == []  # nothing repeats
    assert own([]) == [] and own([1, 2, 1], k=0) == []


def test_the_most_frequent_continuation_wins_and_rare_ones_are_cut():
    text = [7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1]  # after "7 1": "2" twice, "3" once
    assert own(text)[0] == 2
    tree = RequestTree(CFG.suffix_decoding_max_tree_depth)
    tokens, ratios = propose_suffix(CFG, text, 8, tree, None)
    assert tokens[:2] == [2, 7] and ratios[:2] == [0.5, 1.0]  # each token's own count ratio
    strict = replace(CFG, suffix_decoding_min_token_prob=0.9)
    assert own(text, cfg=strict) == []  # P("2" after "7 1") = 2/4: below 0.9


def test_spec_factor_bounds_the_proposal_by_the_match_length():
    text = [5, 6, 7, 8, 9, 10, 11, 0, 5]  # only "5" matches: one token
    assert own(text) == [6]
    assert own(text, cfg=replace(CFG, suffix_decoding_max_spec_factor=3.0)) == [6, 7, 8]


def test_a_request_tree_follows_appends_and_rollbacks():
    tree = RequestTree(8)
    cfg = CFG
    tokens = [1, 2, 3, 4, 1, 2]
    assert propose_suffix(cfg, tokens, 4, tree, None)[0] == [3, 4]
    tokens += [3, 4, 9, 9]
    assert tree.num_indexed == 6
    propose_suffix(cfg, tokens, 4, tree, None)
    assert tree.num_indexed == 10
    del tokens[7:]  # rolled back to [1 2 3 4 1 2 3]
    tree.rewind(tokens)
    tokens += [5]
    assert propose_suffix(cfg, tokens, 4, tree, None)[0] == []  # "3 5" / "5": never seen before
    tokens += [1, 2, 3]
    got = propose_suffix(cfg, tokens, 4, tree, None)[0]
    assert got and got[0] in (4, 5)  # both continuations of "1 2 3" are in the tree


def test_uncounting_removes_what_was_added():
    tree = SuffixTree(4)
    tree.add([1, 2, 3, 1, 2])
    tree.add([9, 9])
    tree.add([1, 2, 3, 1, 2], delta=-1)
    assert set(tree.root.children) == {9} and tree.root.children[9].count == 2


def test_the_store_keeps_each_scope_apart_and_its_latest_requests():
    store = SuffixStore(depth=8, max_requests=2)
    store.add("acme", "r1", [10, 11, 12, 13])
    assert own([0, 10, 11], shared=store.tree("acme")) == [12, 13]
    assert own([0, 10, 11], shared=store.tree("other")) == []  # another tenant sees nothing
    store.add("acme", "r2", [20, 21, 22])
    store.add("acme", "r3", [30, 31, 32])  # r1 is the oldest of three: evicted
    assert store.num_requests("acme") == 2
    assert own([0, 10, 11], shared=store.tree("acme")) == []
    assert own([0, 30, 31], shared=store.tree("acme")) == [32]
    store.add("acme", "r3", [40, 41, 42])  # the same id again replaces its output
    assert own([0, 30, 31], shared=store.tree("acme")) == []
    SuffixStore(8, 0).add("acme", "r", [1, 2])  # keeping none: nothing kept, no error


def test_the_store_is_bounded_in_tokens_over_all_scopes():
    store = SuffixStore(depth=4, max_requests=100, max_tokens=10)
    store.add("a", "r1", [1, 2, 3, 4])
    store.add("b", "r2", [5, 6, 7, 8])
    assert store.num_tokens == 8
    store.add("a", "r3", [9, 10, 11])  # 11 tokens: the oldest (a/r1) goes
    assert store.num_tokens == 7 and store.num_requests("a") == 1
    assert own([0, 1, 2], shared=store.tree("a")) == []
    assert own([0, 5, 6], shared=store.tree("b")) == [7, 8]
    store.add("c", "r4", list(range(100, 130)))  # longer than the bound: its tail is kept
    assert store.num_tokens == 10 and store.tree("a") is None and store.tree("b") is None
    assert own([0, 127, 128], shared=store.tree("c")) == [129]


def test_the_longer_match_of_the_two_trees_wins():
    store = SuffixStore(depth=8, max_requests=4)
    store.add("t", "r1", [1, 2, 3, 4, 50, 51])
    tokens = [9, 2, 3, 4, 60, 61, 3, 4]  # both trees match "3 4" (own: then 60; shared: 50)
    assert own(tokens, shared=store.tree("t"))[0] == 60  # equal lengths: the job's own tree
    tokens = [2, 3, 4, 60, 61, 1, 2, 3, 4]  # shared has "1 2 3 4" (then 50): longer
    assert own(tokens, shared=store.tree("t"))[0] == 50


def test_a_tenants_later_job_is_served_from_its_earlier_output():
    path = str(resolve_model("tiny-reasoner"))
    base = EngineConfig(model=path, dtype="float32", num_threads=1)
    spec = SpeculativeConfig(method="suffix", num_speculative_tokens=8)
    off, on = Engine(base), Engine(replace(base, speculative=spec))
    prompt = "Q: What is 12 + 30 - 5?\n"
    params = SamplingParams(temperature=0.0, max_tokens=120, spec_scope="acme")
    want = off.generate([prompt], params)[0].token_ids
    assert on.generate([prompt], params)[0].token_ids == want
    first = (on.stats.num_spec_proposed, on.stats.num_spec_accepted)
    assert on.generate([prompt], params)[0].token_ids == want  # the same job again, same tenant
    again = (on.stats.num_spec_proposed - first[0], on.stats.num_spec_accepted - first[1])
    other = replace(params, spec_scope="globex")
    before = on.stats.num_spec_accepted
    assert on.generate([prompt], other)[0].token_ids == want
    elsewhere = on.stats.num_spec_accepted - before
    # The repeat reads the earlier output: most of its tokens come accepted; another tenant's
    # job has only its own text to go on.
    assert again[1] > 0.6 * len(want) > elsewhere
    assert on.proposer.store.num_requests("acme") == 2
    assert on.proposer.store.num_requests("globex") == 1
