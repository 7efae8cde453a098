"""The acks=all producer every stage sends through."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from pipeline.bus.config import BusConfig

log = logging.getLogger(__name__)

# -- producer -------------------------------------------------------------------------------


class Producer:
    """acks=all producer; `send` returns once the broker has the record."""

    def __init__(self, config: BusConfig):
        self._p = AIOKafkaProducer(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            acks="all",
            linger_ms=config.linger_ms,
            request_timeout_ms=config.request_timeout_ms,
        )
        self._partitioner = DefaultPartitioner()  # the producer's own: keys hash alike

    async def start(self) -> None:
        await self._p.start()

    async def stop(self) -> None:
        await self._p.stop()

    async def send(
        self,
        topic: str,
        value: bytes,
        key: str | None = None,
        headers: list | None = None,
        partition: int | None = None,
    ) -> None:
        """One record, acknowledged; `partition` overrides the key's (routing to a worker)."""
        await self._p.send_and_wait(
            topic,
            value,
            key=key.encode() if key is not None else None,
            headers=headers,
            partition=partition,
        )

    async def send_later(self, topic: str, value: bytes, key: str | None = None) -> asyncio.Future:
        """Queue a record; the returned future resolves when the broker acknowledges it."""
        return await self._p.send(topic, value, key=key.encode() if key is not None else None)

    async def send_batch_later(self, topic: str, items: list[tuple]) -> list[asyncio.Future]:
        """Queue keyed (key, value) records as one batch per partition, each on the partition
        `send` would pick for its key (or the one it names), in order; the futures resolve
        when their batches are acknowledged. Many small records (a decode step's events) cost a
        fraction of one `send_later` each: no future, no accumulator lookup per record."""
        parts = sorted(await self._p.partitions_for(topic))
        by_part: dict[int, list[tuple[bytes, bytes, list]]] = {}
        # (key, value), (key, value, headers: the trace context), or (key, value, headers,
        # partition: placement's choice, None for the key's)
        for item in items:
            k = item[0].encode()
            hdrs = item[2] if len(item) > 2 else []
            part = item[3] if len(item) > 3 and item[3] in parts else None
            if part is None:
                part = self._partitioner(k, parts, parts)
            by_part.setdefault(part, []).append((k, item[1], hdrs))
        futures = []
        for part, records in by_part.items():
            batch = self._p.create_batch()
            for k, v, h in records:
                if batch.append(key=k, value=v, timestamp=None, headers=h) is not None:
                    continue
                futures.append(await self._p.send_batch(batch, topic, partition=part))
                batch = self._p.create_batch()
                if batch.append(key=k, value=v, timestamp=None, headers=h) is None:  # too big
                    futures.append(
                        await self._p.send(topic, v, key=k, partition=part, headers=h or None)
                    )
            if batch.record_count():
                futures.append(await self._p.send_batch(batch, topic, partition=part))
        return futures

    async def send_many(self, items: list[tuple]) -> None:
        """Send (topic, key, value) or (topic, key, value, headers) records together; returns
        when all are acknowledged."""
        futures = [
            await self._p.send(
                it[0], it[2], key=it[1].encode() if it[1] is not None else None,
                headers=(it[3] or None) if len(it) > 3 else None,
            )
            for it in items
        ]  # fmt: skip
        await asyncio.gather(*futures)
