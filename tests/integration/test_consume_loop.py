"""ConsumeLoop backpressure on the real broker: a paused loop takes records again when the
stage wakes it, without waiting out its fallback check, and stop() ends a paused loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer

from pipeline import bus
from pipeline.bus import BusConfig, ConsumeLoop
from pipeline.topics import Topics

pytestmark = pytest.mark.timeout(90)
FALLBACK_S = 600.0  # the paused check: longer than the test, so only wake() can resume it
WAIT_S = 20.0


async def until(cond, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def make_loop(bootstrap: str, topic: str, group_options: dict, handled: list, paused: list):
    config = BusConfig(bootstrap_servers=bootstrap)
    for name, value in group_options.items():
        setattr(config, name, value)

    async def handler(record, ack) -> None:
        handled.append(record.value)
        ack()

    async def on_poison(record, exc) -> None:  # nothing here is poison
        raise AssertionError(exc)

    return ConsumeLoop(
        config, [topic], group_id=f"g-{time.monotonic_ns()}", handler=handler,
        on_poison=on_poison, should_pause=lambda: paused[0],
    )  # fmt: skip


@pytest.mark.asyncio
async def test_a_paused_loop_resumes_on_wake(
    kafka_bootstrap: str, topics: Topics, group_options: dict, monkeypatch
) -> None:
    monkeypatch.setattr(bus, "PAUSED_CHECK_S", FALLBACK_S)
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
