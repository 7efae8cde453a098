"""Round trips through the real broker and Redis the conftest picked (env, docker, embedded)."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.local import services
from pipeline.topics import Topics

pytestmark = pytest.mark.timeout(60)
WAIT_S = 20.0  # upper bound on any single wait; the happy path takes well under a second
JSON_HEADER = ("content-type", b"application/json")


async def consume(consumer: AIOKafkaConsumer, n: int, timeout: float = WAIT_S) -> list:
    """Exactly the next `n` records (fails on a timeout, never sleeps blindly)."""
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"got {len(records)} of {n} records in {timeout:.0f}s"
        batch = await consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000))
        for tp_records in batch.values():
            records.extend(tp_records)
    assert len(records) == n, f"expected {n} records, got {len(records)}"
    return records


async def assigned_consumer(bootstrap: str, topic: str, **kw) -> AIOKafkaConsumer:
    """A group-less consumer on every partition of `topic`, from the beginning."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=services.EMBEDDED_FETCH_MAX_WAIT_MS,
        **kw,
    )
    await consumer.start()
    await consumer.topics()  # refreshes cluster metadata
    partitions = consumer.partitions_for_topic(topic)
    assert partitions, f"no partitions for {topic}"
    consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
    await consumer.seek_to_beginning()
    return consumer


@pytest.mark.asyncio
async def test_create_topics_is_idempotent(kafka_bootstrap: str, topics: Topics) -> None:
    await services.create_topics(kafka_bootstrap, topics.all(), 5)  # already there: fine
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics.all()))
    finally:
        await admin.close()
    assert {t["topic"]: len(t["partitions"]) for t in described} == dict.fromkeys(topics.all(), 3)


@pytest.mark.asyncio
async def test_keys_order_and_manual_commit(
    kafka_bootstrap: str, topics: Topics, group_options: dict
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        sent = {}
        for i in range(40):
            key = f"job-{i % 5}".encode()
            meta = await producer.send_and_wait(topics.jobs, str(i).encode(), key=key)
            sent.setdefault(key, set()).add(meta.partition)
    finally:
        await producer.stop()
    assert all(len(parts) == 1 for parts in sent.values()), "a key spread over partitions"

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(
        topics.jobs,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=services.EMBEDDED_FETCH_MAX_WAIT_MS,
        **group_options,
    )
    await consumer.start()
    try:
        records = await consume(consumer, 40)
        await consumer.commit()
        by_key: dict[bytes, list[int]] = {}
        for r in records:
            assert sent[r.key] == {r.partition}
            by_key.setdefault(r.key, []).append(int(r.value))
        assert set(by_key) == set(sent)
        for key, values in by_key.items():
            assert values == sorted(values), f"{key!r} out of order: {values}"
            assert len(values) == 8
        ends = await consumer.end_offsets(list(consumer.assignment()))
        for tp, end in ends.items():
            assert await consumer.committed(tp) == end
    finally:
        await consumer.stop()


@pytest.mark.asyncio
async def test_uncommitted_records_are_redelivered_to_the_group(
    kafka_bootstrap: str, topics: Topics, group_options: dict
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(10):  # one key: one partition, offsets 0..9
            await producer.send_and_wait(topics.handoff, str(i).encode(), key=b"job-1")
    finally:
        await producer.stop()

    group = f"g-{uuid.uuid4().hex[:8]}"

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topics.handoff,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=services.EMBEDDED_FETCH_MAX_WAIT_MS,
            **group_options,
        )

    first = member()
    await first.start()
    try:
        records = await consume(first, 10)
        done = records[3]  # work finished for offsets 0..3 only, then the worker "dies"
        await first.commit({TopicPartition(done.topic, done.partition): done.offset + 1})
    finally:
        await first.stop()

    second = member()
    await second.start()
    try:
        again = await consume(second, 6)
        assert [int(r.value) for r in again] == list(range(4, 10))
        assert [r.offset for r in again] == list(range(4, 10))
    finally:
        await second.stop()


@pytest.mark.asyncio
async def test_librdkafka_and_aiokafka_interoperate(kafka_bootstrap: str, topics: Topics) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    payloads = [{"id": f"job-{i}", "prompt": f"q{i}"} for i in range(5)]

    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for p in payloads:
        producer.produce(topics.jobs, json.dumps(p).encode(), key=p["id"], headers=[JSON_HEADER])
    assert producer.flush(WAIT_S) == 0, "librdkafka did not deliver everything"

    consumer = await assigned_consumer(kafka_bootstrap, topics.jobs)
    try:
        records = await consume(consumer, len(payloads))
    finally:
        await consumer.stop()
    got = {r.key.decode(): (json.loads(r.value), dict(r.headers)) for r in records}
    assert got == {p["id"]: (p, dict([JSON_HEADER])) for p in payloads}

    aio = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await aio.start()
    try:
        for p in payloads:
            await aio.send_and_wait(
                topics.results, json.dumps(p).encode(), key=p["id"].encode(), headers=[JSON_HEADER]
            )
    finally:
        await aio.stop()

    # Assigned, not subscribed: a librdkafka group join waits ~session.timeout/2 on tansu.
    rd = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
    try:
        rd.assign(
            [
                confluent_kafka.TopicPartition(topics.results, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(3)
            ]
        )
        back: dict = {}
        deadline = time.monotonic() + WAIT_S
        while len(back) < len(payloads) and time.monotonic() < deadline:
            msg = await asyncio.to_thread(rd.poll, 0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            back[msg.key().decode()] = (json.loads(msg.value()), dict(msg.headers()))
    finally:
        rd.close()
    assert back == {p["id"]: (p, dict([JSON_HEADER])) for p in payloads}


@pytest.mark.asyncio
async def test_produce_to_consume_latency(
    kafka_bootstrap: str, topics: Topics, record_property
) -> None:
    n = 200
    consumer = await assigned_consumer(kafka_bootstrap, topics.events)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        latencies_ms = []
        for i in range(n):  # one in flight at a time: each sample is one message's trip
            t0 = time.perf_counter()
            await producer.send_and_wait(topics.events, str(i).encode(), key=b"job-1")
            (record,) = await consume(consumer, 1)
            latencies_ms.append((time.perf_counter() - t0) * 1000)
            assert int(record.value) == i
    finally:
        await producer.stop()
        await consumer.stop()
    p50 = statistics.median(latencies_ms)
    p95 = statistics.quantiles(latencies_ms, n=20)[-1]
    record_property("produce_consume_p50_ms", round(p50, 2))
    print(f"\nproduce->consume, {n} msgs, fetch_max_wait_ms=10: p50 {p50:.2f} ms, p95 {p95:.2f} ms")


def test_redis_set_nx_with_ttl(redis_client, redis_prefix: str) -> None:
    key = redis_prefix + "job:abc:state"
    assert redis_client.set(key, b"prefill", nx=True, ex=30) is True
    assert redis_client.set(key, b"decode", nx=True, ex=30) is None  # second claim loses
    assert redis_client.get(key) == b"prefill"
    assert 0 < redis_client.ttl(key) <= 30
    assert redis_client.set(redis_prefix + "short", b"x", nx=True, px=50)
    deadline = time.monotonic() + 5
    while redis_client.exists(redis_prefix + "short"):
        assert time.monotonic() < deadline, "a 50 ms key did not expire"
        time.sleep(0.01)


@pytest.mark.asyncio
async def test_async_redis_client(aredis_client, redis_prefix: str) -> None:
    key = redis_prefix + "job:xyz"
    assert await aredis_client.set(key, b"1", nx=True, ex=10)
    assert not await aredis_client.set(key, b"2", nx=True, ex=10)


def test_embedded_redis_stops_and_frees_its_port() -> None:
    port = services.free_port()
    with services.EmbeddedRedis(port) as redis_proc:
        assert redis_proc.url == f"redis://127.0.0.1:{port}/0"
        assert redis_proc.is_ready()
    assert not redis_proc.is_running
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there any more


def test_local_services_start_only_what_env_leaves_unset(redis_url: str) -> None:
    with services.LocalServices(redis=redis_url) as local:
        assert local.redis is None and local.redis_url == redis_url
        host, port = local.bootstrap_servers.rsplit(":", 1)
        assert services.kafka_metadata_answers(host, int(port))
        text = "\n".join(local.describe())
        assert "$STEPWISE_REDIS" in text and "embedded tansu" in text
