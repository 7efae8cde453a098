"""The answer cache on the real stack: a reproducible job's answer serves the next identical
job of the same tenant (status `cached`, no model run), and never another tenant's."""

from __future__ import annotations

import uuid

import pytest

from pipeline import schema
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = pytest.mark.slow


def job(tenant: str, **params) -> schema.Job:
    return schema.Job(
        id=f"c-{uuid.uuid4().hex[:10]}",
        tenant=tenant,
        prompt="Compute (6 + 7) * 2.",
        params=schema.JobParams(**{"temperature": 0.0, "verify": "off", **params}),
    )


async def test_a_repeated_greedy_job_is_answered_from_the_cache(kafka_bootstrap, redis_url, topics):
    config = stack_config(kafka_bootstrap, redis_url, topics)
    tenant = f"t{uuid.uuid4().hex[:6]}"
    async with running_stack(config) as (ingest, _, _):
        first = job(tenant)
        _, r1 = await run_jobs(config, [first], timeout_s=120)
        again, other, sampled = job(tenant), job(f"{tenant}x"), job(tenant, temperature=0.7)
        events, r2 = await run_jobs(config, [again, other, sampled], timeout_s=120)
    (original,) = r1[first.id]
    assert original.status == "ok" and original.answer
    (hit,) = r2[again.id]
    assert hit.status == "cached" and hit.answer == original.answer and hit.text == original.text
    assert [e.kind for e in events[again.id]] == ["accepted", "final"]
    assert r2[other.id][0].status == "ok"  # another tenant: computed, not served
    assert r2[sampled.id][0].status == "ok"  # not reproducible (no seed, T > 0): never cached
    assert ingest.num_cached == 1
