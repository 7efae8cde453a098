"""The bus on the real broker: a paused ConsumeLoop takes records again when the stage wakes
it (without waiting out its fallback check) and stop() ends a paused loop; concurrent handlers
still see every record once; batched sends land where keyed sends do, in order."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from pipeline.bus import BusConfig, ConsumeLoop, Producer, consume
from pipeline.topics import Topics

pytestmark = pytest.mark.timeout(90)
FALLBACK_S = 600.0  # the paused check: longer than the test, so only wake() can resume it
WAIT_S = 20.0


async def until(cond, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def make_loop(
    bootstrap: str, topic: str, group_options: dict, handled: list, paused: list, **kw
) -> ConsumeLoop:
    config = BusConfig(bootstrap_servers=bootstrap)
    for name, value in group_options.items():
        setattr(config, name, value)

    async def handler(record, ack) -> None:
        await asyncio.sleep(0.01 * (record.offset % 3))  # out of order when concurrent
        handled.append(record.value)
        ack()

    async def on_poison(record, exc) -> None:  # nothing here is poison
        raise AssertionError(exc)

    return ConsumeLoop(
        config, [topic], group_id=f"g-{time.monotonic_ns()}", handler=handler,
        on_poison=on_poison, should_pause=lambda: paused[0], **kw,
    )  # fmt: skip


@pytest.mark.asyncio
async def test_a_paused_loop_resumes_on_wake(
    kafka_bootstrap: str, topics: Topics, group_options: dict, monkeypatch
) -> None:
    monkeypatch.setattr(consume, "PAUSED_CHECK_S", FALLBACK_S)
    handled: list[bytes] = []
    paused = [False]
    loop = make_loop(kafka_bootstrap, topics.jobs, group_options, handled, paused)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    await loop.start()
    run = asyncio.create_task(loop.run())
    try:
        await producer.send_and_wait(topics.jobs, b"first")
        await until(lambda: handled == [b"first"])  # the group is joined and consuming
        paused[0] = True
        await asyncio.sleep(0.3)  # the loop sees the pause and waits (for wake or FALLBACK_S)
        for i in range(3):
            await producer.send_and_wait(topics.jobs, f"r{i}".encode())
        await asyncio.sleep(1.0)
        assert handled == [b"first"]  # paused: nothing taken
        paused[0] = False
        loop.wake()
        await until(lambda: len(handled) == 4)
        assert sorted(handled[1:]) == [b"r0", b"r1", b"r2"]

        paused[0] = True
        await asyncio.sleep(0.3)
        loop.stop()  # a paused loop ends without waiting out FALLBACK_S
        await asyncio.wait_for(run, WAIT_S)
    finally:
        loop.stop()
        if not run.done():
            run.cancel()
        await loop.close()
        await producer.stop()


@pytest.mark.asyncio
async def test_concurrent_handlers_see_every_record_once_and_commit_all(
    kafka_bootstrap: str, topics: Topics, group_options: dict
) -> None:
    handled: list[bytes] = []
    loop = make_loop(
        kafka_bootstrap, topics.prefill, group_options, handled, [False], max_concurrent=8
    )
    producer = Producer(BusConfig(bootstrap_servers=kafka_bootstrap))
    await producer.start()
    await loop.start()
    run = asyncio.create_task(loop.run())
    try:
        sent = [f"c{i}".encode() for i in range(60)]
        await producer.send_many([(topics.prefill, v.decode(), v) for v in sent])
        await until(lambda: len(handled) >= len(sent))
        await asyncio.sleep(0.3)
        assert sorted(handled) == sorted(sent)  # each once, whatever the order
        await until(lambda: loop.tracker.num_in_flight() == 0)
        await loop.commit()
        assert not loop.tracker.committable()  # every offset acknowledged and committed
    finally:
        loop.stop()
        await asyncio.wait_for(run, WAIT_S)
        await loop.close()
        await producer.stop()


@pytest.mark.asyncio
async def test_batched_sends_land_on_the_keys_partitions_in_order(
    kafka_bootstrap: str, topics: Topics
) -> None:
    producer = Producer(BusConfig(bootstrap_servers=kafka_bootstrap))
    await producer.start()
    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await raw.start()
    try:
        keys = [f"job-{i}" for i in range(12)]
        items = [(k, f"{k}:{n}".encode()) for n in range(5) for k in keys]
        futures = await producer.send_batch_later(topics.events, items)
        done = await asyncio.gather(*futures)
        assert all(meta.partition >= 0 for meta in done)
        # Where a plain keyed send puts each key (the default partitioner).
        expected = {
            k: (await raw.send_and_wait(topics.events, b"probe", key=k.encode())).partition
            for k in keys
        }
    finally:
        await raw.stop()
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topics.events, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False, fetch_max_wait_ms=BusConfig("x").fetch_max_wait_ms,
    )  # fmt: skip
    await consumer.start()
    try:
        got: dict[str, list[tuple[int, bytes]]] = {}
        deadline = time.monotonic() + WAIT_S
        while sum(len(v) for v in got.values()) < len(items) + len(keys):
            assert time.monotonic() < deadline, "timed out"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for r in records:
                    got.setdefault(r.key.decode(), []).append((r.partition, r.value))
    finally:
        await consumer.stop()
    for k in keys:
        assert {p for p, _ in got[k]} == {expected[k]}, k
        values = [v for _, v in got[k] if v != b"probe"]
        assert values == [f"{k}:{n}".encode() for n in range(5)]  # in order
