"""Prefix routing on the real stack: prefill publishes which prompt blocks it holds, and ingest
sends a job whose prompt shares them to a partition of that (live) worker."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from pipeline import schema
from pipeline.cache import prefix_hashes
from pipeline.config import DEFAULT_BLOCK_SIZE
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = pytest.mark.slow


async def test_a_job_sharing_a_warm_prefix_is_routed_to_its_worker(
    kafka_bootstrap, redis_url, topics
):
    config = stack_config(kafka_bootstrap, redis_url, topics)
    prompt = "Solve the system: 4x + y = 33, 2x - y = 3."

    def job() -> schema.Job:
        return schema.Job(id=f"r-{uuid.uuid4().hex[:8]}", prompt=prompt)

    async with running_stack(config) as (ingest, prefill, _):
        first = job()
        await run_jobs(config, [first], timeout_s=120)
        hashes = prefix_hashes(ingest.core.tokenize(first), DEFAULT_BLOCK_SIZE)
        assert hashes  # the prompt fills at least one KV block
        owner = None
        for _ in range(50):  # the heartbeat (alive + partitions) comes once a second
            owner = await ingest.cache.warm_worker("default", "tiny-reasoner", hashes)
            if owner and await ingest.redis.get(f"{topics.prefix}partitions:{owner}"):
                break
            await asyncio.sleep(0.1)
        assert owner == prefill.worker_id
        assert ingest.num_routed == 0
        _, results = await run_jobs(config, [job(), job()], timeout_s=120)
    assert ingest.num_routed == 2 and all(r[0].status == "ok" for r in results.values())
