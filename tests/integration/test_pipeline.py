"""The pipeline on a real broker and Redis: ingest, prefill and decode workers in one process.

Jobs in -> exactly one Result per job id out, Events gap-free per job, KV handed from prefill to
decode through shared memory, bad input dead-lettered while the partition keeps flowing.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
import uuid

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer

from pipeline import schema, telemetry
from pipeline.client import StepwiseClient, current_chain
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

PROBLEMS = [f"What is {a} + {b}?" for a, b in ((3, 4), (12, 7), (25, 17), (8, 9), (40, 2), (6, 6))]


@pytest_asyncio.fixture
async def stack(kafka_bootstrap, redis_url, topics, verify_worker):
    """The three workers as asyncio tasks sharing this test's topics."""
    config = stack_config(kafka_bootstrap, redis_url, topics)
    async with running_stack(config) as workers:
        yield config, workers


def job(i: int, **kw) -> schema.Job:
    params = schema.JobParams(temperature=0.7, seed=i, max_tokens=120)
    return schema.Job(
        id=f"job-{uuid.uuid4().hex[:8]}-{i}", prompt=PROBLEMS[i % 6], params=params, **kw
    )


@pytest.mark.slow
async def test_n_jobs_in_exactly_n_results_out_with_gap_free_events(stack):
    config, (ingest, prefill, decode) = stack
    jobs = [job(i) for i in range(8)]
    events, results = await run_jobs(config, jobs)
    assert set(results) == {j.id for j in jobs}
    for j in jobs:
        (result,) = results[j.id]
        assert result.status == "ok", result.error
        assert result.usage.completion_tokens > 0 and result.usage.prompt_tokens > 0
        assert result.steps and result.text
        seqs = [e.seq for e in events[j.id]]
        assert seqs == list(range(len(seqs))), seqs  # gap-free, in order, from 0
        assert events[j.id][0].kind == "accepted" and events[j.id][-1].kind == "final"
        assert current_chain(events[j.id]) == [s.text for s in result.steps]
    # The KV crossed processes' memory through shm: decode imported it, nothing re-prefilled.
    assert decode.num_reprefills == 0
    # Every stage serves /metrics with the documented names; decode's figures reflect the jobs.
    for worker in (ingest, prefill, decode):
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.metrics_port}/metrics") as r:
            text = r.read().decode()
        assert all(name in text for name in telemetry.METRIC_NAMES)
    ok = re.findall(r'^stepwise_jobs_total\{[^}]*status="ok"[^}]*\} (\S+)$', text, re.M)
    assert sum(map(float, ok)) >= len(jobs)  # one series per stop reason
    assert re.search(r"^stepwise_e2e_latency_seconds_count\{[^}]*\} [1-9]", text, re.M)


@pytest.mark.slow
async def test_kv_handed_over_by_copy_when_asked(kafka_bootstrap, redis_url, topics, verify_worker):
    """`shm` (a buffer per export; what a GPU's cuda_ipc does too) instead of the default
    in-place pool: jobs served, nothing re-prefilled. (Seeds differ per run: the same job
    again would be an answer-cache hit and never reach prefill.)"""
    for seed, transport in enumerate(("shm", "shm_pool")):
        config = stack_config(kafka_bootstrap, redis_url, topics, kv_transport=transport)
        async with running_stack(config) as (_, prefill, decode):
            params = schema.JobParams(temperature=0.7, seed=seed, max_tokens=120, verify="off")
            jobs = [
                schema.Job(id=f"{transport}-{uuid.uuid4().hex[:8]}", prompt=p, params=params)
                for p in PROBLEMS[:3]
            ]
            _, results = await run_jobs(config, jobs)
            assert decode.num_reprefills == 0
            assert type(prefill.exporter).__name__ == (
                "PinnedExporter" if transport == "shm_pool" else "BufferExporter"
            )
            assert [results[j.id][0].status for j in jobs] == ["ok"] * len(jobs)


@pytest.mark.slow
async def test_duplicate_job_ids_get_one_result(stack):
    config, (ingest, _, _) = stack
    j = job(1)
    dup = schema.encode(j)
    extra = [(j.id, dup, None), (j.id, dup, None)]  # the same job published three times
    events, results = await run_jobs(config, [j], extra=extra)
    await asyncio.sleep(1.0)  # give a wrongly duplicated Result time to show up
    async with StepwiseClient(config.kafka, config.topic_prefix) as client:
        consumer = AIOKafkaConsumer(
            client.topics.results, bootstrap_servers=config.kafka, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=2000)
            ids = [r.key.decode() for rs in batch.values() for r in rs]
        finally:
            await consumer.stop()
    assert ids.count(j.id) == 1
    assert ingest.num_duplicates == 2


@pytest.mark.slow
async def test_bad_input_is_dead_lettered_and_the_partition_keeps_flowing(stack):
    config, _ = stack
    good = job(2)
    too_long = schema.Job(id=f"long-{uuid.uuid4().hex[:6]}", prompt="1 + 1 = 2. " * 400)
    bad = [
        ("k1", b"\xc1\xff not msgpack", None),  # undecodable
        ("k2", schema.encode_json(good)[:-5], [("content-type", b"application/json")]),
        ("k3", json.dumps({"id": "bad id!", "prompt": "x"}).encode(), None),  # bad id chars
        ("k4", json.dumps({"v": 9, "id": "v9-job", "prompt": "x"}).encode(), None),
        ("k5", json.dumps({"id": "types-job", "prompt": 5}).encode(), None),  # wrong type
        ("k6", json.dumps({"id": "missing-job"}).encode(), None),  # no prompt
        ("k7", schema.encode(too_long), None),  # longer than the model's context
    ]
    events, results = await run_jobs(config, [good], extra=bad)
    assert results[good.id][0].status == "ok"

    consumer = AIOKafkaConsumer(
        f"{config.topic_prefix}dlq",
        f"{config.topic_prefix}results",
        bootstrap_servers=config.kafka,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        dead, rejected = [], {}
        deadline = asyncio.get_running_loop().time() + 20
        while len(dead) < len(bad) and asyncio.get_running_loop().time() < deadline:
            for tp, recs in (await consumer.getmany(timeout_ms=500)).items():
                for r in recs:
                    if tp.topic.endswith("dlq"):
                        dead.append(schema.decode(r.value, schema.DeadLetter))
                    else:
                        res = schema.decode(r.value, schema.Result)
                        rejected[res.id] = res
    finally:
        await consumer.stop()
    assert len(dead) == len(bad)
    codes = {d.code for d in dead}
    assert {"undecodable", "bad_id", "unsupported_version", "invalid_field"} <= codes
    assert "prompt_too_long" in codes
    for job_id in ("v9-job", "types-job", "missing-job", too_long.id):
        assert rejected[job_id].status == "rejected" and rejected[job_id].error is not None
    assert rejected[too_long.id].error.code == "prompt_too_long"


@pytest.mark.slow
async def test_a_json_job_from_librdkafka_is_served_and_read_back_with_it(stack):
    """confluent-kafka (librdkafka, a client nobody here wrote) on both ends."""
    from confluent_kafka import Consumer, Producer

    config, _ = stack
    job_id = f"rdkafka-{uuid.uuid4().hex[:8]}"
    body = {
        "id": job_id,
        "prompt": "What is 5 + 6?",
        "params": {"temperature": 0, "max_tokens": 80},
    }
    consumer = Consumer(
        {
            "bootstrap.servers": config.kafka,
            "group.id": f"rd-{job_id}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([f"{config.topic_prefix}results"])
    producer = Producer({"bootstrap.servers": config.kafka, "acks": "all"})
    producer.produce(
        f"{config.topic_prefix}jobs",
        json.dumps(body).encode(),
        key=job_id,
        headers=[("content-type", b"application/json")],
    )
    assert producer.flush(10) == 0

    def read_result():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.key() == job_id.encode():
                return msg.value()
        return None

    try:
        raw = await asyncio.to_thread(read_result)
    finally:
        consumer.close()
    assert raw is not None, "no Result within 120 s"
    result = schema.decode(raw, schema.Result)
    assert result.id == job_id and result.status == "ok" and result.text
