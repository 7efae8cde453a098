"""`stepwise worker decode`: handoff -> (import KV, continuous batching) -> events, results.

Each handoff's KV is imported into the running engine (or, if its buffer is gone, the prompt
is prefilled again: same seed, same tokens). The engine runs in one thread; each tick starts
new jobs, runs one engine step, applies the verdicts that arrived (a contradiction rolls the
sequence back), and returns the events, the steps to verify and the finished Results, which the
event loop publishes. Steps go to Celery verify workers; their verdicts come back on this
worker's own Redis stream. A handoff's offset is acknowledged only after its Result is
acknowledged by the broker, so a crashed decode worker's jobs are redelivered and redone (a
decode request can be re-driven anywhere; unlike prefill, it holds no buffer another process
waits on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import msgspec
from aiokafka import ConsumerRecord
from redis import Redis as SyncRedis

from pipeline import schema, telemetry
from pipeline.bus import Ack
from pipeline.cache import CACHEABLE_VERDICTS, SCOPES, Cache, CacheConfig, Scope, step_key
from pipeline.decode.core import JobRun, finish, outward, token_events
from pipeline.decode.driver import ReasoningDriver, reasoning_params
from pipeline.decode.reasoning import Note, ReasoningConfig
from pipeline.engine import KVBlocks, KVExport, Request
from pipeline.engine.sequence import SequenceStatus
from pipeline.errors import StepwiseError
from pipeline.stage_params import sampling_params
from pipeline.transfer import KVHandle, TransferExpiredError, get_transport
from pipeline.transfer.base import dtype_itemsize, torch_dtype
from pipeline.transfer.shm_pool import PoolReader, segment_of
from pipeline.verify import tasks
from pipeline.worker import EngineStageWorker, now_ms

log = logging.getLogger(__name__)

# A verified step for the step cache: (scope, job's step key, steps before it, text, verdict).
StepPut = tuple[Scope, str, tuple[str, ...], str, str]
# (events to publish, finished (Result, its handoff, ack), KV buffers to ack (owner, handle),
#  steps to verify, verified steps to cache)
Tick = tuple[
    list[schema.Event],
    list[tuple[schema.Result, schema.Handoff, Ack]],
    list[tuple[str, str]],
    list[schema.VerifyRequest],
    list[StepPut],
]


class DecodeWorker(EngineStageWorker):
    stage = "decode"
    input_stage = "handoff"

    async def setup(self) -> None:
        await self.start_engine(self.config.max_decode_seqs)
        # Decode reads whichever transport a handoff names (a prefill worker may be set up
        # differently): the copying one of its config, and shared pools in place.
        self.transport = get_transport(
            "shm" if self.config.kv_transport == "shm_pool" else self.config.kv_transport
        )
        self.pool_reader = PoolReader()
        self.budgets = self.start_budget_reader()
        self.cache = Cache(self.redis, CacheConfig(key_prefix=self.config.topic_prefix))
        # The engine thread looks cached steps up itself, at step boundaries (a blocking GET
        # with a short timeout: a slow Redis only means the step is generated instead).
        self.sync_redis = SyncRedis.from_url(self.config.redis, socket_timeout=0.05)
        # Handoffs from the event loop to the engine thread, and Ticks back: the engine thread
        # runs its own loop (vLLM's engine core does too). Driven one tick at a time from the
        # event loop, each step waited for that loop to get round to it: 0.9 ms a tick.
        self.inbox: deque[tuple[schema.Handoff, Ack]] = deque()
        self.runs: dict[str, tuple[JobRun, Ack]] = {}  # touched by the engine thread only
        self.active: set[str] = set()  # ids queued or running (event loop only)
        self.num_reprefills = 0
        self._unacked: list[asyncio.Future] = []  # event sends not yet acknowledged
        self.outbox: asyncio.Queue[Tick] = asyncio.Queue()
        self.ticks: deque[Tick] = deque()  # engine thread -> event loop (`_take_ticks`)
        self._ticks_called = False  # a `_take_ticks` is scheduled on the event loop
        # At most 64 Ticks made and not yet published: the engine waits on a slow broker.
        self.unpublished = threading.BoundedSemaphore(64)
        self.work = threading.Event()  # a handoff or a verdict for the engine thread
        self.halt = threading.Event()  # the engine thread's loop ends (teardown)
        self.verdict_stream = f"{self.config.topic_prefix}verdicts:{self.worker_id}"
        self.verdicts: deque[schema.VerdictMessage] = deque()  # event loop -> engine thread
        # Celery's producer does blocking I/O: it gets a thread of its own.
        self.celery = tasks.make_app(self.config.redis)
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode-verify")
        self.event_loop = asyncio.get_running_loop()
        self._tasks.append(asyncio.ensure_future(self.in_engine(self._engine_loop)))
        self._tasks.append(asyncio.create_task(self._publish_loop()))
        self._tasks.append(asyncio.create_task(self._verdict_loop()))

    async def teardown(self) -> None:
        # setup() may have failed part-way (the engine, say): release only what it took, so
        # the original error is what the operator sees, not an AttributeError from here.
        if (halt := getattr(self, "halt", None)) is not None:
            halt.set()  # the engine thread's loop ends; the executor's shutdown waits for it
        if (sender := getattr(self, "sender", None)) is not None:
            sender.shutdown(wait=False, cancel_futures=True)
        if (sync_redis := getattr(self, "sync_redis", None)) is not None:
            sync_redis.close()
        if (stream := getattr(self, "verdict_stream", None)) is not None:
            # Bounded: a bench's shutdown once hung in this teardown, right after the verdict
            # reader's blocking XREAD on this client was cancelled (the likely wait), and the
            # engine's totals after it were never logged.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self.redis.delete(stream)
        await super().teardown()

    async def report_metrics(self) -> None:
        await super().report_metrics()
        used, total = self.engine.kv_usage()
        if total:  # vLLM's pool lives in its server (its own /metrics shows it)
            telemetry.set_kv_usage(used, total)
        telemetry.set_inflight(len(self.runs))

    def should_pause(self) -> bool:
        # A few handoffs past the running batch wait in the engine's queue, KV imported: a
        # sequence that finishes is replaced in the next step, not after a fetch round trip.
        prefetch = max(4, self.config.max_decode_seqs // 4)
        busy = len(self.runs) + len(self.inbox) >= self.config.max_decode_seqs + prefetch
        used, total = self.engine.kv_usage()
        return busy or (total > 0 and used > 0.9 * total)

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        handoff = schema.decode(record.value or b"", schema.Handoff)
        if handoff.id in self.active or await self.state.is_done(handoff.id):
            ack()  # running here already, or its Result is out (a redelivery)
            return
        self.active.add(handoff.id)
        self.inbox.append((handoff, ack))
        self.work.set()

    # -- the engine thread ------------------------------------------------------------------

    def _start(self, h: schema.Handoff) -> tuple[JobRun, tuple[str, str] | None]:
        engine, cfg = self.engine, self.config
        # The thinking budget: the stamped one, or the job's own max_tokens / max_steps if
        # tighter. Running out of it forces the answer; the engine's own limit sits above it,
        # with room for the answer.
        thinking = min(h.budget.max_thinking_tokens, h.params.max_tokens or schema.MAX_TOKENS)
        steps = min(h.budget.max_steps, h.params.max_steps or schema.MAX_STEPS)
        reasoning = ReasoningConfig(
            verify=h.params.verify,
            max_retries=cfg.max_retries,
            max_backtracks=cfg.max_backtracks,
            verdict_timeout_s=cfg.verdict_timeout_s,
            max_thinking_tokens=thinking,
            max_steps=steps,
            early_exit=h.params.early_exit,
            probe_every=h.budget.probe_effort,
        )
        limit = thinking + reasoning.answer_tokens + 16
        limit = max(1, min(limit, engine.max_model_len - len(h.token_ids)))
        params = reasoning_params(
            sampling_params(h.params, seed=h.seed, max_tokens=limit), h.params.verify
        )
        kv_ack = None
        seq = None
        if h.kv is not None and engine.can_export_kv:
            try:
                seq, kv_ack = self._import(h, params), (h.kv.owner, h.kv.handle)
            except (TransferExpiredError, StepwiseError) as e:
                log.info("%s: KV import failed (%s); prefilling again", h.id, e)
        if seq is None:
            self.num_reprefills += 1
            seq = engine.add(Request(h.id, list(h.token_ids), params))
        driver = ReasoningDriver(engine, seq, reasoning)
        problem = engine.tokenizer.decode(h.token_ids)
        run = JobRun(h, driver, problem, self.verdict_stream, now_ms())
        # Steps enter the step cache only with a verdict, under a key that holds the verify
        # mode: a job that verifies nothing can find none, so it never asks.
        if h.cache_key is not None and h.params.verify != "off":  # ingest: reproducible
            run.step_key = step_key(h.model, h.token_ids, h.premises, h.params)
        return run, kv_ack

    def _splice_cached(self, runs: list[JobRun], emit, now_s: float) -> None:
        """At step boundaries of reproducible jobs, put in the verified steps cached for them:
        one Redis round trip for every job of the tick that sits on a boundary, and one more
        for each round of steps spliced in a row (a splice is read back before the next
        lookup, else the engine would sample past the spliced delimiter)."""
        while runs:
            asks = []
            for run in runs:
                try:
                    if run.step_key is not None and (i := run.driver.wants_next_step()) is not None:
                        asks.append((run, i))
                except Exception:
                    self._fail(run)
            if not asks:
                return
            hits = self._cached_steps([r for r, _ in asks])
            runs = []
            for (run, index), hit in zip(asks, hits, strict=True):
                try:
                    if hit is not None and run.driver.splice_step(index, *hit):
                        emit(run, run.driver.advance(now_s))
                        runs.append(run)
                except Exception:
                    self._fail(run)

    def _cached_steps(self, runs: list[JobRun]) -> list[tuple[str, str] | None]:
        """The verified step that followed each run's chain before, from Redis in one MGET
        (engine thread); None for a miss, and for all when Redis is slow or away (the steps
        are generated instead)."""
        keys = []
        for run in runs:
            assert run.step_key is not None
            scope = Scope.of(run.handoff)
            accepted = [s.text for s in run.driver.reasoner.chain]
            content = Cache.step_content(run.step_key, accepted)
            keys += [self.cache.key("step", name, scope, content) for name in SCOPES]
        try:
            values = self.sync_redis.mget(keys)
        except Exception:
            return [None] * len(runs)
        hits: list[tuple[str, str] | None] = []
        for i in range(len(runs)):
            found = next((v for v in values[i * len(SCOPES) : (i + 1) * len(SCOPES)] if v), None)
            if found is None:
                telemetry.cache_miss("step")
                hits.append(None)
                continue
            telemetry.cache_hit("step", "l2")
            text, verdict = msgspec.msgpack.decode(found)
            hits.append((text, verdict))
        return hits

    def _import(self, h: schema.Handoff, params):
        d = h.kv
        assert d is not None
        if d.transport == "shm_pool":
            return self._import_blocks(h, d, params)
        # The buffer holds whole blocks of the exporter's size: its token count follows from
        # its bytes; the first d.num_tokens of them are the sequence's.
        per_token = d.num_layers * 2 * d.num_kv_heads * d.head_dim * dtype_itemsize(d.dtype)
        shape = (d.num_layers, 2, d.num_kv_heads, d.nbytes // per_token, d.head_dim)
        handle = KVHandle(d.transport, d.handle, shape, d.dtype, d.nbytes, d.owner, d.expires_ms)
        with self.transport.attach(handle) as buf:
            export = KVExport(
                h.id, [*h.token_ids, h.first_token], len(h.token_ids),
                buf[:, :, :, : d.num_tokens], h.seed,
            )  # fmt: skip
            return self.engine.import_kv(export, params)

    def _import_blocks(self, h: schema.Handoff, d: schema.KVDescriptor, params):
        """Copy the prefill worker's pinned blocks straight out of its shared pool."""
        if d.blocks is None or d.block_gens is None or d.block_size is None:
            raise TransferExpiredError("an shm_pool handoff without its blocks")
        name = segment_of(d.handle)
        block_shape = (d.num_layers, 2, d.num_kv_heads, d.block_size, d.head_dim)
        seq = None
        try:
            with self.pool_reader.read(
                name, torch_dtype(d.dtype), block_shape, d.blocks, d.block_gens
            ) as pool:
                export = KVExport(
                    h.id, [*h.token_ids, h.first_token], len(h.token_ids),
                    KVBlocks(pool, list(d.blocks), d.num_tokens), h.seed,
                )  # fmt: skip
                seq = self.engine.import_kv(export, params)
        except TransferExpiredError:
            if seq is not None:  # copied, but the blocks were reused meanwhile: torn
                self.engine.abort(seq.request_id)
            raise
        return seq

    def _tick(self, new: list[tuple[schema.Handoff, Ack]]) -> Tick:
        engine, tok = self.engine, self.engine.tokenizer
        events: list[schema.Event] = []
        results: list[tuple[schema.Result, schema.Handoff, Ack]] = []
        kv_acks: list[tuple[str, str]] = []
        checks: list[schema.VerifyRequest] = []
        puts: list[StepPut] = []
        for h, ack in new:
            try:
                run, kv_ack = self._start(h)
            except Exception as e:  # this job cannot run here: it gets an error Result
                log.exception("%s: cannot start", h.id)
                results.append((self._error_result(h, e), h, ack))
                continue
            self.runs[h.id] = (run, ack)
            if kv_ack:
                kv_acks.append(kv_ack)
        if engine.has_schedulable:
            telemetry.add_generated_tokens(len(engine.step()))
        t, now_s = now_ms(), time.monotonic()

        def emit(run: JobRun, outs) -> None:
            evs, reqs = outward(run, outs, tok, t)
            events.extend(evs)
            checks.extend(reqs)
            if run.step_key is not None:
                puts.extend(verified_steps(run, outs))

        while self.verdicts:
            v = self.verdicts.popleft()
            entry = self.runs.get(v.id)
            if entry is not None:  # else: a job that finished or moved on
                detail = v.detail or v.reason
                try:
                    emit(entry[0], entry[0].driver.verdict(v.key, v.verdict, detail, now_s))
                except Exception:
                    self._fail(entry[0])
        live_runs = []
        for run, _ in self.runs.values():
            if not run.seq.is_finished:
                try:
                    # Live limits tighten jobs already running (checked at step boundaries).
                    live = self.budgets.cached(run.handoff.slo.class_)
                    if live is not None:
                        run.driver.reasoner.update_budget(live.max_thinking_tokens, live.max_steps)
                    events.extend(token_events(run, tok, t))
                    emit(run, run.driver.advance(now_s))
                    live_runs.append(run)
                except Exception:
                    self._fail(run)
        self._splice_cached([r for r in live_runs if not r.seq.is_finished], emit, now_s)
        for job_id, (run, ack) in list(self.runs.items()):
            if run.seq.is_finished:
                for step in run.driver.reasoner.chain:
                    telemetry.observe_step(step.end - step.start)
                try:
                    evs, result = finish(run, tok, t)
                except Exception:
                    log.exception("%s: cannot build its Result", job_id)
                    err = StepwiseError("the decode worker could not build this job's Result")
                    evs, result = [], self._error_result(run.handoff, err)
                events.extend(evs)
                results.append((result, run.handoff, ack))
                del self.runs[job_id]
        return events, results, kv_acks, checks, puts

    def _fail(self, run: JobRun) -> None:
        """A job whose decoding raised ends with an error Result; the other jobs in the tick
        go on (an exception used to fail the whole tick, and with it Results already made)."""
        log.exception("%s: decoding failed; it ends with an error Result", run.handoff.id)
        seq = run.seq
        if not seq.is_finished:
            try:
                self.engine.finish(seq.request_id, "error")
            except Exception:  # the engine lost it: mark it done so its Result goes out
                seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "error"
        run.driver.reasoner.finished = True

    @staticmethod
    def _error_result(h: schema.Handoff, e: Exception) -> schema.Result:
        err = e if isinstance(e, StepwiseError) else StepwiseError(repr(e))
        return msgspec.structs.replace(schema.rejected_result(h.id, err), status="error")

    def _send_checks(self, checks: list[schema.VerifyRequest]) -> None:
        for req in checks:
            tasks.send(req, self.celery)

    def _engine_loop(self) -> None:
        """The engine thread's loop, until teardown: start the handoffs that came in, run a
        tick, hand it to the event loop; sleep while there is nothing to run."""
        try:
            self._engine_turns()
        except BaseException:  # nothing else would say so: the loop's future is awaited late
            log.exception("decode's engine loop died")
            raise

    def _engine_turns(self) -> None:
        while not self.halt.is_set():
            new = []
            while self.inbox:
                new.append(self.inbox.popleft())
            if not new and not self.verdicts and not (self.runs and self.engine.has_schedulable):
                # Idle, or every sequence waits for a verdict: until a handoff or a verdict
                # comes (or time passes, so verdict timeouts fire).
                self.work.wait(0.05 if self.runs else 0.1)
                self.work.clear()
                if not self.runs or self.inbox or self.verdicts:
                    continue  # to take what came; with none, only waiting runs tick on
            while not self.unpublished.acquire(timeout=0.1):
                if self.halt.is_set():
                    return
            try:
                tick = self._tick(new)
            except Exception:  # keep serving; unacked jobs are redelivered if we die later
                log.exception("decode tick failed")
                self.unpublished.release()
                self.halt.wait(0.5)
                continue
            self.ticks.append(tick)
            if not self._ticks_called:  # one wake-up of the event loop for a run of ticks
                self._ticks_called = True
                self.event_loop.call_soon_threadsafe(self._take_ticks)

    # -- the event loop ---------------------------------------------------------------------

    def _take_ticks(self) -> None:
        """Event loop: the engine thread's Ticks to the publisher."""
        self._ticks_called = False  # first: a Tick appended after this schedules another call
        finished = False
        while self.ticks:
            tick = self.ticks.popleft()
            finished = finished or bool(tick[1])
            self.outbox.put_nowait(tick)
        if finished:  # jobs finished: room for more handoffs
            self.wake_consumer()

    async def _publish_loop(self) -> None:
        while not self.halting:
            tick = await self.outbox.get()
            delay = 0.1
            while not self.halting:
                try:
                    await self._publish_tick(tick)
                    self.unpublished.release()
                    break
                except Exception:  # broker trouble: retry (a repeated event is harmless)
                    log.exception("publishing failed; retrying in %.1fs", delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)

    async def _verdict_loop(self) -> None:
        """Verdicts from verify workers (this worker's stream) -> the engine thread's queue."""
        last = "$"
        while not self.halting:
            try:
                got = await self.redis.xread({self.verdict_stream: last}, count=512, block=100)
            except Exception:  # Redis trouble: the verdict timeout keeps jobs moving meanwhile
                log.exception("reading verdicts failed; retrying")
                await asyncio.sleep(0.5)
                continue
            for _, entries in got or ():
                for entry_id, fields in entries:
                    last = entry_id
                    try:
                        self.verdicts.append(schema.decode(fields[b"v"], schema.VerdictMessage))
                    except (KeyError, schema.SchemaError) as e:
                        log.warning("ignoring a bad verdict %s: %s", entry_id, e)
            if got:
                self.work.set()

    async def _publish_tick(self, tick: Tick) -> None:
        events, results, kv_acks, checks, puts = tick
        for scope, key, accepted, text, verdict in puts:
            with contextlib.suppress(Exception):  # a cache write never fails a job
                await self.cache.put_step(scope, key, accepted, text, verdict)
        if checks:  # first: verification runs while the rest is published
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self.sender, self._send_checks, checks)
        await asyncio.gather(*(self.state.ack_kv(owner, handle) for owner, handle in kv_acks))
        # Events stream without waiting for their acks, but a job's Result waits until every
        # event published before it is acknowledged.
        if events:  # a batch per partition: a step's events cost little of the GIL
            self._unacked += await self.producer.send_batch_later(
                self.topics.events, [(e.id, schema.encode(e)) for e in events]
            )
        if results and self._unacked:
            await asyncio.gather(*self._unacked)
            self._unacked.clear()
        elif len(self._unacked) > 4096:
            self._unacked = [f for f in self._unacked if not f.done()]
        if results:
            await self._deliver(results)

    async def _deliver(self, results: list[tuple[schema.Result, schema.Handoff, Ack]]) -> None:
        """A tick's Results: answers cached, then Results published, then jobs marked done and
        their handoffs acked; each step for all of them at once (three round trips a tick,
        where one at a time took three a Result)."""

        async def cache_answer(result: schema.Result, h: schema.Handoff) -> None:
            if h.cache_key is not None:  # a reproducible job: its answer serves the next one
                with contextlib.suppress(Exception):  # a cache write never fails a job
                    await self.cache.put_answer(Scope.of(h), h.cache_key, result)

        # Cache first: whoever sees the Result and asks again must find the answer.
        await asyncio.gather(*(cache_answer(result, h) for result, h, _ in results))
        await self.publish_results([(result, h.reply_topic) for result, h, _ in results])
        await asyncio.gather(*(self.state.mark_done(r.id, self.worker_id) for r, _, _ in results))
        for result, _, ack in results:
            telemetry.observe_result(result)
            self.active.discard(result.id)
            ack()


def verified_steps(run: JobRun, outs) -> list[StepPut]:
    """The steps these outputs verified, with the chain before each (for the step cache)."""
    chain = run.driver.reasoner.chain
    found = []
    for o in outs:
        if not (isinstance(o, Note) and o.kind == "verdict") or o.detail == "cached":
            continue
        if o.verdict in CACHEABLE_VERDICTS and o.step < len(chain) and chain[o.step].text == o.text:
            before = tuple(s.text for s in chain[: o.step])
            found.append((Scope.of(run.handoff), run.step_key, before, o.text, o.verdict))
    return found
