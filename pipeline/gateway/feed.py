"""One Kafka consumer of the events and results topics feeding the hub.

No consumer group: the gateway reads every partition itself (each gateway replica sees every
job) from the end, so only what happens after it starts reaches its hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from pipeline import schema
from pipeline.bus import BusConfig, pacer_for
from pipeline.errors import StepwiseError
from pipeline.gateway.hub import Hub
from pipeline.topics import Topics

log = logging.getLogger(__name__)


class KafkaFeed:
    """Events and Results from Kafka into a Hub, from the moment `start()` returns."""

    def __init__(self, bus: BusConfig, topics: Topics, hub: Hub):
        self.bus = bus
        self.topics = topics
        self.hub = hub
        self.consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task | None = None
        self.num_records = 0

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bus.bootstrap_servers,
            client_id=self.bus.client_id,
            enable_auto_commit=False,
            fetch_max_wait_ms=self.bus.fetch_max_wait_ms,
        )
        await self.consumer.start()
        parts = []
        for topic in (self.topics.events, self.topics.results):
            found = self.consumer.partitions_for_topic(topic)
            if not found:
                await self.consumer._client.force_metadata_update()  # noqa: SLF001
                found = self.consumer.partitions_for_topic(topic) or {0}
            parts += [TopicPartition(topic, p) for p in found]
        self.consumer.assign(parts)
        await self.consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the end offsets now, before anyone submits through us
            await self.consumer.position(tp)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self.consumer is not None
        pacer = pacer_for(self.bus)
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            got = sum(len(r) for r in batch.values())
            pacer.apply(self.consumer, got, asyncio.get_running_loop().time())
            for tp, records in batch.items():
                for record in records:
                    self.num_records += 1
                    try:
                        self._dispatch(tp.topic, record.value)
                    except StepwiseError as exc:  # a bad record is skipped, never fatal
                        log.warning("skipping %s@%d: %s", tp, record.offset, exc)

    def _dispatch(self, topic: str, value: bytes) -> None:
        if topic == self.topics.results:
            self.hub.add_result(schema.decode(value, schema.Result))
        else:
            self.hub.add_event(schema.decode(value, schema.Event))

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.consumer is not None:
            await self.consumer.stop()
