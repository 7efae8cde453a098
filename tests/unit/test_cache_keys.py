"""Cache keys, normalization, scope rules and the L1 LRU: pure, no Redis, no sleeps."""

from __future__ import annotations

import pytest

from pipeline import cache as c
from pipeline import schema
from pipeline.cache import keys


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def job(**kw) -> schema.Job:
    params = kw.pop("params", {"temperature": 0.0})
    return schema.Job(id="j1", params=schema.JobParams(**params), **kw)


# -- normalization --------------------------------------------------------------------------


def test_normalize_text_whitespace():
    assert c.normalize_text("  What is  2 +\t2?  \r\n") == "What is 2 + 2?"
    assert c.normalize_text("a\r\nb\rc") == "a\nb\nc"
    assert c.normalize_text("a\n\n\n\n\nb") == "a\n\nb"
    assert c.normalize_text("a \u00a0 b") == "a b"  # unicode spaces too


def test_normalize_text_keeps_indentation_and_nfc():
    code = "def f():\n    return  1"
    assert c.normalize_text(code) == "def f():\n    return 1"
    assert c.normalize_text("caf\u0065\u0301") == c.normalize_text("caf\u00e9")


def test_answer_key_ignores_whitespace_not_content():
    a = c.answer_key(job(prompt="What is 2 + 2?"), "m")
    assert a == c.answer_key(job(prompt="  What  is 2 + 2? \n"), "m")
    assert a != c.answer_key(job(prompt="What is 2 + 3?"), "m")
    assert a != c.answer_key(job(prompt="What is 2 + 2?"), "other-model")
    assert len(a) == 32 and int(a, 16) >= 0


def test_answer_key_messages():
    msgs = [schema.Message(role="user", content="What is  2 + 2?")]
    same = [schema.Message(role="user", content=" What is 2 + 2?\n")]
    system = [schema.Message(role="system", content="What is 2 + 2?")]
    k = c.answer_key(job(messages=msgs), "m")
    assert k == c.answer_key(job(messages=same), "m")
    assert k != c.answer_key(job(messages=system), "m")  # the role is part of the key
    assert k != c.answer_key(job(prompt="What is 2 + 2?"), "m")  # prompt and messages differ
    two = msgs + [schema.Message(role="assistant", content="4")]
    assert k != c.answer_key(job(messages=two), "m")
    thought = msgs + [schema.Message(role="assistant", content="4", reasoning_content="2+2=4")]
    assert c.answer_key(job(messages=thought), "m") != c.answer_key(job(messages=two), "m")


def test_answer_key_follows_the_template_kwargs_and_the_thinking_budget():
    base = c.answer_key(job(prompt="What is 2 + 2?"), "m")
    off = c.answer_key(
        job(prompt="What is 2 + 2?", chat_template_kwargs={"enable_thinking": False}), "m"
    )
    assert off != base
    both = {"enable_thinking": False, "reasoning_effort": "low"}
    flipped = dict(reversed(both.items()))
    assert c.answer_key(job(prompt="x", chat_template_kwargs=both), "m") == c.answer_key(
        job(prompt="x", chat_template_kwargs=flipped), "m"
    )
    capped = job(prompt="What is 2 + 2?", params={"temperature": 0.0, "max_thinking_tokens": 64})
    assert c.answer_key(capped, "m") != base  # reasoning_effort caps the thinking


def test_answer_key_premises_are_an_order_free_set():
    k = c.answer_key(job(prompt="p", premises=["x = 1", "y = 2"]), "m")
    assert k == c.answer_key(job(prompt="p", premises=["y  = 2", "x = 1", "x = 1"]), "m")
    assert k != c.answer_key(job(prompt="p", premises=["x = 1"]), "m")


def test_answer_key_does_not_depend_on_scope_or_id():
    a = c.answer_key(job(prompt="p", tenant="t1", user="u1"), "m")
    b = schema.Job(id="other", tenant="t2", prompt="p", params=schema.JobParams(temperature=0))
    assert a == c.answer_key(b, "m")  # the scope is hashed in at the Redis key, not here


# -- the reproducibility rule ---------------------------------------------------------------


def test_reproducible_only_when_greedy_or_seeded():
    assert c.is_reproducible(schema.JobParams(temperature=0.0))
    assert c.is_reproducible(schema.JobParams(temperature=0.7, seed=3))
    assert not c.is_reproducible(schema.JobParams(temperature=0.7))
    assert c.answer_key(job(prompt="p", params={"temperature": 0.7}), "m") is None
    assert c.step_key("m", "p", [], schema.JobParams(temperature=1.0)) is None


def test_greedy_key_ignores_sampling_knobs_and_seed():
    base = c.answer_key(job(prompt="p"), "m")
    other = {"temperature": 0.0, "top_p": 0.5, "top_k": 5, "min_p": 0.1, "seed": 9}
    assert c.answer_key(job(prompt="p", params=other), "m") == base


@pytest.mark.parametrize(
    "change",
    [
        {"max_tokens": 100},
        {"max_steps": 4},
        {"verify": "strict"},
        {"early_exit": True},
        {"temperature": 0.5, "seed": 1},
    ],
)
def test_answer_key_covers_deterministic_params(change):
    assert c.answer_key(job(prompt="p", params={"temperature": 0.0, **change}), "m") != (
        c.answer_key(job(prompt="p"), "m")
    )


def test_seeded_key_covers_seed_and_knobs_but_not_stream():
    p = {"temperature": 0.5, "seed": 1}
    k = c.answer_key(job(prompt="p", params=p), "m")
    assert k != c.answer_key(job(prompt="p", params={**p, "seed": 2}), "m")
    assert k != c.answer_key(job(prompt="p", params={**p, "top_k": 4}), "m")
    assert k == c.answer_key(job(prompt="p", params={**p, "stream": "none"}), "m")


def test_step_key_inputs():
    params = schema.JobParams(temperature=0.0)
    k = c.step_key("m", "p", ["x = 1"], params)
    assert k == c.step_key("m", " p ", ["x = 1"], params)
    assert k != c.step_key("m", "p", [], params)  # verdicts depend on premises
    assert k != c.step_key("m", [1, 2, 3], ["x = 1"], params)
    assert c.step_key("m", [1, 2, 3], [], params) == c.step_key("m", (1, 2, 3), [], params)


def test_step_key_covers_the_seed_of_a_sampled_job_like_answer_key():
    sampled = {"temperature": 0.7}
    k1 = c.step_key("m", "p", [], schema.JobParams(**sampled, seed=1))
    k2 = c.step_key("m", "p", [], schema.JobParams(**sampled, seed=2))
    assert k1 is not None and k2 is not None and k1 != k2  # no steps spliced across seeds
    assert k1 == c.step_key("m", "p", [], schema.JobParams(**sampled, seed=1))
    # The same rule as the answer level: its key differs across seeds too.
    a1 = c.answer_key(job(prompt="p", params={**sampled, "seed": 1}), "m")
    assert a1 != c.answer_key(job(prompt="p", params={**sampled, "seed": 2}), "m")


def test_step_key_of_a_greedy_job_ignores_the_seed_ingest_stamps():
    # Ingest gives every job a seed (its own id's when it has none): greedy jobs must still
    # share steps, since argmax ignores the seed.
    g1 = c.step_key("m", "p", [], schema.JobParams(temperature=0.0, seed=1))
    assert g1 == c.step_key("m", "p", [], schema.JobParams(temperature=0.0, seed=2))
    assert g1 == c.step_key("m", "p", [], schema.JobParams(temperature=0.0))


# -- Redis keys and scopes ------------------------------------------------------------------


def test_scope_ids_always_start_with_the_tenant():
    s = c.Scope("t", "a", "u")
    assert s.ids("tenant") == ("t",)
    assert s.ids("app") == ("t", "a")
    assert s.ids("user") == ("t", "a", "u")
    assert c.Scope.of(job(prompt="p", tenant="t", app="a", user="u")) == s


def test_redis_keys_are_bounded_versioned_and_tenant_specific():
    cache = c.Cache(redis=None, config=c.CacheConfig(key_prefix="pfx:"))  # type: ignore[arg-type]
    content = c.answer_key(job(prompt="x" * 50_000), "m")
    keys = {
        (tenant, name): cache.key("answer", name, c.Scope(tenant, "a", "u"), content)
        for tenant in ("t1", "t2")
        for name in c.SCOPES
    }
    assert len(set(keys.values())) == 6  # no scope of one tenant shares a key with another's
    for (_tenant, name), key in keys.items():
        assert key.startswith(f"pfx:cache:v{c.KEY_VERSION}:answer:{name}:")
        assert len(key) < 80
    # Same tenant, another user: the user key differs, the app and tenant keys are shared.
    other_user = c.Scope("t1", "a", "u2")
    assert cache.key("answer", "user", other_user, content) != keys["t1", "user"]
    assert cache.key("answer", "app", other_user, content) == keys["t1", "app"]
    assert cache.key("answer", "tenant", c.Scope("t1", "b", "v"), content) == keys["t1", "tenant"]


def test_key_version_is_hashed_in(monkeypatch):
    before = c.answer_key(job(prompt="p"), "m")
    monkeypatch.setattr(keys, "KEY_VERSION", c.KEY_VERSION + 1)  # where digest() reads it
    assert c.answer_key(job(prompt="p"), "m") != before


def test_config_invariants():
    assert c.CacheConfig().ttl_s("user") == 900
    assert c.CacheConfig().ttl_s("app") == 7200
    assert c.CacheConfig().ttl_s("tenant") == 86400
    with pytest.raises(ValueError):
        c.CacheConfig(user_ttl_s=0)
    with pytest.raises(ValueError):
        c.CacheConfig(l1_max_entries=-1)
    with pytest.raises(ValueError):
        c.CacheConfig(put_scopes=("world",))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        c.CacheConfig(put_scopes=())


def test_prefix_hashes_match_the_block_manager():
    from pipeline.engine.block_manager import NO_HASH, hash_block

    tokens = list(range(10))
    hashes = c.prefix_hashes(tokens, 4)
    assert len(hashes) == 2  # only full blocks
    assert hashes[0] == hash_block(NO_HASH, [0, 1, 2, 3])
    assert hashes[1] == hash_block(hashes[0], [4, 5, 6, 7])
    assert c.prefix_hashes(tokens[:8] + [99, 98], 4) == hashes  # a shared prefix, shared hashes


# -- L1 ---------------------------------------------------------------------------------------


def test_lru_bound_and_eviction_order():
    clock = FakeClock()
    lru = c.LRU(3, clock)
    for k in "abc":
        lru.put(k, k.encode(), clock.now + 10)
    assert lru.get("a") == b"a"  # a is now the most recently used: b goes first
    lru.put("d", b"d", clock.now + 10)
    assert len(lru) == 3 and "b" not in lru
    lru.put("c", b"c2", clock.now + 10)  # a re-put refreshes recency too
    lru.put("e", b"e", clock.now + 10)
    assert "a" not in lru and [k for k in "cde" if k in lru] == ["c", "d", "e"]
    assert lru.get("c") == b"c2"


def test_lru_expiry_on_a_fake_clock():
    clock = FakeClock()
    lru = c.LRU(10, clock)
    lru.put("k", b"v", clock.now + 5)
    clock.now += 4.999
    assert lru.get("k") == b"v"
    clock.now += 0.001
    assert lru.get("k") is None and "k" not in lru  # expired entries are dropped on read
    lru.put("gone", b"v", clock.now)  # already due: not stored
    assert "gone" not in lru


def test_lru_disabled():
    clock = FakeClock()
    lru = c.LRU(0, clock)
    lru.put("k", b"v", clock.now + 5)
    assert lru.get("k") is None and len(lru) == 0
