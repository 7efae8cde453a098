"""Prefill and decode as on two hosts: real worker processes, decode in a mount namespace of its
own with a private /dev/shm, so it cannot open prefill's shared-memory pool at all. Nothing tells
decode to use Mooncake (its transport setting stays `shm_pool`): it must find, handoff by handoff,
that the pool does not map here and read it over Mooncake's TCP engine instead. And a prefill
worker killed after it handed off, before decode read anything: every job is prefilled again on
decode and ends with exactly one Result.

Skipped, saying why, where Mooncake cannot be imported (unless STEPWISE_TEST_MOONCAKE=1) or no
private mount namespace can be made (it needs root, or user namespaces)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import urllib.request
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.local.workers import WorkerProcesses
from tests.unit.transfer.mooncake_check import missing, mooncake_or_skip
from tools.faults import count_results

pytestmark = pytest.mark.slow

# decode's own /dev/shm: an empty tmpfs in a mount namespace of its own (as on another host).
PRIVATE_SHM = (
    "unshare", "--mount", "--propagation", "private", "sh", "-c",
    'mount -t tmpfs -o size=256m tmpfs /dev/shm && exec "$@"', "private-shm",
)  # fmt: skip
PROMPTS = [f"What is {a} + {b}?" for a, b in ((3, 4), (12, 7), (25, 17), (8, 9), (40, 2))]


def private_shm_or_skip() -> None:
    probe = subprocess.run([*PRIVATE_SHM, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        missing(f"no private mount namespace here: {probe.stderr.strip()[:200]}")


@pytest.fixture
def workers(kafka_bootstrap, redis_url, topics, tmp_path):
    mooncake_or_skip()
    private_shm_or_skip()
    # Prefill serves its pool over Mooncake on loopback; decode keeps the default transport.
    w = WorkerProcesses(
        kafka_bootstrap, redis_url, topics.prefix, tmp_path, MOONCAKE_HOST="127.0.0.1"
    )
    yield w
    w.stop_all()


def greedy_jobs(tag: str) -> list[schema.Job]:
    params = schema.JobParams(temperature=0.0, max_tokens=48, verify="off")
    return [
        schema.Job(id=f"{tag}-{i}-{uuid.uuid4().hex[:6]}", prompt=p, params=params)
        for i, p in enumerate(PROMPTS)
    ]


async def results_of(kafka: str, prefix: str, jobs) -> dict[str, schema.Result]:
    out: dict[str, schema.Result] = {}
    async with StepwiseClient(kafka, prefix) as client:
        for job in jobs:
            await client.submit(job)
        async for msg in client.follow({j.id for j in jobs}, timeout_s=180):
            if isinstance(msg, schema.Result):
                out[msg.id] = msg
    return out


async def handoffs_out(kafka: str, prefix: str, n: int, timeout_s: float = 120) -> None:
    """Wait until `n` handoffs are on the topic (prefill has handed every job off)."""
    consumer = AIOKafkaConsumer(
        f"{prefix}handoff", bootstrap_servers=kafka, auto_offset_reset="earliest"
    )
    await consumer.start()
    seen = 0
    try:
        async with asyncio.timeout(timeout_s):
            while seen < n:
                batch = await consumer.getmany(timeout_ms=500)
                seen += sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()


def decode_imports(w: WorkerProcesses) -> dict[tuple[str, str], float]:
    """stepwise_kv_imports_total by (transport, outcome), scraped from the decode worker's
    /metrics (its port is in its log)."""
    log = "".join(p.read_text(errors="replace") for p in w.log_dir.glob("decode-*.log"))
    port = re.findall(r"decode: serving /metrics on port (\d+)", log)[-1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.labels["transport"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "stepwise_kv_imports_total"
    }


async def test_decode_that_cannot_map_the_pool_reads_it_over_mooncake(
    workers, kafka_bootstrap, topics
):
    for name in ("ingest", "prefill"):
        workers.start(name, KV_TRANSPORT="mooncake")
    workers.start("decode", wrap=PRIVATE_SHM)  # KV_TRANSPORT: the default, shm_pool
    jobs = greedy_jobs("hosts")
    try:
        results = await results_of(kafka_bootstrap, topics.prefix, jobs)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{workers.logs()}") from e
    assert {j.id for j in jobs} == set(results), workers.logs()
    assert all(r.status == "ok" and r.text for r in results.values())
    assert all("reprefill" not in r.timings.stages for r in results.values())
    imports = decode_imports(workers)
    # Every handoff came over Mooncake (the pool could not be mapped); none fell back.
    assert imports[("mooncake", "imported")] == len(jobs), imports
    assert imports[("shm_pool", "imported")] == 0 and imports[("mooncake", "reprefill")] == 0
    counts = await count_results(kafka_bootstrap, topics.prefix)
    assert all(counts[j.id] == 1 for j in jobs)


async def test_a_prefill_worker_killed_after_handing_off_loses_nothing(
    workers, kafka_bootstrap, topics
):
    for name in ("ingest", "prefill"):
        workers.start(name, KV_TRANSPORT="mooncake")
    jobs = greedy_jobs("orphans")
    async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
        for job in jobs:
            await client.submit(job)
    await handoffs_out(kafka_bootstrap, topics.prefix, len(jobs))
    (prefill,) = workers.live("prefill")
    workers.kill(prefill)  # its host lost: every handoff names a pool nobody serves
    workers.start("decode", wrap=PRIVATE_SHM)
    results: dict[str, schema.Result] = {}
    try:
        async with StepwiseClient(kafka_bootstrap, topics.prefix) as client:
            async for msg in client.follow({j.id for j in jobs}, timeout_s=180):
                if isinstance(msg, schema.Result):
                    results[msg.id] = msg
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{workers.logs()}") from e
    assert {j.id for j in jobs} == set(results), workers.logs()
    assert all(r.status == "ok" for r in results.values())
    # Each read failed, each prompt was prefilled again on decode: both in its timings.
    assert all(r.timings.stages["reprefill"] > 0 for r in results.values())
    assert decode_imports(workers)[("mooncake", "reprefill")] == len(jobs)
    counts = await count_results(kafka_bootstrap, topics.prefix)
    assert all(counts[j.id] == 1 for j in jobs), counts
