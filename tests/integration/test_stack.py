"""`stepwise up`'s Stack with services named by the environment: it starts only the workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import urllib.request

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
    with socket.socket() as s:  # a free port for the gateway
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("STEPWISE_GATEWAY_PORT", str(s.getsockname()[1]))
    config = PipelineConfig.from_env(topic_prefix=topics.prefix, model="tiny-reasoner")
    stack = Stack(config, log_dir=tmp_path)
    with stack:
        assert stack.services.embedded == []  # both came from the environment
        assert sorted(stack.procs) == [
            "budget", "decode", "gateway", "ingest", "prefill", "verify"
        ]  # fmt: skip
        # The workers that run no model sit service_nice (default 10) below the engine ones.
        nice = {name: os.getpriority(os.PRIO_PROCESS, p.pid) for name, p in stack.procs.items()}
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert stack.service_nice == 10
        for name in ("ingest", "budget", "gateway"):
            assert nice[name] == min(19, base + 10), nice
        for name in ("prefill", "decode", "verify"):
            assert nice[name] == base, nice
        job = schema.Job(id="stack-1", prompt="What is 4 + 5?", params=schema.JobParams(seed=1))

        async def run() -> schema.Result:
            async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
                await client.submit(job)
                async for msg in client.follow({job.id}, timeout_s=120):
                    if isinstance(msg, schema.Result):
                        return msg
            raise AssertionError("no Result")

        url = f"http://127.0.0.1:{stack.gateway_port}"
        for _ in range(150):  # the gateway follows events from when it is up
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        result = asyncio.run(run())
        assert result.status == "ok" and result.steps
        # The gateway serves the same job over HTTP, once its own consumer has read the Result
        # (it follows the results topic independently of our client, so it may lag a little).
        for _ in range(100):
            with urllib.request.urlopen(f"{url}/v1/jobs/{job.id}", timeout=5) as r:
                got = json.loads(r.read())
            if got["status"] == "done":
                break
            time.sleep(0.1)
        assert got["status"] == "done", got
        assert got["result"]["answer"] == result.answer
        # Steps were checked by a Celery worker (no verdict timed out as unknown).
        assert all(s.verdict in ("entailed", "consistent", "no_claim") for s in result.steps)
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))
    codes = {name: p.returncode for name, p in stack.procs.items()}
    # uvicorn shuts down gracefully, then re-raises SIGTERM so its exit status says why.
    assert codes.pop("gateway") in (0, -signal.SIGTERM) and "shutdown complete" in logs
    assert set(codes.values()) == {0}, (codes, logs)  # SIGTERM drained them
    # Each Kafka stage froze its start-up out of the collector and logged its pauses.
    for name in ("ingest", "prefill", "decode", "budget"):
        log = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "objects frozen out of the collector" in log and " gc: {'gen0_count'" in log, name
