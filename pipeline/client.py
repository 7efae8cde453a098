"""A small asyncio client: publish a Job, follow its Events, wait for its Result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition

from pipeline import schema
from pipeline.bus import BusConfig, Producer
from pipeline.topics import Topics


def current_chain(events: list[schema.Event]) -> list[str]:
    """The reasoning chain as a job's events leave it: a `step` event sets step `n` (dropping
    any later ones), a `backtrack` event drops step `n` and everything after it."""
    chain: list[str] = []
    for e in events:
        if e.kind == "step" and e.step is not None:
            chain = [*chain[: e.step], e.text]
        elif e.kind == "backtrack" and e.step is not None:
            chain = chain[: e.step]
    return chain


class StepwiseClient:
    def __init__(self, bootstrap_servers: str, topic_prefix: str = "stepwise."):
        self.topics = Topics(topic_prefix)
        self.config = BusConfig(bootstrap_servers=bootstrap_servers, client_id="stepwise-client")
        self.producer = Producer(self.config)
        self.consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> StepwiseClient:
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.config.bootstrap_servers,
            enable_auto_commit=False,
            fetch_max_wait_ms=self.config.fetch_max_wait_ms,
        )
        await self.consumer.start()
        parts = []
        for topic in (self.topics.events, self.topics.results):
            for p in self.consumer.partitions_for_topic(topic) or await self._partitions(topic):
                parts.append(TopicPartition(topic, p))
        self.consumer.assign(parts)
        await self.consumer.seek_to_end(*parts)  # only what happens from now on
        for tp in parts:  # resolve the end offsets now, before anything is published
            await self.consumer.position(tp)
        return self

    async def _partitions(self, topic: str) -> set[int]:
        assert self.consumer is not None
        await self.consumer._client.force_metadata_update()  # noqa: SLF001
        return self.consumer.partitions_for_topic(topic) or {0}

    async def __aexit__(self, *exc) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
        await self.producer.stop()

    async def submit(self, job: schema.Job) -> None:
        await self.producer.send(self.topics.jobs, schema.encode(job), key=job.id)

    async def follow(
        self, job_ids: set[str], timeout_s: float = 300.0, grace_s: float = 2.0
    ) -> AsyncIterator[schema.Event | schema.Result]:
        """Events and Results of these jobs until every Result is in.

        Events and Results travel on different topics, so a Result can overtake its job's
        last events: after an ok Result, reading goes on until that job's `final` event is in
        (or `grace_s` passes).
        """
        assert self.consumer is not None
        loop = asyncio.get_running_loop()
        waiting = set(job_ids)
        finals: dict[str, float] = {}  # ok Results still missing their final event -> deadline
        deadline = loop.time() + timeout_s
        while waiting or finals:
            now = loop.time()
            finals = {k: t for k, t in finals.items() if t > now}
            if not waiting and not finals:
                break
            if now >= deadline:
                raise TimeoutError(f"no Result within {timeout_s}s for {sorted(waiting)[:5]}")
            batch = await self.consumer.getmany(timeout_ms=int(min(deadline - now, 0.2) * 1000))
            for tp, records in batch.items():
                for r in records:
                    key = r.key.decode() if r.key else ""
                    if key not in job_ids:
                        continue
                    if tp.topic == self.topics.results:
                        result = schema.decode(r.value, schema.Result)
                        if result.id in waiting and result.status == "ok":
                            finals[result.id] = loop.time() + grace_s
                        waiting.discard(result.id)
                        yield result
                    else:
                        event = schema.decode(r.value, schema.Event)
                        if event.kind == "final":
                            finals.pop(event.id, None)
                        yield event
