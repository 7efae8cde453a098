"""The gateway's per-tenant rate limits (token buckets) and the API-key cache (Redis-held keys),
on an injected clock: no sleeps, no Redis."""

from __future__ import annotations

import pytest

from pipeline.gateway.auth import ApiKeys, KeysUnavailable, Unauthorized
from pipeline.gateway.config import GatewayConfig, parse_rate_limits
from pipeline.gateway.limits import RateLimit, RateLimiter
from pipeline.gateway.service import GatewayError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_bucket_allows_a_burst_then_the_rate():
    clock = Clock()
    limiter = RateLimiter(RateLimit(rate=2.0, burst=3), clock=clock)
    assert [limiter.take("tA") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("tA") == pytest.approx(0.5)  # empty: one token every 0.5 s
    assert limiter.take("tB") == 0.0  # every tenant has its own bucket
    clock.t += 0.5
    assert limiter.take("tA") == 0.0
    assert limiter.take("tA") == pytest.approx(0.5)
    clock.t += 60  # refills up to the burst, no further
    assert [limiter.take("tA") for _ in range(4)][-1] > 0


def test_overrides_and_no_limit():
    limiter = RateLimiter(RateLimit(), {"slow": RateLimit(0.1, 1)}, clock=Clock())
    assert all(limiter.take("fast") == 0.0 for _ in range(1000))  # rate 0: unlimited
    assert limiter.take("slow") == 0.0 and limiter.take("slow") == pytest.approx(10.0)


def test_parse_rate_limits(monkeypatch):
    assert parse_rate_limits("a:10/20, b:0.5") == {"a": RateLimit(10, 20), "b": RateLimit(0.5, 1)}
    assert parse_rate_limits("") == {}
    for bad in ("a", "a:x", "a:1/0", ":1", "a:-1"):
        with pytest.raises(ValueError):
            parse_rate_limits(bad)
    monkeypatch.setenv("STEPWISE_TENANT_RATE", "2.5")
    monkeypatch.setenv("STEPWISE_TENANT_RATES", "vip:100/200")
    config = GatewayConfig.from_settings()
    assert config.tenant_limit == RateLimit(2.5, 3) and config.tenant_rates["vip"].burst == 200


def test_rate_limit_error_is_openai_shaped_with_retry_after():
    err = GatewayError("slow down", code="rate_limited", status=429, retry_after_s=0.2)
    assert err.headers() == {"Retry-After": "1"}
    assert err.body()["error"] == {
        "code": "rate_limited", "message": "slow down", "type": "rate_limit_error",
        "param": None, "field": None,
    }  # fmt: skip


class FakeRedisKeys:
    def __init__(self, keys: dict[str, str]):
        self.keys = keys
        self.calls = 0
        self.down = False

    async def __call__(self, key: str) -> str | None:
        self.calls += 1
        if self.down:
            raise KeysUnavailable("down")
        return self.keys.get(key)


async def test_redis_held_keys_are_cached_for_ttl():
    clock = Clock()
    lookup = FakeRedisKeys({"rk": "tR"})
    keys = ApiKeys({"ck": "tC"}, lookup, ttl_s=5, clock=clock)
    assert keys.enabled
    assert await keys.resolve("ck") == "tC" and lookup.calls == 0  # config keys: no Redis
    assert await keys.resolve("rk") == "tR" and await keys.resolve("rk") == "tR"
    assert lookup.calls == 1
    for _ in range(3):  # unknown keys are cached too: one lookup
        with pytest.raises(Unauthorized):
            await keys.resolve("bad")
    assert lookup.calls == 2
    with pytest.raises(Unauthorized):
        await keys.resolve(None)
    with pytest.raises(Unauthorized):
        await keys.resolve("x" * 1000)
    del lookup.keys["rk"]  # revoked: still good until the entry expires
    assert await keys.resolve("rk") == "tR"
    clock.t += 5.1
    with pytest.raises(Unauthorized):
        await keys.resolve("rk")
    lookup.keys["new"] = "tN"
    assert await keys.resolve("new") == "tN"  # not cached: read at once
    lookup.down = True
    with pytest.raises(KeysUnavailable):
        await keys.resolve("other")


async def test_auth_off_without_any_keys():
    keys = ApiKeys({})
    assert not keys.enabled and await keys.resolve(None) == "default"


async def test_submit_takes_a_token_only_for_a_job_that_goes_out():
    from pipeline.config import PipelineConfig
    from pipeline.gateway.service import Gateway, parse_job

    config = GatewayConfig(
        pipeline=PipelineConfig(kafka="x"), tenant_rate=1.0, tenant_burst=2, tenant_max_inflight=3
    )
    gw = Gateway(config)
    gw.rates.clock = Clock()
    sent = []

    class Producer:
        async def send(self, topic, value, key=None, headers=None):
            sent.append(key)

    gw.producer = Producer()
    await gw.submit(parse_job(b'{"id": "a", "prompt": "hi"}'), "tA")
    with pytest.raises(GatewayError):  # 409 comes first and takes no token
        await gw.submit(parse_job(b'{"id": "a", "prompt": "hi"}'), "tB")
    await gw.submit(parse_job(b'{"id": "b", "prompt": "hi"}'), "tA")
    with pytest.raises(GatewayError) as err:
        await gw.submit(parse_job(b'{"id": "c", "prompt": "hi"}'), "tA")
    assert (err.value.status, err.value.code) == (429, "rate_limited")
    assert err.value.headers() == {"Retry-After": "1"}
    await gw.submit(parse_job(b'{"id": "c", "prompt": "hi"}'), "tB")
    assert sent == ["a", "b", "c"]
