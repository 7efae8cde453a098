"""Decode placement on a real stack (embedded broker, Redis, in-process workers): a handoff goes
to the decode worker with room rather than to its key's partition; a job placed once keeps its
partition; the decode workers' reports live and expire in Redis (pipeline/stage/placement.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest
import redis.asyncio

from pipeline import schema
from pipeline.decode.worker import DecodeWorker
from pipeline.ingest.worker import IngestWorker
from pipeline.prefill.worker import PrefillWorker
from pipeline.stage import placement
from pipeline.stage.placement import DecodeLoad
from tests.integration.pipeline_helpers import count_results, run_jobs, running_stack, stack_config

NUM_JOBS = 20


async def test_reports_expire_and_a_first_placement_is_kept(redis_url, redis_prefix):
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        now = int(time.time() * 1000)
        await placement.publish_load(client, redis_prefix, DecodeLoad("d1", (0, 1), 3, 0.5, now))
        await placement.publish_load(client, redis_prefix, DecodeLoad("d2", (2, 3), 9, 1.0, now))
        loads = await placement.read_loads(client, redis_prefix)
        assert [(x.worker, x.room) for x in loads] == [("d1", 3), ("d2", 9)]
        await placement.withdraw_load(client, redis_prefix, "d1")
        await client.set(placement.load_key(redis_prefix, "d2"), b"not msgpack")
        assert await placement.read_loads(client, redis_prefix) == []  # gone, and unreadable
        assert await client.smembers(placement.members_key(redis_prefix)) == set()
        # A job keeps the partition it was first placed on, the key's included.
        first = await placement.pin(client, redis_prefix, [("a", 3), ("b", None)])
        again = await placement.pin(client, redis_prefix, [("a", 0), ("b", 2), ("c", 1)])
        assert first == [3, None] and again == [3, None, 1]
        ttl = await client.ttl(placement.pin_key(redis_prefix, "a"))
        assert 0 < ttl <= placement.PIN_TTL_S
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_handoffs_go_to_the_decode_worker_with_room(
    kafka_bootstrap, redis_url, topics, redis_client
):
    config = stack_config(kafka_bootstrap, redis_url, topics)
    small = dataclasses.replace(config, worker_id="decode-small", max_decode_seqs=1)
    big = dataclasses.replace(config, worker_id="decode-big", max_decode_seqs=16)
    prefill = PrefillWorker(config)
    workers = [IngestWorker(config), prefill, DecodeWorker(small), DecodeWorker(big)]
    tag = uuid.uuid4().hex[:6]
    jobs = [
        schema.Job(id=f"place-{tag}-{i}", prompt=f"What is {i + 2} + {3 * i + 1}?",
                   params=schema.JobParams(temperature=0.7, seed=i, max_tokens=120))
        for i in range(NUM_JOBS)
    ]  # fmt: skip
    async with running_stack(config, workers):
        for _ in range(300):  # both decode workers hold partitions: placement has a choice
            loads = prefill.placer.loads.values()
            if sum(1 for x in loads if x.partitions) == 2:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"decode reports: {prefill.placer.loads}")
        _, results = await run_jobs(config, jobs, timeout_s=240)
    assert {j.id for j in jobs} == set(results) and all(len(r) == 1 for r in results.values())
    counts = await count_results(kafka_bootstrap, topics.prefix)
    assert all(counts[j.id] == 1 for j in jobs)
    # Who decoded each job: the worker that marked it done.
    done_by = [
        (redis_client.get(f"{topics.prefix}state:done:{j.id}") or b"").decode() for j in jobs
    ]
    on_big = done_by.count("decode-big")
    # By key, the two workers' partitions would take about half each; by room, the big one
    # (20 slots against 5) takes most.
    assert on_big >= 14 and prefill.placer.num_placed == NUM_JOBS, done_by
