"""`stepwise worker prefill`: prefill -> (batch prefill, first token, KV export) -> handoff.

Prompts arriving together are prefilled in one engine batch; each sequence is paused after its
first token and its KV handed over (export.py): by default its blocks of the engine's
shared-memory pool are pinned and the Handoff names them (decode copies them out in place);
with `mooncake` they can also be read from another host over Mooncake's transfer engine; with
the `shm` / `cuda_ipc` transports they are copied into a leased buffer instead. Either
lives until the decode worker acks it or the lease expires. Unlike decode, a prefill export
must be released: leases are reaped on every loop and released on shutdown, and when they are
nearly all taken the worker pauses its partitions (or, for a job already taken, hands off
without KV so decode re-prefills). A batch's Handoffs go out together, as one send per
partition, while the next batch is prefilled; a task's offset is acked once its Handoff is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import msgspec
from aiokafka import ConsumerRecord
from opentelemetry.trace import Span

from pipeline import schema, telemetry
from pipeline.bus import Ack
from pipeline.cache import Cache, CacheConfig, partitions_key, prefix_hashes
from pipeline.engine import Request
from pipeline.engine.sequence import Sequence
from pipeline.errors import StepwiseError
from pipeline.reasoning.sampling import sampling_params
from pipeline.reasoning.structured import guided_decoding
from pipeline.stage.engine_worker import EngineStageWorker
from pipeline.stage.placement import Placer, pin, read_loads
from pipeline.tracing import spans
from pipeline.transfer.kv_export import make_exporter

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    task: schema.PrefillTask
    ack: Ack
    received: float
    span: Span  # the job's prefill span, from ingest's context in the record's headers


class PrefillWorker(EngineStageWorker):
    stage = "prefill"
    input_stage = "prefill"

    async def setup(self) -> None:
        c = self.config
        exporter = make_exporter(
            c.kv_transport, self.worker_id, c.export_pool_mb << 20, c.kv_lease_ms, c.mooncake_host
        )
        engine = await self.start_engine(
            c.max_prefill_batch, exporter.kv_storage, exporter.extra_kv_gb
        )
        if engine.can_export_kv:
            exporter.bind(engine)
        self.exporter = exporter
        self.pending: asyncio.Queue[_Pending] = asyncio.Queue()
        # Prefix routing: this worker's prompt blocks are warm in its prefix cache for a while.
        self.cache = Cache(self.redis, CacheConfig(key_prefix=c.topic_prefix))
        self.publishing: set[asyncio.Task] = set()  # batches whose handoffs are going out
        # Decode placement: each handoff to the decode worker with room (stage/placement.py).
        self.placer = Placer()
        self._tasks.append(asyncio.create_task(self._prefill_loop()))
        self._tasks.append(asyncio.create_task(self._placement_loop()))

    def should_pause(self) -> bool:
        return self.exporter.nearly_full() or self.pending.qsize() >= 4 * (
            self.config.max_prefill_batch
        )

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        task = schema.decode(record.value or b"", schema.PrefillTask)
        span = spans.start_job_span("prefill", task.id, record.headers)
        await self.pending.put(_Pending(task, ack, time.perf_counter(), span))

    async def _placement_loop(self) -> None:
        """The decode workers' loads, twice a second (a hint: a failed read keeps the last)."""
        while not self.halting:
            try:
                self.placer.update(await read_loads(self.redis, self.config.topic_prefix))
            except Exception:  # Redis trouble: placement falls back to the job key's partition
                log.debug("reading decode loads failed", exc_info=True)
            await asyncio.sleep(0.5)

    async def _place(self, job_ids: list[str]) -> list[int | None]:
        """Each handoff's partition: the decode worker with room, as first placed (a job's
        handoff sent again goes where the first went); None: the job key's partition."""
        now = int(time.time() * 1000)
        choices = [(job_id, self.placer.place(job_id, now)) for job_id in job_ids]
        try:  # (kept even when it is the key's: a decode worker may join before a redelivery)
            return await pin(self.redis, self.config.topic_prefix, choices)
        except Exception:  # Redis trouble: the key's partition, as before placement
            log.warning("keeping placements failed; handoffs go by their key", exc_info=True)
            return [None] * len(job_ids)

    async def _release_acked(self) -> None:
        acked = await self.state.take_kv_acks(self.worker_id)
        await self.in_engine(self.exporter.release, self.engine, acked)

    async def _prefill_loop(self) -> None:
        # A batch's handoffs go out while the next batch is prefilled: published one by one,
        # each waiting for its ack, they kept the engine idle 17-40 ms per batch of 16.
        while not self.halting:
            await self._release_acked()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the cancellation
                # that stops this loop (when the get completes as it is cancelled).
                async with asyncio.timeout(0.1):
                    first = await self.pending.get()
            except TimeoutError:
                await self._reap(limit=0)
                continue
            batch = [first]
            while len(batch) < self.config.max_prefill_batch and not self.pending.empty():
                batch.append(self.pending.get_nowait())
            self.wake_consumer()  # the queue has room again
            try:
                handoffs = await self.in_engine(self._prefill_batch, batch)
            except Exception as e:  # a bad batch must not kill the worker: dead-letter each job
                log.exception("prefill batch failed")
                for p in batch:
                    await self._fail(p, e)
                continue
            # One batch publishing beside the engine: more would only queue in the producer,
            # with their exports held.
            await self._reap(limit=1)
            self.publishing.add(asyncio.create_task(self._publish_batch(batch, handoffs)))

    async def _reap(self, limit: int) -> None:
        """Wait until at most `limit` batches are still publishing (a batch retries its sends
        until the broker takes them); an error no retry covers fails the loop, as it would have
        in the loop itself."""
        publishing = self.publishing
        while publishing and (len(publishing) > limit or any(t.done() for t in publishing)):
            done, _ = await asyncio.wait(publishing, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                publishing.discard(task)
                task.result()

    async def _publish_batch(
        self, batch: list[_Pending], handoffs: list[schema.Handoff | StepwiseError]
    ) -> None:
        """The batch's handoffs as one send per partition, acked together; then its tasks'
        offsets, and the prefixes this worker now holds warm (one Redis round trip)."""
        ok: list[tuple[_Pending, schema.Handoff]] = []
        for p, handoff in zip(batch, handoffs, strict=True):
            if isinstance(handoff, StepwiseError):
                await self._fail(p, handoff)
            else:
                ok.append((p, handoff))
        if not ok:
            return
        for p, h in ok:  # the KV handoff: how, and how much
            kv = h.kv
            p.span.set_attribute("stepwise.batch_size", len(batch))
            p.span.set_attribute("stepwise.transport", kv.transport if kv else "none")
            p.span.set_attribute("stepwise.bytes", kv.nbytes if kv else 0)
        parts = await self._place([h.id for _, h in ok])
        records = []
        for (p, h), partition in zip(ok, parts, strict=True):
            p.span.set_attribute("stepwise.placed", partition is not None)
            records.append((h.id, schema.encode(h), spans.kafka_headers_of(p.span), partition))
        delay = 0.1
        while True:  # broker trouble: retry, as decode does (decode drops a repeated handoff)
            try:
                futures = await self.producer.send_batch_later(self.topics.name("handoff"), records)
                await asyncio.gather(*futures)
                break
            except Exception:
                if self.halting:
                    return  # not acked: the tasks are redelivered
                log.exception("publishing %d handoffs failed; retrying in %.1fs", len(ok), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        for p, _ in ok:
            spans.end(p.span, outcome="handed_off")
            p.ack()
        size = self.engine.config.block_size
        claims = [
            (p.task.tenant, p.task.model, prefix_hashes(p.task.token_ids, size)) for p, _ in ok
        ]
        with contextlib.suppress(Exception):  # routing is a hint; it never fails a job
            await self.cache.publish_prefixes(claims, self.worker_id)

    async def _fail(self, p: _Pending, exc: Exception) -> None:
        err = exc if isinstance(exc, StepwiseError) else StepwiseError(f"prefill failed: {exc!r}")
        spans.end(p.span, error=f"{err.code}: {err}")
        result = msgspec.structs.replace(schema.rejected_result(p.task.id, err), status="error")
        await self.publish_result(result, p.task.reply_topic)
        p.ack()

    def _prefill_batch(self, batch: list[_Pending]) -> list[schema.Handoff | StepwiseError]:
        """Engine thread: prefill every prompt, sample its first token, export its KV.

        A task the engine refuses fails alone (its slot holds the error); whatever happens, no
        sequence is left behind in the engine.
        """
        engine = self.engine
        seqs: list[Sequence | StepwiseError] = []
        for p in batch:
            t = p.task
            # Two tokens and no EOS stop, so the sequence is still alive after the first token.
            params = sampling_params(t.params, max_tokens=2, ignore_eos=True)
            rid = f"{t.id}@{time.monotonic_ns()}"  # a redelivered task may overlap a live one
            try:
                if t.structured_output is not None:  # the first token may already be held
                    params.guided = guided_decoding(t.structured_output, engine, t.token_ids)
                seqs.append(engine.add(Request(rid, list(t.token_ids), params)))
            except StepwiseError as e:
                e.job_id = t.id
                seqs.append(e)
        live = [s for s in seqs if isinstance(s, Sequence)]
        try:
            first_logprob: dict[str, float] = {}
            while any(s.num_output_tokens < 1 and not s.is_finished for s in live):
                for out in engine.step():
                    engine.pause(out.request_id)  # stop after the first token: decode goes on
                    first_logprob[out.request_id] = out.logprob
            return [self._outcome(p, s, first_logprob) for p, s in zip(batch, seqs, strict=True)]
        finally:
            for s in live:  # blocks stay in the prefix cache for the next prompt
                engine.abort(s.request_id)

    def _outcome(
        self, p: _Pending, seq: Sequence | StepwiseError, first_logprob: dict[str, float]
    ) -> schema.Handoff | StepwiseError:
        if isinstance(seq, StepwiseError):
            return seq
        if seq.num_output_tokens < 1:  # the engine ended it without a token (vLLM: it failed)
            return StepwiseError("the engine failed this prefill", code="engine_error")
        return self._handoff(p, seq, first_logprob)

    def _handoff(
        self, p: _Pending, seq: Sequence, first_logprob: dict[str, float]
    ) -> schema.Handoff:
        t = p.task
        # vLLM keeps its KV to itself: decode re-prefills from token ids (a prefix-cache hit
        # when both stages share one vLLM server).
        kv = self.exporter.export(self.engine, seq) if self.engine.can_export_kv else None
        return schema.Handoff(
            **{f: getattr(t, f) for f in t.__struct_fields__},
            first_token=seq.token_ids[seq.num_prompt_tokens],
            first_logprob=first_logprob[seq.request_id],
            kv=kv,
            prefill_worker=self.worker_id,
            prefill_ms=int((time.perf_counter() - p.received) * 1000),
            seed=seq.seed,
        )

    async def report_metrics(self) -> None:
        """Also the routing heartbeat: alive, and which input partitions this worker holds."""
        await super().report_metrics()
        engine = getattr(self, "engine", None)
        if engine is not None and engine.can_export_kv:  # the pool it leases out of
            telemetry.set_kv_usage(*engine.kv_usage(), stage="prefill")
        if self.loop is not None and self.loop.consumer is not None:
            parts = sorted(tp.partition for tp in self.loop.consumer.assignment())
            key = partitions_key(self.config.topic_prefix, self.worker_id)
            await self.redis.set(key, ",".join(map(str, parts)), ex=10)
            await self.cache.mark_alive(self.worker_id)

    async def teardown(self) -> None:
        # After the drain: a batch still publishing is one whose acks did not come in time
        # (its tasks are redelivered).
        for task in getattr(self, "publishing", ()):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.cache.mark_dead(self.worker_id)
        await super().teardown()  # the engine thread is done after this
        # Unlike decode, prefill holds KV other processes may still read: release it (a
        # reader that already maps the segment finishes its copy; later ones re-prefill).
        if (exporter := getattr(self, "exporter", None)) is not None:
            exporter.close()
