"""The step cache on the real stack: a reproducible job's verified steps are cached, and the
same job run again (its answer no longer cached) splices them in instead of generating them."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio

from pipeline import schema
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("verify", ["async", "strict"])
async def test_verified_steps_are_reused_by_the_same_job(
    kafka_bootstrap, redis_url, topics, verify_worker, verify
):
    config = stack_config(kafka_bootstrap, redis_url, topics)
    tenant = f"s{uuid.uuid4().hex[:6]}"

    def job() -> schema.Job:
        params = schema.JobParams(temperature=0.0, verify=verify)
        return schema.Job(
            id=f"s-{uuid.uuid4().hex[:8]}", tenant=tenant, prompt="Compute (9 + 8) * 2.",
            params=params,
        )  # fmt: skip

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        async with running_stack(config):
            first = job()
            ev1, r1 = await run_jobs(config, [first], timeout_s=120)
            # Forget the answer, keep the steps: the second run must go through decode.
            async for key in client.scan_iter(f"{topics.prefix}cache:v*:answer:*"):
                await client.delete(key)
            second = job()
            ev2, r2 = await run_jobs(config, [second], timeout_s=120)
    finally:
        await client.aclose()
    (a,), (b,) = r1[first.id], r2[second.id]
    assert a.status == b.status == "ok" and a.text == b.text and a.answer == b.answer
    cached = [e for e in ev2[second.id] if e.kind == "verdict" and e.detail == "cached"]
    verified = [s for s in a.steps if s.verdict in ("entailed", "consistent")]
    # Every verified step but the first (the prefill samples into it) is spliced, in a row
    # (once only every other step was: the engine sampled past each spliced delimiter).
    assert verified and len(cached) == len([s for s in verified if s is not a.steps[0]]) >= 1
    assert not any(e.detail == "cached" for e in ev1[first.id])
    # Spliced steps are not generated: the second run spends fewer tokens.
    assert b.budget.used < a.budget.used
