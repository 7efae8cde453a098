"""Start-up helpers for the producer and the consume loop: retry while the broker is not ready."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)


T = TypeVar("T")


async def retry_transient(what: str, call: Callable[[], Awaitable[T]], timeout_s: float = 60) -> T:
    """`call()`, again with backoff while it fails with a retriable Kafka error (a broker still
    starting, a connection refused under a burst of clients): at start-up such an error used to
    take a worker down with it, and its jobs waited for a restart that never came."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + timeout_s, 0.2
    while True:
        try:
            return await call()
        except KafkaError as e:
            if not e.retriable or loop.time() + delay > deadline:
                raise
            log.warning("%s failed (%r); retrying in %.1f s", what, e, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, 5.0)


async def start_consumer(consumer: AIOKafkaConsumer) -> AIOKafkaConsumer:
    """`consumer`, started; on failure its connections are released (start may be retried
    with a new one)."""
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise
    return consumer
