"""Live budgets on the real stack: published limits reach ingest and decode, and the budget
worker turns Results into published, versioned limits."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import msgspec
import pytest
import redis.asyncio

from pipeline import budget, schema
from pipeline.config import PipelineConfig
from pipeline.controller.worker import BudgetWorker
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = pytest.mark.slow


def config_for(kafka, redis_url, topics) -> PipelineConfig:
    return stack_config(kafka, redis_url, topics)


def jobs(n: int, **params) -> list[schema.Job]:
    p = schema.JobParams(temperature=0.7, verify="off", **params)
    return [
        msgspec.structs.replace(
            schema.Job(id=f"b-{uuid.uuid4().hex[:8]}-{i}", prompt=f"Compute ({i} + 8) * 3 - 5."),
            params=msgspec.structs.replace(p, seed=i),
        )
        for i in range(n)
    ]


async def test_a_published_budget_forces_answers_end_to_end(kafka_bootstrap, redis_url, topics):
    config = config_for(kafka_bootstrap, redis_url, topics)
    client = redis.asyncio.Redis.from_url(redis_url)
    tight = budget.ClassLimits(max_steps=1, max_thinking_tokens=400, probe_effort=1)
    try:
        assert await budget.publish(client, topics.prefix, "interactive", tight) >= 1
        async with running_stack(config):
            await asyncio.sleep(1.5)  # the workers' readers refresh every second
            batch = jobs(4)
            _, results = await run_jobs(config, batch, timeout_s=40)
    finally:
        await client.delete(budget.budget_key(topics.prefix, "interactive"))
        await client.aclose()
    for j in batch:
        (r,) = results[j.id]
        # One step allowed: the first step, then the forced answer line.
        assert r.status == "ok" and r.budget.stop_reason == "budget", r.text
        assert len(r.steps) == 2 and r.steps[-1].text.startswith("Answer:")
        assert r.answer is not None


async def test_the_budget_worker_publishes_versioned_limits_from_results(
    kafka_bootstrap, redis_url, topics
):
    config = config_for(kafka_bootstrap, redis_url, topics)
    client = redis.asyncio.Redis.from_url(redis_url)
    worker = BudgetWorker(config)
    task = asyncio.create_task(worker.run())
    try:
        async with running_stack(config):
            _, results = await run_jobs(config, jobs(6), timeout_s=120)
            for _ in range(100):  # until the worker has read the Results
                if worker.num_observed >= 6:
                    break
                await asyncio.sleep(0.1)
            limits = await budget.read(client, topics.prefix, "interactive")
            lag_keys = [k async for k in client.scan_iter(f"{topics.prefix}lag:*")]
    finally:
        worker.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        await client.delete(budget.budget_key(topics.prefix, "interactive"))
        await client.delete(budget.budget_key(topics.prefix, "batch"))
        await client.aclose()
    assert len(results) == 6 and worker.num_observed >= 6
    assert limits is not None and limits.version >= 1
    cfg = budget.DEFAULT_BUDGET_CONFIG.for_class("interactive")
    assert cfg.min_thinking_tokens <= limits.max_thinking_tokens <= cfg.max_thinking_tokens
    assert lag_keys  # the stages publish their lag for the controller
