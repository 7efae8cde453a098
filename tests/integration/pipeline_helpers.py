"""The in-process pipeline (ingest, prefill, decode as asyncio tasks) and a job collector."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.config import PipelineConfig
from pipeline.decode.worker import DecodeWorker
from pipeline.ingest.worker import IngestWorker
from pipeline.prefill.worker import PrefillWorker


def stack_config(kafka: str, redis: str, topics, **overrides) -> PipelineConfig:
    """The pipeline config every integration test runs its in-process stack with."""
    values = dict(
        kafka=kafka, redis=redis, topic_prefix=topics.prefix, model="tiny-reasoner",
        dtype="float32", drain_timeout_s=10,
    )  # fmt: skip
    return PipelineConfig(**{**values, **overrides})


@contextlib.asynccontextmanager
async def running_stack(config: PipelineConfig) -> AsyncIterator[list]:
    """The three Kafka stages running on `config` until the block ends (then drained)."""
    workers = [IngestWorker(config), PrefillWorker(config), DecodeWorker(config)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        await asyncio.sleep(0.5)
        for t in tasks:  # a worker that died starting up fails the test now, not by timeout
            if t.done():
                t.result()
        yield workers
    finally:
        for w in workers:
            w.stop()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 60)


async def run_jobs(config: PipelineConfig, jobs, extra=(), timeout_s=240, on_message=None):
    """Submit jobs (plus raw `extra` records) and collect events and Results per job id;
    `on_message(msg)` sees every message as it arrives."""
    events: dict[str, list[schema.Event]] = {}
    results: dict[str, list[schema.Result]] = {}
    async with StepwiseClient(config.kafka, config.topic_prefix) as client:
        for raw_key, raw_value, headers in extra:
            await client.producer.send(client.topics.jobs, raw_value, key=raw_key, headers=headers)
        for j in jobs:
            await client.submit(j)
        ids = {j.id for j in jobs}
        async for msg in client.follow(ids, timeout_s=timeout_s):
            bucket = events if isinstance(msg, schema.Event) else results
            bucket.setdefault(msg.id, []).append(msg)
            if on_message is not None:
                on_message(msg)
    return events, results
