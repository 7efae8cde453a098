"""Kafka wiring (aiokafka): one at-least-once consume loop for every stage.

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

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

from pipeline.bus.config import BusConfig, pacer_for
from pipeline.bus.offsets import OffsetTracker
from pipeline.bus.retry import start_consumer

log = logging.getLogger(__name__)

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
