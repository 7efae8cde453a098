"""The cache on a real Redis: hits and misses per level and layer, TTLs, L1 never outliving
Redis, tenant isolation at every scope, contradicted steps never stored, prefix routing."""

from __future__ import annotations

import asyncio
import time

import pytest

from pipeline import schema
from pipeline.cache import SCOPES, Cache, CacheConfig, Scope, answer_key, step_key

GREEDY = schema.JobParams(temperature=0.0)
ALICE = Scope("acme", "chat", "alice")


@pytest.fixture
def config(redis_prefix: str) -> CacheConfig:
    return CacheConfig(key_prefix=redis_prefix)


@pytest.fixture
def short(redis_prefix: str) -> CacheConfig:
    """Short TTLs, so expiry is seen in about a second."""
    return CacheConfig(
        user_ttl_s=1.0, app_ttl_s=2.0, tenant_ttl_s=3.0, prefix_ttl_s=1.5, alive_ttl_s=0.5,
        key_prefix=redis_prefix,
    )  # fmt: skip


def result(status: str = "ok", stop: str = "answer", answer: str = "4") -> schema.Result:
    return schema.Result(
        id="j1", status=status, answer=answer, budget=schema.BudgetReport(stop_reason=stop),
        ts_ms=1,
    )  # fmt: skip


def key_for(prompt: str = "What is 2 + 2?") -> str:
    k = answer_key(schema.Job(id="j1", prompt=prompt, params=GREEDY), "tiny")
    assert k is not None
    return k


async def num_keys(redis, prefix: str) -> int:
    return len([k async for k in redis.scan_iter(match=prefix + "*")])


# -- answer level -----------------------------------------------------------------------------


async def test_answer_miss_put_then_hits_in_each_layer(aredis_client, config):
    cache = Cache(aredis_client, config)
    key = key_for()
    assert await cache.get_answer(ALICE, key) is None
    assert (cache.stats.answer_l1_misses, cache.stats.answer_l2_misses) == (1, 1)

    assert await cache.put_answer(ALICE, key, result())
    got = await cache.get_answer(ALICE, key)
    assert schema.decode(got, schema.Result).answer == "4"
    assert cache.stats.answer_l1_hits == 1 and cache.stats.answer_l2_hits == 0  # put fills L1

    other = Cache(aredis_client, config)  # another process: empty L1, same Redis
    assert await other.get_answer(ALICE, key) == got
    assert (other.stats.answer_l1_misses, other.stats.answer_l2_hits) == (1, 1)
    assert await other.get_answer(ALICE, key) == got  # the Redis hit filled L1
    assert other.stats.answer_l1_hits == 1 and other.stats.answer_l2_hits == 1
    assert await other.get_answer(ALICE, key_for("What is 2 + 3?")) is None
    assert other.stats.answer_l2_misses == 1


async def test_only_complete_answers_are_stored(aredis_client, config, redis_prefix):
    cache = Cache(aredis_client, config)
    key = key_for()
    for bad in (result(status="error"), result(stop="budget"), result(stop="unverified")):
        assert await cache.put_answer(ALICE, key, bad, scopes=SCOPES) is False
    assert cache.stats.answer_refused == 3
    assert await num_keys(aredis_client, redis_prefix) == 0
    assert await cache.put_answer(ALICE, key, result(stop="early_exit"))


async def test_default_put_scope_and_narrowest_first(aredis_client, config):
    cache = Cache(aredis_client, config)
    key = key_for()
    bob, other_app = Scope("acme", "chat", "bob"), Scope("acme", "search", "carol")
    await cache.put_answer(ALICE, key, result(answer="tenant-wide"))  # default: tenant scope
    await cache.put_answer(ALICE, key, result(answer="alice's"), scopes=("user",))
    for c in (cache, Cache(aredis_client, config)):  # with and without L1
        assert schema.decode(await c.get_answer(ALICE, key), schema.Result).answer == "alice's"
        for scope in (bob, other_app):
            got = schema.decode(await c.get_answer(scope, key), schema.Result)
            assert got.answer == "tenant-wide"


async def test_user_and_app_scopes_stay_inside(aredis_client, config):
    cache = Cache(aredis_client, config)
    key = key_for()
    await cache.put_answer(ALICE, key, result(), scopes=("user",))
    await cache.put_answer(Scope("acme", "search", "x"), key, result(), scopes=("app",))
    assert await cache.get_answer(Scope("acme", "chat", "bob"), key) is None  # alice's only
    assert await cache.get_answer(Scope("acme", "search", "y"), key) is not None  # same app


# -- tenants ----------------------------------------------------------------------------------


async def test_a_tenant_never_receives_another_tenants_entry(aredis_client, config):
    writer = Cache(aredis_client, config)
    key = key_for()
    await writer.put_answer(ALICE, key, result(), scopes=SCOPES)
    job_key = step_key("tiny", "What is 2 + 2?", [], GREEDY)
    await writer.put_step(ALICE, job_key, [], "2 + 2 = 4", "entailed", scopes=SCOPES)
    await writer.publish_prefix("acme", "tiny", [11, 12], "w1")
    await writer.mark_alive("w1")

    # Same prompt, model, params, app and user names; only the tenant differs.
    mallory = Scope("evil", ALICE.app, ALICE.user)
    for reader in (writer, Cache(aredis_client, config)):  # same L1, and a fresh one
        assert await reader.get_answer(mallory, key) is None
        assert await reader.get_step(mallory, job_key, []) is None
        assert await reader.warm_worker("evil", "tiny", [11, 12]) is None
        assert await reader.get_answer(ALICE, key) is not None  # the owner still hits
        assert await reader.warm_worker("acme", "tiny", [11, 12]) == "w1"
    # Every scope's Redis key differs between the tenants, for every level.
    for level, content in (("answer", key), ("step", job_key)):
        for name in SCOPES:
            assert writer.key(level, name, ALICE, content) != writer.key(
                level, name, mallory, content
            )


# -- TTLs and L1 vs Redis ---------------------------------------------------------------------


async def test_ttls_are_honoured_and_l1_never_outlives_redis(aredis_client, short):
    cache = Cache(aredis_client, short)
    key = key_for()
    await cache.put_answer(ALICE, key, result(), scopes=SCOPES)
    for name in SCOPES:
        k = cache.key("answer", name, ALICE, key)
        t_before = cache.clock()
        pttl = await aredis_client.pttl(k)
        assert 0 < pttl <= short.ttl_s(name) * 1000
        l1_deadline = cache.l1._entries[k][1]
        assert l1_deadline <= t_before + pttl / 1000  # L1 expires no later than Redis

    filled = Cache(aredis_client, short)  # filled from Redis: deadline from the key's PTTL
    t_before = filled.clock()
    assert await filled.get_answer(ALICE, key) is not None
    k = filled.key("answer", "user", ALICE, key)
    assert filled.l1._entries[k][1] < t_before + short.user_ttl_s - 0.001

    await asyncio.sleep(1.1)  # the user scope (1 s) has expired, the app scope (2 s) has not
    k_user, k_app = (cache.key("answer", n, ALICE, key) for n in ("user", "app"))
    assert await aredis_client.exists(k_user) == 0 and await aredis_client.exists(k_app) == 1
    for c in (cache, filled):
        assert c.l1.get(k_user) is None  # gone from L1 too
        assert await c.get_answer(ALICE, key) is not None  # served by the app scope now
    assert await cache.get_answer(Scope("acme", "other", "z"), key) is not None  # tenant scope


async def test_put_invalidates_l1(aredis_client, config):
    cache = Cache(aredis_client, config)
    key = key_for()
    await cache.put_answer(ALICE, key, result(answer="old"))
    assert schema.decode(await cache.get_answer(ALICE, key), schema.Result).answer == "old"
    await cache.put_answer(ALICE, key, result(answer="new"))
    assert schema.decode(await cache.get_answer(ALICE, key), schema.Result).answer == "new"


# -- step level -------------------------------------------------------------------------------


async def test_steps_hit_and_miss(aredis_client, config):
    cache = Cache(aredis_client, config)
    job_key = step_key("tiny", "Compute 3 + 4 * 2.", ["x = 2"], GREEDY)
    accepted = ["4 * 2 = 8"]
    assert await cache.get_step(ALICE, job_key, accepted) is None
    assert await cache.put_step(ALICE, job_key, accepted, "3 + 8 = 11", "entailed")
    assert await cache.get_step(ALICE, job_key, accepted) == ("3 + 8 = 11", "entailed")
    fresh = Cache(aredis_client, config)
    assert await fresh.get_step(ALICE, job_key, [" 4 * 2  = 8 "]) == ("3 + 8 = 11", "entailed")
    assert await fresh.get_step(ALICE, job_key, []) is None  # another position in the chain
    assert (fresh.stats.step_l2_hits, fresh.stats.step_l2_misses) == (1, 1)


@pytest.mark.parametrize("verdict", ["contradicted", "unknown", "no_claim", "unverified"])
async def test_an_unverified_step_is_never_cached(aredis_client, config, redis_prefix, verdict):
    cache = Cache(aredis_client, config)
    job_key = step_key("tiny", "Compute 3 + 8.", [], GREEDY)
    stored = await cache.put_step(ALICE, job_key, [], "3 + 8 = 12", verdict, scopes=SCOPES)
    assert stored is False and cache.stats.step_refused == 1 and cache.stats.step_puts == 0
    assert await num_keys(aredis_client, redis_prefix) == 0
    assert len(cache.l1) == 0
    assert await Cache(aredis_client, config).get_step(ALICE, job_key, []) is None


async def test_a_contradicted_step_does_not_replace_a_verified_one(aredis_client, config):
    cache = Cache(aredis_client, config)
    job_key = step_key("tiny", "Compute 3 + 8.", [], GREEDY)
    assert await cache.put_step(ALICE, job_key, [], "3 + 8 = 11", "consistent")
    assert not await cache.put_step(ALICE, job_key, [], "3 + 8 = 12", "contradicted")
    assert await Cache(aredis_client, config).get_step(ALICE, job_key, []) == (
        "3 + 8 = 11",
        "consistent",
    )


# -- prefix level -----------------------------------------------------------------------------


async def test_prefix_routes_to_the_longest_live_prefix(aredis_client, short):
    cache = Cache(aredis_client, short)
    hashes = [101, 102, 103, 104, 105]
    assert await cache.warm_worker("acme", "tiny", hashes) is None  # nothing published
    await cache.publish_prefix("acme", "tiny", hashes[:2], "w-short")
    await cache.publish_prefix("acme", "tiny", hashes[:4], "w-long")
    assert await cache.warm_worker("acme", "tiny", hashes) is None  # nobody is alive
    assert cache.stats.prefix_dead == 1

    await cache.mark_alive("w-short")
    await cache.mark_alive("w-long")
    assert await cache.warm_worker("acme", "tiny", hashes) == "w-long"
    both = await cache.warm_worker("acme", "tiny", hashes[:1] + [999])
    assert both in ("w-short", "w-long")  # both hold block 0
    assert await cache.warm_worker("acme", "other-model", hashes) is None

    await cache.mark_dead("w-long")  # dead: fall back to the next-longest live owner
    assert not await cache.is_alive("w-long")
    assert await cache.warm_worker("acme", "tiny", hashes) == "w-short"
    assert cache.stats.prefix_l2_hits == 3 and cache.stats.prefix_l2_misses == 3

    pttl = await aredis_client.pttl(cache._prefix_key("acme", "tiny", hashes[0]))
    assert 0 < pttl <= short.prefix_ttl_s * 1000  # ownership is short-lived
    beat = await aredis_client.pttl(cache._alive_key("w-short"))
    assert 0 < beat <= short.alive_ttl_s * 1000  # so is liveness, unless refreshed
    await cache.mark_alive("w-short", ttl_s=30)
    assert await aredis_client.pttl(cache._alive_key("w-short")) > short.alive_ttl_s * 1000
    assert await cache.warm_worker("acme", "tiny", []) is None


async def test_a_prefill_batch_claims_all_its_prefixes_in_one_call(aredis_client, short):
    cache = Cache(aredis_client, short)
    claims = [("acme", "tiny", [201, 202]), ("acme", "tiny", []), ("beta", "tiny", [301])]
    await cache.publish_prefixes(claims, "w-batch")
    await cache.mark_alive("w-batch")
    assert await cache.warm_worker("acme", "tiny", [201, 202]) == "w-batch"
    assert await cache.warm_worker("beta", "tiny", [301]) == "w-batch"
    assert await cache.warm_worker("acme", "tiny", [301]) is None  # beta's block, not acme's
    assert cache.stats.prefix_puts == 2  # the prompt with no whole block claims nothing
    await cache.publish_prefixes([], "w-batch")  # nothing to claim: no round trip, no error
    assert cache.stats.prefix_puts == 2


async def test_a_heartbeat_that_is_not_refreshed_expires(aredis_client, short):
    cache = Cache(aredis_client, short)
    await cache.publish_prefix("acme", "tiny", [1, 2], "w1")
    await cache.mark_alive("w1", ttl_s=0.2)
    assert await cache.warm_worker("acme", "tiny", [1, 2]) == "w1"
    t0 = time.monotonic()
    while await cache.is_alive("w1"):  # Redis expires it within ~0.2 s
        assert time.monotonic() - t0 < 2
        await asyncio.sleep(0.05)
    assert await cache.warm_worker("acme", "tiny", [1, 2]) is None
