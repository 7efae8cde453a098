"""Budget limits in a real Redis: round trip, versions, and the reader's cache."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis.asyncio
import redis.exceptions

from pipeline import budget
from pipeline.budget import BudgetReader, ClassLimits, state
from pipeline.budget.signals import DecodeReport, RunningJob

LIMITS = ClassLimits(max_steps=25, max_thinking_tokens=200, probe_effort=3)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_publish_read_round_trip(aredis_client, redis_prefix):
    assert await budget.read(aredis_client, redis_prefix, "interactive") is None
    version = await budget.publish(aredis_client, redis_prefix, "interactive", LIMITS)
    got = await budget.read(aredis_client, redis_prefix, "interactive")
    assert got == ClassLimits(
        max_steps=25, max_thinking_tokens=200, probe_effort=3, version=version
    )
    assert got.to_budget().version == version
    # Classes are separate keys under the prefix.
    assert await budget.read(aredis_client, redis_prefix, "batch") is None
    keys = {k.decode() for k in await aredis_client.keys(redis_prefix + "*")}
    assert keys == {redis_prefix + "budget:interactive"}


async def test_versions_increase_per_class(aredis_client, redis_prefix):
    versions = []
    for tokens in (512, 300, 300, 450):
        limits = ClassLimits(max_steps=tokens // 8, max_thinking_tokens=tokens, probe_effort=4)
        versions.append(await budget.publish(aredis_client, redis_prefix, "interactive", limits))
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert (
        await budget.read(aredis_client, redis_prefix, "interactive")
    ).max_thinking_tokens == 450
    assert await budget.publish(aredis_client, redis_prefix, "batch", LIMITS) == 1


async def test_concurrent_publishers_never_share_a_version(redis_url, aredis_client, redis_prefix):
    # Two controllers (say, old and new during a rollout) publishing at once.
    clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(4)]
    try:
        got = await asyncio.gather(
            *(
                budget.publish(c, redis_prefix, "interactive", LIMITS)
                for c in clients
                for _ in range(10)
            )
        )
    finally:
        for c in clients:
            await c.aclose()
    assert sorted(got) == list(range(1, 41))
    assert (await budget.read(aredis_client, redis_prefix, "interactive")).version == 40


async def test_reader_caches_until_refresh(aredis_client, redis_prefix):
    clock = FakeClock()
    reader = BudgetReader(aredis_client, redis_prefix, refresh_s=1.0, clock=clock)
    assert await reader.get("interactive") is None  # nothing published: callers use defaults
    assert reader.cached("interactive") is None
    v1 = await budget.publish(aredis_client, redis_prefix, "interactive", LIMITS)
    clock.now += 0.5
    assert await reader.get("interactive") is None  # within refresh_s: the cached answer
    clock.now += 0.6
    got = await reader.get("interactive")
    assert got is not None and got.version == v1
    assert reader.cached("interactive") == got.to_budget()
    reads = reader.num_reads
    for _ in range(100):  # decode asks at every step boundary: one Redis read per refresh_s
        await reader.get("interactive")
    assert reader.num_reads == reads
    tighter = ClassLimits(max_steps=8, max_thinking_tokens=64, probe_effort=1)
    v2 = await budget.publish(aredis_client, redis_prefix, "interactive", tighter)
    assert (await reader.get("interactive")).version == v1
    clock.now += 1.0
    got = await reader.get("interactive")
    assert (got.version, got.max_thinking_tokens) == (v2, 64)


class AwayRedis:
    """Stands in for a Redis that stopped answering (no socket timeouts to wait out)."""

    async def hgetall(self, key):
        raise redis.exceptions.ConnectionError("connection refused")


async def test_reader_keeps_the_last_limits_when_redis_is_away(aredis_client, redis_prefix):
    clock = FakeClock()
    reader = BudgetReader(aredis_client, redis_prefix, refresh_s=1.0, clock=clock)
    await budget.publish(aredis_client, redis_prefix, "interactive", LIMITS)
    got = await reader.get("interactive")
    reader.redis = AwayRedis()
    clock.now += 5.0
    assert await reader.get("interactive") == got  # admission goes on with the last limits
    fresh = BudgetReader(AwayRedis(), redis_prefix, clock=clock)
    assert await fresh.get("interactive") is None  # never read: the caller's defaults


@pytest.mark.parametrize("slo_class", ["interactive", "batch"])
async def test_key_layout(aredis_client, redis_prefix, slo_class):
    await budget.publish(aredis_client, redis_prefix, slo_class, LIMITS)
    raw = await aredis_client.hgetall(f"{redis_prefix}budget:{slo_class}")
    fields = {k.decode() for k in raw}
    assert fields == {
        "max_steps", "max_thinking_tokens", "probe_effort", "resample_cap", "early_exit",
        "shed", "retry_after_s", "slo_ms", "pressure", "version", "updated_ms",
    }  # fmt: skip


async def test_every_actuator_round_trips(aredis_client, redis_prefix):
    shedding = budget.limits_at(budget.SloClassConfig(slo_p95_ms=15_000), 4.6, retry_after_s=9)
    version = await budget.publish(aredis_client, redis_prefix, "interactive", shedding)
    got = await budget.read(aredis_client, redis_prefix, "interactive")
    assert got == dataclasses.replace(shedding, version=version)
    assert got.to_budget().shed == shedding.shed > 0 and got.to_budget().resample_cap == 0


async def test_load_reports_and_arrival_counts(aredis_client, redis_prefix):
    job = RunningJob("interactive", 1200.0, 33, True)
    report = DecodeReport(worker="d-1", ts_ms=5, pace_tok_s=11.5, running=1, jobs=[job])
    await state.publish_report(aredis_client, redis_prefix, report)
    assert await state.read_reports(aredis_client, redis_prefix) == [report]
    assert 0 < await aredis_client.ttl(state.report_key(redis_prefix, "d-1")) <= 5  # expires
    for shed in (False, True, False):
        await state.count_arrival(aredis_client, redis_prefix, "batch", shed)
    assert await state.read_counts(aredis_client, redis_prefix, "batch") == (3, 1)
    assert await state.read_counts(aredis_client, redis_prefix, "interactive") == (0, 0)
