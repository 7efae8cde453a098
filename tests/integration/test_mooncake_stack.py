"""The KV handoff over Mooncake on a real local stack (embedded broker, Redis, the three stages;
decode's engine core in a process of its own): prefill serves its pool with Mooncake's transfer
engine, and decode is told to read every pool over it (`kv_transport="mooncake"`), so the KV
crosses TCP on loopback although the segment could be mapped here. Skipped without the engine
unless STEPWISE_TEST_MOONCAKE=1 (tests/unit/transfer/mooncake_check.py). A prefill host lost
after it handed off, and a decode that cannot map the pool at all: test_mooncake_hosts.py."""

from __future__ import annotations

import uuid

import pytest
import redis

from pipeline import schema
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config
from tests.unit.transfer.mooncake_check import mooncake_or_skip

pytestmark = pytest.mark.slow

PROMPTS = [f"What is {a} + {b}?" for a, b in ((3, 4), (12, 7), (25, 17), (8, 9))]
GREEDY = schema.JobParams(temperature=0.0, max_tokens=60, verify="off")


@pytest.fixture(autouse=True)
def needs_mooncake() -> None:
    mooncake_or_skip()


def greedy_jobs(tag: str) -> list[schema.Job]:
    return [
        schema.Job(id=f"{tag}-{i}-{uuid.uuid4().hex[:6]}", prompt=p, params=GREEDY)
        for i, p in enumerate(PROMPTS)
    ]


def forget_answers(redis_url: str, prefix: str) -> None:
    """The same greedy jobs again would be answer-cache hits that never reach prefill."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


async def test_greedy_jobs_over_mooncake_give_the_tokens_of_shm_pool(
    kafka_bootstrap, redis_url, topics
):
    texts = {}
    for transport in ("shm_pool", "mooncake"):
        config = stack_config(
            kafka_bootstrap, redis_url, topics, kv_transport=transport, mooncake_host="127.0.0.1"
        )
        jobs = greedy_jobs(transport)
        async with running_stack(config) as (_, prefill, decode):
            _, results = await run_jobs(config, jobs, timeout_s=180)
            assert decode.num_reprefills == 0  # every import came across, none prefilled again
            served = prefill.exporter.server
            assert (served is not None) == (transport == "mooncake")
        assert set(results) == {j.id for j in jobs}
        assert all(len(results[j.id]) == 1 and results[j.id][0].status == "ok" for j in jobs)
        # Each Result says how long its import took, and that nothing was prefilled again.
        stages = [results[j.id][0].timings.stages for j in jobs]
        assert all(s["kv_import"] > 0 and "reprefill" not in s for s in stages), stages
        texts[transport] = [results[j.id][0].text for j in jobs]
        forget_answers(redis_url, topics.prefix)
    assert texts["mooncake"] == texts["shm_pool"]
