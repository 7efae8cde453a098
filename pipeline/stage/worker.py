"""The shell every stage worker shares: Kafka in and out, Redis, dead letters, drain on SIGTERM.

No engine here (the stages that own one, prefill and decode, build on
pipeline/stage/engine_worker.py), so the control plane (ingest, budget) starts without torch.
A stage subclasses `StageWorker`, says which topic it reads (`input_stage`), and implements
`handle(record, ack)`; the base owns the consume loop (pipeline/bus/), the producer, the
Redis client, the dead-letter path, and the shutdown order: stop fetching, let in-flight work
finish (or hand it back by not committing it), commit, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable

import msgspec
from aiokafka import ConsumerRecord
from redis.asyncio import Redis

from pipeline import schema, telemetry
from pipeline.budget import SLO_CLASSES, BudgetReader
from pipeline.bus import Ack, BusConfig, ConsumeLoop, Producer, retry_transient
from pipeline.bus.broker import group_options_for
from pipeline.config import PipelineConfig, runtime
from pipeline.errors import StepwiseError
from pipeline.stage.jobstate import JobState
from pipeline.stage.processes import release
from pipeline.stage.transient import TRANSIENT_RETRY_S, Backoff, is_transient
from pipeline.telemetry import gcstats
from pipeline.topics import Topics
from pipeline.tracing import setup as tracing_setup

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class StageWorker(ABC):
    stage = "stage"
    input_stage = "jobs"
    # Records whose handlers run at once (ConsumeLoop.max_concurrent): 1 keeps them in order.
    max_concurrent_records = 1

    def __init__(self, config: PipelineConfig):
        if not config.kafka or not config.redis:
            raise StepwiseError(
                "no Kafka/Redis given: set STEPWISE_KAFKA and STEPWISE_REDIS, or use `stepwise up`",
                code="no_services",
            )
        self.config = config
        self.worker_id = config.worker_id or f"{self.stage}-{socket.gethostname()}-{os.getpid()}"
        self.topics = Topics(config.topic_prefix)
        self.bus_config = BusConfig(bootstrap_servers=config.kafka, client_id=self.worker_id)
        self.producer = Producer(self.bus_config)
        self.redis = Redis.from_url(config.redis)
        self.state = JobState(
            self.redis, prefix=f"{config.topic_prefix}state:", ttl_s=config.job_state_ttl_s
        )
        self.loop: ConsumeLoop | None = None
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()  # set once it consumes (after setup)
        self._tasks: list[asyncio.Task] = []
        # Set before the background tasks are cancelled; their loops also check it, so a
        # cancellation that a library swallows (seen: prefill's loop went on, and its
        # worker's stop waited on it forever) still ends them within one turn.
        self.halting = False
        self.failure: StepwiseError | None = None  # set by fail(): run() raises it at the end

    # -- for subclasses ---------------------------------------------------------------------

    async def setup(self) -> None:
        """Load models, start background tasks (append them to self._tasks)."""
        return None  # optional hook

    @abstractmethod
    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        """Process one input record; call `ack()` once its outputs are acknowledged. It may
        run again for the same record after a transient error (`handle_retrying`)."""

    async def handle_retrying(self, record: ConsumerRecord, ack: Ack) -> None:
        """`handle`, again with backoff while it fails on infrastructure that comes back (Redis
        restarting, the broker away): such an error used to dead-letter a good job as
        `rejected`. Past TRANSIENT_RETRY_S it is the job's error after all (dead-lettered, an
        error Result). A worker told to stop gives up at once without acking: the record is
        redelivered to the group's next member."""
        running = asyncio.get_running_loop()
        deadline, backoff = running.time() + TRANSIENT_RETRY_S, Backoff()
        while True:
            try:
                return await self.handle(record, ack)
            except Exception as e:
                delay = backoff.next()
                if not is_transient(e) or running.time() + delay > deadline:
                    raise
                if self._stop.is_set():
                    return
                log.warning(
                    "%s: %s:%d@%d hit %r; retrying in %.1f s", self.worker_id,
                    record.topic, record.partition, record.offset, e, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)

    def should_pause(self) -> bool:
        return False

    def wake_consumer(self) -> None:
        """Capacity freed: a paused consume loop looks at should_pause() again now."""
        if (loop := getattr(self, "loop", None)) is not None:
            loop.wake()

    async def teardown(self) -> None:
        """Release what setup() took (after the consume loop has drained)."""
        return None  # optional hook

    # -- outputs ----------------------------------------------------------------------------

    async def publish(self, stage: str, key: str, msg: object) -> None:
        await self.producer.send(self.topics.name(stage), schema.encode(msg), key=key)

    async def publish_result(self, result: schema.Result, reply_topic: str | None = None) -> None:
        await self.publish_results([(result, reply_topic)])

    async def publish_results(self, results: list[tuple[schema.Result, str | None]]) -> None:
        """Results (each also to its job's reply topic, if it has one), acknowledged together."""
        items = []
        for result, reply_topic in results:
            data = schema.encode(result)
            items.append((self.topics.results, result.id, data))
            if reply_topic and reply_topic != self.topics.results:
                items.append((reply_topic, result.id, data))
        await self.producer.send_many(items)

    async def on_poison(self, record: ConsumerRecord, exc: BaseException) -> None:
        """Dead-letter a record this stage cannot use; reject its job if the id is readable. An
        outage that outlasted the retries (`handle_retrying`) is no fault of the job's: its
        Result is an `error` with code `unavailable` (worth sending again), not `rejected`."""
        outage = is_transient(exc)
        if isinstance(exc, StepwiseError):
            err = exc
        elif outage:
            why = f"{type(exc).__name__}: {exc}"
            err = StepwiseError(f"infrastructure unavailable: {why}", code="unavailable")
        else:
            err = StepwiseError(repr(exc))
        dl = schema.dead_letter(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            payload=record.value or b"",
            error=err,
            stage=self.stage,
        )
        await self.publish("dlq", dl.job_id or "", dl)
        job_id = getattr(err, "job_id", None) or schema.peek_job_id(
            record.value or b"", schema.content_type_of(record.headers)
        )
        if job_id:
            result = schema.rejected_result(job_id, err)
            if outage:
                result = msgspec.structs.replace(result, status="error")
            await self.publish_result(result)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def fail(self, reason: str) -> None:
        """Something the worker cannot go on without is gone (decode's engine process): stop
        without waiting for a drain (in-flight records are redelivered), and exit non-zero."""
        log.error("%s: %s; stopping", self.worker_id, reason)
        self.failure = StepwiseError(reason, code="worker_failed")
        self._stop.set()

    async def report_metrics(self) -> None:
        """Gauges a stage refreshes about once a second (decode adds its KV pool and batch).
        The lag also goes to Redis, where the budget controller sums it."""
        if self.loop is not None:
            lag = await self.loop.lag()
            telemetry.set_lag(self.stage, lag)
            key = f"{self.config.topic_prefix}lag:{self.stage}:{self.worker_id}"
            await self.redis.set(key, lag, ex=5)

    def start_budget_reader(self) -> BudgetReader:
        """Live budget limits from Redis, refreshed in the background; `cached()` is free."""
        reader = BudgetReader(self.redis, self.config.topic_prefix, refresh_s=1.0)

        async def refresh() -> None:
            while not self.halting:
                for slo_class in SLO_CLASSES:
                    with contextlib.suppress(Exception):  # Redis away: keep the last limits
                        await reader.get(slo_class)
                await asyncio.sleep(1.0)

        self._tasks.append(asyncio.create_task(refresh()))
        return reader

    async def _metrics_loop(self) -> None:
        while not self.halting:
            with contextlib.suppress(Exception):  # metrics never take a worker down
                await self.report_metrics()
            await asyncio.sleep(1.0)

    async def run(self, install_signals: bool = False, freeze_gc: bool = False) -> None:
        """Set up, consume until stopped, drain, tear down. `install_signals`: SIGTERM / SIGINT
        stop it. `freeze_gc`: this worker owns its process (`stepwise worker`), so what setup
        made is frozen out of the collector; not for workers sharing a process (tests), where
        frozen garbage from earlier work would never be collected."""
        self.metrics_port = telemetry.serve_metrics(self.stage, self.config.model)
        tracing_setup.init_from_settings(self.stage)
        watchdog: asyncio.Task | None = None
        await retry_transient("starting the producer", self.producer.start)
        try:
            options = await retry_transient(
                "asking the broker", lambda: group_options_for(self.config.kafka)
            )
            for name, value in options.items():
                setattr(self.bus_config, name, value)
            try:
                await self.setup()
            except BaseException:
                log.exception("%s could not start", self.worker_id)
                raise
            # What setup loaded (model, tokenizer, clients) lives as long as the worker: out
            # of the collector's sight, so a full collection no longer walks it (gcstats.py).
            if freeze_gc and runtime().gc_freeze:
                frozen = gcstats.freeze()
                log.info("%s: %d objects frozen out of the collector", self.worker_id, frozen)
            self.gc_stats = gcstats.GCStats().install()
            self.loop = ConsumeLoop(
                self.bus_config,
                [self.topics.name(self.input_stage)],
                group_id=f"{self.config.topic_prefix}{self.stage}",
                handler=self.handle_retrying,
                on_poison=self.on_poison,
                should_pause=self.should_pause,
                max_concurrent=self.max_concurrent_records,
            )
            await retry_transient("starting the consumer", self.loop.start)
            if install_signals:
                running = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    running.add_signal_handler(sig, self.stop)
            consume = asyncio.create_task(self.loop.run())
            self._tasks.append(asyncio.create_task(self._metrics_loop()))
            log.info("%s ready: %s -> %s", self.worker_id, self.input_stage, self.stage)
            self.ready.set()
            await self._until_stopped(consume)
            # Drain: stop fetching, finish in-flight work, commit what finished.
            log.info("%s stopping: draining in-flight work", self.worker_id)
            watchdog = asyncio.create_task(self._shutdown_watchdog())
            self.loop.stop()
            if self.failure is None:
                await consume
            else:  # a consume loop that died has said why (_until_stopped)
                await asyncio.gather(consume, return_exceptions=True)
            drained = await self.loop.drain(0 if self.failure else self.config.drain_timeout_s)
            if not drained and self.failure is None:
                log.warning(
                    "%s: drain timed out; unfinished records will be redelivered", self.worker_id
                )
            await self.loop.commit()
        finally:
            self.halting = True
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            log.info("%s: releasing its resources", self.worker_id)
            await self._release("teardown", self.teardown())
            if self.loop is not None:
                await self._release("the consumer", self.loop.close())
            await self._release("the producer", self.producer.stop())
            await self._release("redis", self.redis.aclose())
            if watchdog is not None:
                watchdog.cancel()
            if (gc_stats := getattr(self, "gc_stats", None)) is not None:
                gc_stats.uninstall()
                log.info("%s gc: %s", self.worker_id, gc_stats.as_dict())
            log.info("%s stopped", self.worker_id)
        if self.failure is not None:
            raise self.failure

    async def _release(self, what: str, step: Awaitable[object]) -> None:
        await release(self.worker_id, what, step)

    async def _until_stopped(self, consume: asyncio.Task) -> None:
        """Wait for stop(); a consume loop or background task that dies first fails the
        worker. Before, such a task died unseen (prefill's loop on a Redis error) and the
        worker went on holding its partitions with nothing taking its records: its jobs hung
        until someone restarted it. Now it exits non-zero, and its records are redelivered."""
        stopping = asyncio.create_task(self._stop.wait())
        watched = {stopping, consume, *self._tasks}
        while not self._stop.is_set():
            done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopping}:
                if not task.cancelled() and (exc := task.exception()) is not None:
                    log.error("%s: a task died", self.worker_id, exc_info=exc)
                    self.fail(f"{task.get_name()} died: {exc!r}")
        stopping.cancel()

    async def _shutdown_watchdog(self) -> None:
        """A shutdown that outlives the drain by far logs where every task and thread waits:
        whoever kills the process next then knows what hung."""
        await asyncio.sleep(self.config.drain_timeout_s + 10)
        lines = [f"{self.worker_id}: still stopping; where it waits:"]
        for task in asyncio.all_tasks():
            for where in awaiting(task):
                lines.append(f"  {task.get_name()}: {where}")
        log.warning("\n".join(lines))
        faulthandler.dump_traceback(all_threads=True)  # the threads (the engine's), to stderr


def awaiting(task: asyncio.Task, limit: int = 12) -> list[str]:
    """Where a task waits: its coroutine and every coroutine it awaits, outermost first
    (`Task.get_stack` stops at the outermost, which says little: `serve`, `run`)."""
    found = []
    coro = task.get_coro()
    while coro is not None and len(found) < limit:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            found.append(f"{code.co_filename}:{frame.f_lineno} {code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found
