"""`stepwise worker ingest`: jobs -> (validate, dedupe, answer cache, tokenize, budget) -> prefill.

A reproducible job (greedy, or seeded by its sender) whose answer is cached for its tenant gets
the cached Result at once (status `cached`) and never reaches the model; otherwise its cache
key rides along so decode can store the answer (pipeline/cache/, docs/cache.md)."""

from __future__ import annotations

import contextlib

import msgspec
from aiokafka import ConsumerRecord

from pipeline import schema, telemetry
from pipeline.budget.admission import check_admission
from pipeline.budget.state import count_arrival
from pipeline.bus import Ack
from pipeline.cache import (
    Cache,
    CacheConfig,
    Scope,
    answer_key,
    partitions_key,
    prefix_hashes,
)
from pipeline.config import DEFAULT_BLOCK_SIZE
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import OverloadedError
from pipeline.ingest.admission import IngestCore, job_seed
from pipeline.models.resolve import resolve_model
from pipeline.stage.jobstate import Admission
from pipeline.stage.worker import StageWorker, now_ms
from pipeline.tracing import spans


class IngestWorker(StageWorker):
    stage = "ingest"
    input_stage = "jobs"
    # A job's handling is a chain of round trips (Redis admit, cache and routing lookups, an
    # acknowledged publish): one at a time, a burst of jobs trickled into prefill at the
    # latency of that chain. Duplicates stay safe: admission is one SET NX.
    max_concurrent_records = 32

    async def setup(self) -> None:
        path = resolve_model(self.config.model)
        mc = ModelConfig.from_dir(path, native=self.config.engine == "native")
        self.core = IngestCore(
            Tokenizer(path),
            # The prompt must fit what the engine behind this pipeline will run.
            max_model_len=mc.max_model_len(windowed=self.config.engine == "native"),
            model_name=self.config.model,
            default_budget=schema.Budget(
                max_steps=self.config.default_max_steps,
                max_thinking_tokens=self.config.default_max_thinking_tokens,
            ),
            budget_source=(budgets := self.start_budget_reader()).cached,
        )
        self.budgets = budgets
        self.num_shed = 0
        self.num_duplicates = 0
        self.num_cached = 0
        self.num_routed = 0
        self.block_size = DEFAULT_BLOCK_SIZE  # the prefill engines' KV block size
        # The cache's keys live under the pipeline's prefix: one namespace per deployment.
        self.cache = Cache(self.redis, CacheConfig(key_prefix=self.config.topic_prefix))

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        # Schema and length errors raise: the base dead-letters them and rejects the job.
        job = schema.decode_job(record.value or b"", schema.content_type_of(record.headers))
        # The job's trace starts here unless its producer (the gateway, a client) sent one.
        span = spans.start_job_span("ingest", job.id, record.headers, tenant=job.tenant)
        try:
            source = f"{record.topic}:{record.partition}:{record.offset}"
            if await self.state.admit(job.id, source) is Admission.DUPLICATE:
                self.num_duplicates += 1
                spans.end(span, outcome="duplicate")
                ack()
                return
            key = answer_key(job, job.model or self.config.model)
            if key is not None:
                with spans.child(span, "cache.lookup", level="answer") as lookup:
                    hit = await self._answer_from_cache(job, key)
                    lookup.set_attribute("stepwise.hit", hit)
                if hit:
                    spans.end(span, outcome="cached")
                    ack()
                    return
            if await self._shed(job):
                spans.end(span, outcome="overloaded")
                ack()
                return
            task = self.core.admit(job, now_ms())
            if key is not None:
                task = msgspec.structs.replace(task, cache_key=key)
            accepted = schema.Event(id=job.id, seq=0, kind="accepted", ts_ms=task.admitted_ms)
            with spans.child(span, "cache.lookup", level="prefix") as lookup:
                partition = await self._warm_partition(task)
                lookup.set_attribute("stepwise.hit", partition is not None)
            headers = spans.kafka_headers_of(span)
            if partition is None:
                await self.producer.send_many(
                    [
                        (self.topics.prefill, job.id, schema.encode(task), headers),
                        (self.topics.events, job.id, schema.encode(accepted)),
                    ]
                )
            else:
                await self.producer.send(
                    self.topics.prefill, schema.encode(task), job.id, headers or None, partition
                )
                await self.producer.send(self.topics.events, schema.encode(accepted), job.id)
            spans.end(span, outcome="admitted", routed=partition is not None)
            ack()
        except Exception as e:  # the base dead-letters it; its trace says where it failed
            spans.end(span, error=f"{type(e).__name__}: {e}")
            raise

    async def _shed(self, job: schema.Job) -> bool:
        """Counts the job's arrival for the controller, and refuses it when the class's live
        limits shed load (docs/budget.md): an error Result `overloaded` with a retry-after,
        and the job marked done (a redelivered copy is a duplicate, not a second refusal)."""
        cls = job.slo.class_
        try:
            check_admission(job.id, cls, self.budgets.cached(cls))
        except OverloadedError as e:
            with contextlib.suppress(Exception):  # counting never refuses or fails a job
                await count_arrival(self.redis, self.config.topic_prefix, cls, shed=True)
            result = msgspec.structs.replace(
                schema.rejected_result(job.id, e, tenant=job.tenant), status="error",
                slo_class=cls,
            )  # fmt: skip
            event = schema.Event(id=job.id, seq=0, kind="error", text=str(e),
                                 detail=e.code, ts_ms=result.ts_ms)  # fmt: skip
            await self.producer.send(self.topics.events, schema.encode(event), job.id)
            await self.publish_result(result, job.reply_topic)
            await self.state.mark_done(job.id, self.worker_id)
            telemetry.job_shed(cls, "ingest")
            self.num_shed += 1
            return True
        with contextlib.suppress(Exception):
            await count_arrival(self.redis, self.config.topic_prefix, cls, shed=False)
        return False

    async def _warm_partition(self, task: schema.PrefillTask) -> int | None:
        """A partition of the live prefill worker that holds this prompt's longest prefix."""
        try:
            hashes = prefix_hashes(task.token_ids, self.block_size)
            worker = await self.cache.warm_worker(task.tenant, task.model, hashes)
            if worker is None:
                return None
            raw = await self.redis.get(partitions_key(self.config.topic_prefix, worker))
            parts = [int(x) for x in raw.decode().split(",") if x] if raw else []
        except Exception:  # routing is a hint; without it the key's partition is used
            return None
        if not parts:
            return None
        self.num_routed += 1
        return parts[job_seed(task.id) % len(parts)]

    async def _answer_from_cache(self, job: schema.Job, key: str) -> bool:
        """Publish the cached Result for this job, if there is one for its tenant."""
        hits_before = self.cache.stats.answer_l1_hits
        raw = await self.cache.get_answer(Scope.of(job), key)
        if raw is None:
            telemetry.cache_miss("answer")
            return False
        layer = "l1" if self.cache.stats.answer_l1_hits > hits_before else "l2"
        telemetry.cache_hit("answer", layer)
        t = now_ms()
        cached = schema.decode(raw, schema.Result)
        result = msgspec.structs.replace(
            cached, id=job.id, status="cached", tenant=job.tenant, slo_class=job.slo.class_,
            timings=schema.Timings(queue_ms=0.0, e2e_ms=max(0, t - (job.created_ms or t))),
            ts_ms=t,
        )  # fmt: skip
        events = [
            schema.Event(id=job.id, seq=0, kind="accepted", ts_ms=t),
            schema.Event(id=job.id, seq=1, kind="final", text=result.answer or "",
                         detail="cached", ts_ms=t),
        ]  # fmt: skip
        items = [(self.topics.events, job.id, schema.encode(e)) for e in events]
        await self.producer.send_many(items)
        await self.publish_result(result, job.reply_topic)
        await self.state.mark_done(job.id, self.worker_id)
        self.num_cached += 1
        return True
