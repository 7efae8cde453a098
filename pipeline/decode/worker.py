"""`stepwise worker decode`: handoff -> (import KV, continuous batching) -> events, results.

The worker is decode's I/O side; its engine core (`core.py`) runs in a process of its
own by default (`core_serve.py`, `STEPWISE_DECODE_CORE=process`) or on a thread of the worker
(`thread`). Handoffs and verdicts go to the core; each engine step comes back as a Tick (events,
finished Results, KV buffers to ack, steps to verify, steps to cache), which this side publishes
in order. Steps go to Celery verify workers; their verdicts come back on this worker's own Redis
stream. A handoff's offset is acknowledged only after its Result is acknowledged by the broker,
so a crashed decode worker's jobs are redelivered and redone (a decode request can be re-driven
anywhere; unlike prefill, it holds no buffer another process waits on). A core that dies takes
the worker down with it, for the same redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor

import msgspec
from aiokafka import ConsumerRecord

from pipeline import schema, telemetry
from pipeline.budget import SLO_CLASSES, BudgetReader, DecodeReport
from pipeline.budget.state import publish_report
from pipeline.bus import Ack
from pipeline.cache import Cache, CacheConfig, Scope
from pipeline.decode.core_client import CoreClient, make_core
from pipeline.decode.job_trace import JobTrace
from pipeline.decode.messages import Inward, Tick
from pipeline.stage.engine_worker import EngineStageWorker
from pipeline.stage.placement import DecodeLoad, publish_load, withdraw_load
from pipeline.stage.worker import now_ms
from pipeline.tracing import spans
from pipeline.verify import tasks

log = logging.getLogger(__name__)


class DecodeWorker(EngineStageWorker):
    stage = "decode"
    input_stage = "handoff"

    async def setup(self) -> None:
        self.jobs: dict[str, tuple[schema.Handoff, Ack]] = {}  # sent to the core, not done
        self.traces: dict[str, JobTrace] = {}  # each running traced job's spans
        self.num_finishing = 0  # of those, jobs whose Result is made but not yet delivered
        self.num_runs = 0  # jobs in the engine (the core's last word)
        self.load_report: DecodeReport | None = None  # the core's latest, for the controller
        self.num_reprefills = 0  # handoffs whose KV could not be imported (the core's count)
        self.kv_used = 0
        self._unacked: list[asyncio.Future] = []  # event sends not yet acknowledged
        self.outbox: asyncio.Queue[Tick] = asyncio.Queue()
        self.verdict_stream = f"{self.config.topic_prefix}verdicts:{self.worker_id}"
        self.cache = Cache(self.redis, CacheConfig(key_prefix=self.config.topic_prefix))
        self.budgets = self.start_budget_reader()
        self.core: CoreClient = make_core(self, self.verdict_stream, self._on_tick, self.fail)
        await self.core.start()
        # Celery's producer does blocking I/O: it gets a thread of its own.
        self.celery = tasks.make_app(self.config.redis)
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode-verify")
        self._tasks.append(asyncio.create_task(self._publish_loop()))
        self._tasks.append(asyncio.create_task(self._verdict_loop()))
        self._tasks.append(asyncio.create_task(self._budget_loop(self.budgets)))

    async def teardown(self) -> None:
        # setup() may have failed part-way (the engine, say): release only what it took, so
        # the original error is what the operator sees, not an AttributeError from here.
        if (core := getattr(self, "core", None)) is not None:
            await core.close()  # after the drain: the core logs its engine's totals
        if (sender := getattr(self, "sender", None)) is not None:
            sender.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):  # no more handoffs placed here
            await withdraw_load(self.redis, self.config.topic_prefix, self.worker_id)
        if (stream := getattr(self, "verdict_stream", None)) is not None:
            # Bounded: a bench's shutdown once hung in this teardown, right after the verdict
            # reader's blocking XREAD on this client was cancelled (the likely wait), and the
            # engine's totals after it were never logged.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self.redis.delete(stream)
        await super().teardown()

    async def report_metrics(self) -> None:
        """Also the placement heartbeat: which handoff partitions this worker holds and how
        much room it has (pipeline/stage/placement.py)."""
        await super().report_metrics()
        total = self.core.kv_total
        if total:  # vLLM's pool lives in its server (its own /metrics shows it)
            telemetry.set_kv_usage(self.kv_used, total)
        telemetry.set_inflight(self.num_runs)
        if self.loop is not None and self.loop.consumer is not None:
            parts = tuple(sorted(tp.partition for tp in self.loop.consumer.assignment()))
            kv_free = 1.0 - self.kv_used / total if total else 1.0
            # Slots free in its running batch: a job placed beyond it waits behind the batch
            # here while another worker may have slots idle.
            free = self.config.max_decode_seqs - (len(self.jobs) - self.num_finishing)
            free = free if self.room() > 0 else min(free, -1)  # paused: a last resort
            load = DecodeLoad(self.worker_id, parts, free, kv_free, now_ms())
            await publish_load(self.redis, self.config.topic_prefix, load)
        if self.load_report is not None:  # the budget controller's signals
            report = msgspec.structs.replace(self.load_report, worker=self.worker_id)
            await publish_report(self.redis, self.config.topic_prefix, report)
            telemetry.set_decode_pace(report.pace_tok_s, report.running, report.capacity)

    def room(self) -> int:
        """Handoffs this worker takes before it pauses its partitions (what placement reads).
        A few past the running batch wait in the engine's queue, KV imported: a sequence that
        finishes is replaced in the next step, not after a fetch round trip."""
        total = self.core.kv_total
        if total > 0 and self.kv_used > 0.9 * total:
            return 0
        prefetch = max(4, self.config.max_decode_seqs // 4)
        return max(
            0, self.config.max_decode_seqs + prefetch - (len(self.jobs) - self.num_finishing)
        )

    def should_pause(self) -> bool:
        return self.room() == 0

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        handoff = schema.decode(record.value or b"", schema.Handoff)
        if (running := self.jobs.get(handoff.id)) is not None:
            # Delivered again while it runs here (a rebalance handed the partition back, or a
            # placed handoff sent twice): the job's end acks this copy instead, so the offset
            # is never committed past a job still running (a crash then would lose it).
            self.jobs[handoff.id] = (running[0], ack)
            running[1]()
            return
        if await self.state.is_done(handoff.id):
            ack()  # its Result is out (a redelivery)
            return
        self.jobs[handoff.id] = (handoff, ack)
        span = spans.start_job_span("decode", handoff.id, record.headers)
        traced = span.is_recording()
        if traced:
            self.traces[handoff.id] = JobTrace(span)
        self.core.submit(Inward(handoffs=[handoff], traced=[handoff.id] if traced else []))

    def _on_tick(self, tick: Tick) -> None:
        """Event loop: a Tick from the core, to the publisher (its telemetry applied now)."""
        st = tick.stats
        self.num_runs, self.kv_used, self.num_reprefills = (
            st.num_runs,
            st.kv_used,
            st.num_reprefills,
        )
        telemetry.add_generated_tokens(st.generated_tokens)
        telemetry.add_forwards(
            st.forwards, st.spec_drafts, st.spec_draft_tokens, st.spec_accepted_tokens
        )
        for n in st.step_tokens:
            telemetry.observe_step(n)
        for _ in range(st.step_hits):
            telemetry.cache_hit("step", "l2")
        for _ in range(st.step_misses):
            telemetry.cache_miss("step")
        for transport, outcome, seconds in st.kv_imports:
            telemetry.observe_kv_import(transport, outcome, seconds)
        if tick.report is not None:
            self.load_report = tick.report
        for mark in tick.marks:  # before the tick's checks go out: they join their steps' spans
            if (trace := self.traces.get(mark.id)) is not None:
                trace.apply(mark)
        self.outbox.put_nowait(tick)
        if tick.results:  # jobs finished: room for more handoffs
            self.num_finishing += len(tick.results)
            self.wake_consumer()

    async def _budget_loop(self, reader: BudgetReader) -> None:
        """The live limits (refreshed from Redis by the reader) to the core, when they change."""
        sent: dict[str, schema.Budget] | None = None
        while not self.halting:
            live = {c: b for c in SLO_CLASSES if (b := reader.cached(c)) is not None}
            if live != sent:
                self.core.submit(Inward(budgets=live))
                sent = live
            await asyncio.sleep(0.5)

    async def _publish_loop(self) -> None:
        while not self.halting:
            tick = await self.outbox.get()
            delay = 0.1
            done: set[str] = set()  # what of this tick went out: a retry does not repeat it
            while not self.halting:
                try:
                    await self._publish_tick(tick, done)
                    self.core.submit(Inward(credits=1))
                    break
                except Exception:  # broker or Redis trouble: retry what did not go out
                    log.exception("publishing failed; retrying in %.1fs", delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)

    async def _verdict_loop(self) -> None:
        """Verdicts from verify workers (this worker's stream) -> the core."""
        last = "$"
        while not self.halting:
            try:
                got = await self.redis.xread({self.verdict_stream: last}, count=512, block=100)
            except Exception:  # Redis trouble: the verdict timeout keeps jobs moving meanwhile
                log.exception("reading verdicts failed; retrying")
                await asyncio.sleep(0.5)
                continue
            verdicts = []
            for _, entries in got or ():
                for entry_id, fields in entries:
                    last = entry_id
                    try:
                        verdicts.append(schema.decode(fields[b"v"], schema.VerdictMessage))
                    except (KeyError, schema.SchemaError) as e:
                        log.warning("ignoring a bad verdict %s: %s", entry_id, e)
            if verdicts:
                self.core.submit(Inward(verdicts=verdicts))

    def _send_checks(self, checks: list[schema.VerifyRequest]) -> None:
        for req in checks:
            trace = self.traces.get(req.id)  # each check joins its step's span
            headers = spans.headers_of(trace.parent_of_check(req.step)) if trace else None
            tasks.send(req, self.celery, headers)

    async def _publish_tick(self, tick: Tick, done: set[str]) -> None:
        """A Tick's outputs, in order; `done` names the parts that went out (a retry after
        broker or Redis trouble goes on from there: above all, no Result is published twice)."""
        if "puts" not in done:
            for p in tick.puts:
                with contextlib.suppress(Exception):  # a cache write never fails a job
                    await self.cache.put_step(
                        Scope(p.tenant, p.app, p.user), p.key, p.before, p.text, p.verdict
                    )
            done.add("puts")
        if tick.checks and "checks" not in done:  # first: verification runs meanwhile
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self.sender, self._send_checks, tick.checks)
            done.add("checks")
        if "kv" not in done:
            await asyncio.gather(*(self.state.ack_kv(o, handle) for o, handle in tick.kv_acks))
            done.add("kv")
        # Events stream without waiting for their acks, but a job's Result waits until every
        # event published before it is acknowledged.
        if tick.events and "events" not in done:  # a batch per partition: cheap on the GIL
            self._unacked += await self.producer.send_batch_later(self.topics.events, tick.events)
            done.add("events")
        if tick.results and self._unacked:
            # Taken out first: a failed send stays failed, and would fail every retry after it.
            unacked, self._unacked = self._unacked, []
            await asyncio.gather(*unacked)
        elif len(self._unacked) > 4096:
            self._unacked = [f for f in self._unacked if not f.done()]
        if tick.results:
            await self._deliver(tick.results, done)

    async def _deliver(self, results: list[schema.Result], done: set[str]) -> None:
        """A tick's Results: answers cached, then Results published, then jobs marked done and
        their handoffs acked; each step for all of them at once (three round trips a tick,
        where one at a time took three a Result)."""
        jobs = []
        for result in results:
            if (job := self.jobs.get(result.id)) is None:  # cannot be: the core ran it for us
                log.error("%s: a Result for a job this worker does not hold; dropped", result.id)
                continue
            jobs.append((result, *job))

        async def cache_answer(result: schema.Result, h: schema.Handoff) -> None:
            if h.cache_key is not None:  # a reproducible job: its answer serves the next one
                with contextlib.suppress(Exception):  # a cache write never fails a job
                    await self.cache.put_answer(Scope.of(h), h.cache_key, result)

        if "results" not in done:
            # Cache first: whoever sees the Result and asks again must find the answer.
            await asyncio.gather(*(cache_answer(result, h) for result, h, _ in jobs))
            await self.publish_results([(result, h.reply_topic) for result, h, _ in jobs])
            done.add("results")
        # Idempotent (SET NX): a retry marks again what it marked before.
        await asyncio.gather(*(self.state.mark_done(r.id, self.worker_id) for r, _, _ in jobs))
        self.num_finishing -= len(results)
        for result, _, ack in jobs:
            if (trace := self.traces.pop(result.id, None)) is not None:
                trace.finish(result)
            telemetry.observe_result(result)
            del self.jobs[result.id]
            ack()
