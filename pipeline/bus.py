"""Kafka wiring (aiokafka): producer with acks=all, and one at-least-once consume loop.

Every stage consumes through `ConsumeLoop`: a record's offset is committed only after the
stage has acknowledged it, which it does only after its own outputs were acknowledged by the
broker. Work may finish out of order (decode finishes short jobs before long ones), so the
`OffsetTracker` commits per partition only up to the lowest offset still in flight. A record
that the stage cannot handle is passed to `on_poison` (which dead-letters it) and acknowledged:
poison never blocks a partition. Backpressure pauses fetching instead of buffering, and
`stop()` drains: no more fetching, in-flight work finishes, offsets are committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from pipeline.fetch_pacing import FetchPacer

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


@dataclass(slots=True)
class BusConfig:
    """How a worker talks to Kafka."""

    bootstrap_servers: str
    client_id: str = "stepwise"
    # The embedded broker (Tansu) answers a fetch only when this wait expires, even when data
    # is there, so it bounds a hop's latency: 4 ms gave p50 hops under 5 ms (10 ms: ~7.5 ms).
    fetch_max_wait_ms: int = 4
    # After this long with no record a consumer waits `idle_fetch_wait_ms` per fetch instead
    # (fetch_pacing.py): an idle stack stops polling the broker 250 times a second.
    idle_fetch_wait_ms: int = 100
    idle_after_s: float = 2.0
    max_poll_records: int = 64
    request_timeout_ms: int = 30_000
    session_timeout_ms: int = 6_000  # Apache Kafka's minimum; Tansu gets shorter (services.py)
    heartbeat_interval_ms: int = 1_000
    linger_ms: int = 0


def pacer_for(config: BusConfig) -> FetchPacer:
    return FetchPacer(config.fetch_max_wait_ms, config.idle_fetch_wait_ms, config.idle_after_s)


# -- offsets (pure) -------------------------------------------------------------------------


@dataclass(slots=True)
class _PartitionState:
    in_flight: set[int] = field(default_factory=set)
    next_offset: int = -1  # one past the highest offset fetched
    committed: int = -1  # last offset value we committed (next record to read)


class OffsetTracker:
    """Per-partition in-flight offsets; what is safe to commit when work ends out of order."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}

    def start(self, tp: TopicPartition, offset: int) -> None:
        st = self._parts.setdefault(tp, _PartitionState())
        st.in_flight.add(offset)
        st.next_offset = max(st.next_offset, offset + 1)

    def done(self, tp: TopicPartition, offset: int) -> None:
        st = self._parts.get(tp)
        if st is not None:  # the partition may have been revoked meanwhile
            st.in_flight.discard(offset)

    def num_in_flight(self, tp: TopicPartition | None = None) -> int:
        if tp is not None:
            st = self._parts.get(tp)
            return len(st.in_flight) if st else 0
        return sum(len(st.in_flight) for st in self._parts.values())

    def committable(self) -> dict[TopicPartition, int]:
        """{partition: offset to commit} where the low watermark moved since the last commit."""
        out = {}
        for tp, st in self._parts.items():
            if st.next_offset < 0:
                continue
            low = min(st.in_flight) if st.in_flight else st.next_offset
            if low > st.committed:
                out[tp] = low
        return out

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, off in offsets.items():
            if tp in self._parts:
                self._parts[tp].committed = off

    def drop(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self._parts.pop(tp, None)


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

    async def send_batch_later(
        self, topic: str, items: list[tuple[str, bytes]]
    ) -> list[asyncio.Future]:
        """Queue keyed (key, value) records as one batch per partition, each on the partition
        `send` would pick for its key, in order; the futures resolve when their batches are
        acknowledged. Many small records (a decode step's events) cost a fraction of one
        `send_later` each: no future, no accumulator lookup per record."""
        parts = sorted(await self._p.partitions_for(topic))
        by_part: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, value in items:
            k = key.encode()
            by_part.setdefault(self._partitioner(k, parts, parts), []).append((k, value))
        futures = []
        for part, records in by_part.items():
            batch = self._p.create_batch()
            for k, v in records:
                if batch.append(key=k, value=v, timestamp=None) is not None:
                    continue
                futures.append(await self._p.send_batch(batch, topic, partition=part))
                batch = self._p.create_batch()
                if batch.append(key=k, value=v, timestamp=None) is None:  # over a batch alone
                    futures.append(await self._p.send(topic, v, key=k, partition=part))
            if batch.record_count():
                futures.append(await self._p.send_batch(batch, topic, partition=part))
        return futures

    async def send_many(self, items: list[tuple[str, str | None, bytes]]) -> None:
        """Send (topic, key, value) records together; returns when all are acknowledged."""
        futures = [
            await self._p.send(t, v, key=k.encode() if k is not None else None) for t, k, v in items
        ]
        await asyncio.gather(*futures)


# -- the consume loop -----------------------------------------------------------------------

Ack = Callable[[], None]
Handler = Callable[[ConsumerRecord, Ack], Awaitable[None]]
PoisonHandler = Callable[[ConsumerRecord, BaseException], Awaitable[None]]


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, loop: ConsumeLoop):
        self.loop = loop

    async def on_partitions_revoked(self, revoked):
        # Commit what is done before someone else owns these partitions; in-flight records
        # will be redelivered to the new owner (duplicates are harmless: stages are idempotent).
        await self.loop.commit()
        self.loop.tracker.drop(set(revoked))

    async def on_partitions_assigned(self, assigned):
        return None


PAUSED_CHECK_S = 0.05  # a paused loop's check of should_pause() when nobody wakes it


class ConsumeLoop:
    """At-least-once consumption for one stage.

    `handler(record, ack)` must call `ack()` once the record's outputs are acknowledged; it may
    do so later (decode acks when the job's Result is out). `should_pause()` is polled: while
    it is true, fetching pauses (backpressure). A paused loop checks again when `wake()` is
    called (a stage that frees capacity says so) or after PAUSED_CHECK_S.
    """

    def __init__(
        self,
        config: BusConfig,
        topics: list[str],
        group_id: str,
        handler: Handler,
        on_poison: PoisonHandler,
        should_pause: Callable[[], bool] = lambda: False,
        max_in_flight: int = 256,
        commit_interval_s: float = 0.05,
        max_concurrent: int = 1,
    ):
        self.config = config
        self.topics = topics
        self.group_id = group_id
        self.handler = handler
        self.on_poison = on_poison
        self.should_pause = should_pause
        self.max_in_flight = max_in_flight
        self.commit_interval_s = commit_interval_s
        self.tracker = OffsetTracker()
        self.consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        # Handlers running at once: 1 awaits each record's handler before the next; more runs
        # them as tasks (a stage whose handler waits on round trips, as ingest's does).
        self.max_concurrent = max_concurrent
        self._slots = asyncio.Semaphore(max_concurrent)
        self._handlers: set[asyncio.Task] = set()
        self._failure: BaseException | None = None
        self._paused = False
        self.num_records = 0
        self.num_poison = 0
        self.pacer = pacer_for(config)

    async def start(self) -> None:
        c = self.config
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=c.bootstrap_servers,
            client_id=c.client_id,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=c.fetch_max_wait_ms,
            max_poll_records=c.max_poll_records,
            request_timeout_ms=c.request_timeout_ms,
            session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms,
        )
        try:
            await start_consumer(self.consumer)
        except BaseException:
            self.consumer = None
            raise
        self.consumer.subscribe(self.topics, listener=_Rebalance(self))

    async def lag(self) -> int:
        """Records on the assigned partitions not yet fetched (high watermark - position)."""
        if self.consumer is None:
            return 0
        total = 0
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            if high is None:
                continue
            with contextlib.suppress(Exception):  # an unassigned or resetting partition
                total += max(0, high - await self.consumer.position(tp))
        return total

    async def commit(self) -> None:
        offsets = self.tracker.committable()
        if not offsets or self.consumer is None:
            return
        try:
            await self.consumer.commit(offsets)
            self.tracker.mark_committed(offsets)
        except Exception as e:  # a rebalance in progress: the next commit retries
            log.warning("commit failed (%s); will retry", e)

    def _ack_for(self, record: ConsumerRecord) -> Ack:
        tp = TopicPartition(record.topic, record.partition)
        done = False

        def ack() -> None:
            nonlocal done
            if not done:
                done = True
                self.tracker.done(tp, record.offset)

        return ack

    async def _dispatch(self, record: ConsumerRecord) -> None:
        ack = self._ack_for(record)
        self.num_records += 1
        try:
            await self.handler(record, ack)
        except Exception as e:  # poison: dead-letter it and move on
            self.num_poison += 1
            log.warning(
                "poison record %s:%d@%d: %r", record.topic, record.partition, record.offset, e
            )
            try:
                await self.on_poison(record, e)
            finally:
                ack()

    def _set_paused(self, paused: bool) -> None:
        assert self.consumer is not None
        if paused == self._paused:
            return
        parts = self.consumer.assignment()
        if paused:
            self.consumer.pause(*parts)
        else:
            self.consumer.resume(*parts)
        self._paused = paused

    async def run(self) -> None:
        """Fetch and dispatch until stop(); then drain in-flight work and commit."""
        if self.consumer is None:
            await self.start()
        assert self.consumer is not None
        last_commit = asyncio.get_running_loop().time()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                self._set_paused(
                    self.should_pause() or self.tracker.num_in_flight() >= self.max_in_flight
                )
                if self._paused:
                    # Not an empty 50 ms poll: a decode slot that frees is refilled within a
                    # step, not after tens of milliseconds.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(PAUSED_CHECK_S):
                            await self._wake.wait()
                    batch = {}
                else:
                    batch = await self.consumer.getmany(
                        timeout_ms=50, max_records=self.config.max_poll_records
                    )
                # Paused is busy: the wait stays short for when fetching resumes.
                got = sum(len(r) for r in batch.values()) or int(self._paused)
                self.pacer.apply(self.consumer, got, asyncio.get_running_loop().time())
                for tp, records in batch.items():
                    for record in records:
                        self.tracker.start(tp, record.offset)
                        if self.max_concurrent == 1:
                            await self._dispatch(record)
                            continue
                        await self._slots.acquire()
                        task = asyncio.create_task(self._dispatch(record))
                        self._handlers.add(task)
                        task.add_done_callback(self._handler_done)
                if self._failure is not None:  # as a sequential handler's error would
                    raise self._failure
                now = asyncio.get_running_loop().time()
                if now - last_commit >= self.commit_interval_s:
                    await self.commit()
                    last_commit = now
        finally:
            await self.commit()

    def _handler_done(self, task: asyncio.Task) -> None:
        self._handlers.discard(task)
        self._slots.release()
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._failure = self._failure or exc  # dead-lettering itself failed: stop here

    def wake(self) -> None:
        """Capacity was freed: a paused loop checks `should_pause()` now."""
        self._wake.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until no record is in flight (or the timeout); True if fully drained."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.tracker.num_in_flight():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def close(self) -> None:
        for task in list(self._handlers):  # past the drain: their records are redelivered
            task.cancel()
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.commit()
            await self.consumer.stop()
            self.consumer = None
