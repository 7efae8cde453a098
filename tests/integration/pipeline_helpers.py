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
from tools.faults import count_results

__all__ = ["count_results", "run_jobs", "running_stack", "serving_gateway", "stack_config"]


def stack_config(kafka: str, redis: str, topics, **overrides) -> PipelineConfig:
    """The pipeline config every integration test runs its in-process stack with."""
    values = dict(
        kafka=kafka, redis=redis, topic_prefix=topics.prefix, model="tiny-reasoner",
        dtype="float32", drain_timeout_s=10,
    )  # fmt: skip
    return PipelineConfig(**{**values, **overrides})


@contextlib.asynccontextmanager
async def running_stack(config: PipelineConfig, workers: list | None = None) -> AsyncIterator[list]:
    """The three Kafka stages running on `config` (or the given workers) until the block ends
    (then drained)."""
    workers = workers or [IngestWorker(config), PrefillWorker(config), DecodeWorker(config)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    ready = [asyncio.create_task(w.ready.wait()) for w in workers]
    try:
        # Every worker consuming, or one that died starting up failing the test now (with
        # its error), not by a Result timeout later.
        pending = {*tasks, *ready}
        while not all(r.done() for r in ready):
            done, pending = await asyncio.wait(
                pending, timeout=180, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                raise TimeoutError("the workers did not start within 180 s")
            for t in done & set(tasks):
                t.result()  # raises a worker's error
                raise RuntimeError("a worker stopped while starting")
        yield workers
    finally:
        for r in ready:
            r.cancel()
        for w in workers:
            w.stop()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 60)


@contextlib.asynccontextmanager
async def serving_gateway(config: PipelineConfig, gateway_config) -> AsyncIterator[tuple]:
    """The stack on `config` and the gateway app served by uvicorn: yields (app, address)."""
    import uvicorn

    from pipeline.gateway.app import create_app

    app = create_app(gateway_config)
    port = gateway_config.port
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with running_stack(config) as workers:
        app.state.workers = workers  # for tests that reach a worker (its /metrics port)
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
        try:
            yield app, f"127.0.0.1:{port}"
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)


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
