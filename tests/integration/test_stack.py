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
from pipeline.local.stack import Stack

pytestmark = pytest.mark.slow

# What each worker process must show after one verified job went through it: series a
# Prometheus scrape of that process finds with a value above zero (docs/telemetry.md).
MOVED = {
    "ingest": ["stepwise_cache_misses_total"],
    "prefill": ["stepwise_kv_cache_capacity_blocks"],
    "decode": ["stepwise_jobs_total", "stepwise_engine_generated_tokens_total"],
    "verify": ["stepwise_verify_checks_total"],
    "budget": ["stepwise_budget_max_thinking_tokens", "stepwise_budget_max_steps"],
    "gateway": ["stepwise_worker_info"],
}


def series_total(text: str, name: str) -> float:
    """The sum of a series' samples in a Prometheus text exposition (all its labels)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers.get_content_type() == "text/plain"
        return r.read().decode()


def scrape_every_worker(log_dir, gateway_url: str) -> None:
    """Each worker process over HTTP, as Prometheus would: the port each logged at start-up
    (STEPWISE_METRICS_PORT=0: a free one), the verify worker's pool children included, the
    gateway on its own port; every series in MOVED has moved in the process that owns it."""
    import re

    pages: dict[str, list[str]] = {}
    for name in MOVED:
        if name == "gateway":
            pages[name] = [scrape(f"{gateway_url}/metrics")]
            continue
        log = (log_dir / f"{name}.log").read_text(errors="replace")
        ports = re.findall(rf"{name}: serving /metrics on port (\d+)", log)
        assert ports, f"{name} logged no metrics port"
        pages[name] = [scrape(f"http://127.0.0.1:{p}/metrics") for p in sorted(set(ports))]
    for name, series in MOVED.items():
        text = "\n".join(pages[name])
        assert f'stage="{name}"' in text, name  # stepwise_worker_info names the process
        for metric in series:
            assert series_total(text, metric) > 0, (name, metric)
    # Nothing leaks between processes: decode's job counter is not in ingest's page.
    assert series_total("\n".join(pages["ingest"]), "stepwise_jobs_total") == 0


def test_stack_runs_a_job_and_stops_its_workers_cleanly(
    kafka_bootstrap, redis_url, topics, monkeypatch, tmp_path
):
    monkeypatch.setenv("STEPWISE_KAFKA", kafka_bootstrap)
    monkeypatch.setenv("STEPWISE_REDIS", redis_url)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with socket.socket() as s:  # a free port for the gateway
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("STEPWISE_GATEWAY_PORT", str(s.getsockname()[1]))
    config = PipelineConfig.from_settings(topic_prefix=topics.prefix, model="tiny-reasoner")
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
        stack.wait_for_gateway()  # the gateway follows events from when it is up
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
        scrape_every_worker(tmp_path, url)
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))
    codes = {name: p.returncode for name, p in stack.procs.items()}
    # uvicorn shuts down gracefully, then re-raises SIGTERM so its exit status says why.
    gateway_log = (tmp_path / "gateway.log").read_text(errors="replace")[-4000:]
    assert codes.pop("gateway") in (0, -signal.SIGTERM), gateway_log
    assert "shutdown complete" in logs
    assert set(codes.values()) == {0}, (codes, logs)  # SIGTERM drained them
    # Each Kafka stage froze its start-up out of the collector and logged its pauses.
    for name in ("ingest", "prefill", "decode", "budget"):
        log = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "objects frozen out of the collector" in log and " gc: {'gen0_count'" in log, name
