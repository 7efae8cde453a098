"""`stepwise worker ingest`: jobs -> (validate, dedupe, tokenize, budget) -> prefill."""

from __future__ import annotations

from aiokafka import ConsumerRecord

from pipeline import schema
from pipeline.bus import Ack
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.prepare import resolve_model
from pipeline.engine.tokenizer import Tokenizer
from pipeline.ingest.core import IngestCore
from pipeline.jobstate import Admission
from pipeline.worker import StageWorker, now_ms


class IngestWorker(StageWorker):
    stage = "ingest"
    input_stage = "jobs"

    async def setup(self) -> None:
        path = resolve_model(self.config.model)
        mc = ModelConfig.from_dir(path)
        self.core = IngestCore(
            Tokenizer(path),
            max_model_len=mc.max_position_embeddings,
            model_name=self.config.model,
            default_budget=schema.Budget(
                max_steps=self.config.default_max_steps,
                max_thinking_tokens=self.config.default_max_thinking_tokens,
            ),
            budget_source=self.start_budget_reader().cached,
        )
        self.num_duplicates = 0

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        # Schema and length errors raise: the base dead-letters them and rejects the job.
        job = schema.decode_job(record.value or b"", schema.content_type_of(record.headers))
        source = f"{record.topic}:{record.partition}:{record.offset}"
        if await self.state.admit(job.id, source) is Admission.DUPLICATE:
            self.num_duplicates += 1
            ack()
            return
        task = self.core.admit(job, now_ms())
        accepted = schema.Event(id=job.id, seq=0, kind="accepted", ts_ms=task.admitted_ms)
        await self.producer.send_many(
            [
                (self.topics.prefill, job.id, schema.encode(task)),
                (self.topics.events, job.id, schema.encode(accepted)),
            ]
        )
        ack()
