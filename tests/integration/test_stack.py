"""`stepwise up`'s Stack with services named by the environment: it starts only the workers."""

from __future__ import annotations

import asyncio

import pytest

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.config import PipelineConfig
from pipeline.stack import Stack

pytestmark = pytest.mark.slow


def test_stack_runs_a_job_and_stops_its_workers_cleanly(
    kafka_bootstrap, redis_url, topics, monkeypatch, tmp_path
):
    monkeypatch.setenv("STEPWISE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("STEPWISE_REDIS", redis_url)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = PipelineConfig.from_env(topic_prefix=topics.prefix, model="tiny-reasoner")
    stack = Stack(config, log_dir=tmp_path)
    with stack:
        assert stack.services.embedded == []  # both came from the environment
        assert sorted(stack.procs) == ["budget", "decode", "ingest", "prefill", "verify"]
        job = schema.Job(id="stack-1", prompt="What is 4 + 5?", params=schema.JobParams(seed=1))

        async def run() -> schema.Result:
            async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
                await client.submit(job)
                async for msg in client.follow({job.id}, timeout_s=120):
                    if isinstance(msg, schema.Result):
                        return msg
            raise AssertionError("no Result")

        result = asyncio.run(run())
        assert result.status == "ok" and result.steps
        # Steps were checked by a Celery worker (no verdict timed out as unknown).
        assert all(s.verdict in ("entailed", "consistent", "no_claim") for s in result.steps)
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))
    assert all(p.returncode == 0 for p in stack.procs.values()), logs  # SIGTERM drained them
