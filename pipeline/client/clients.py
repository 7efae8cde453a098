"""Small asyncio clients: `StepwiseClient` publishes Jobs to Kafka and follows their Events and
Results; `GatewayClient` does the same through the gateway's WebSocket (docs/gateway.md)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable

import msgspec
import websockets
from aiokafka import AIOKafkaConsumer, TopicPartition

from pipeline import schema
from pipeline.bus import BusConfig, Producer, retry_transient, start_consumer
from pipeline.errors import StepwiseError
from pipeline.topics import Topics

RESUMABLE_CLOSES = (1001, 1006, 1011, 1012, 4008)  # going away, dropped, server error, slow


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
    def __init__(
        self, bootstrap_servers: str, topic_prefix: str = "stepwise.", events: bool = True
    ):
        """`events=False`: read Results only (a batch client: the events topic, by far the
        busier one, is never fetched)."""
        self.topics = Topics(topic_prefix)
        self.events = events
        self.config = BusConfig(bootstrap_servers=bootstrap_servers, client_id="stepwise-client")
        self.producer = Producer(self.config)
        self.consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> StepwiseClient:
        await retry_transient("starting the client's producer", self.producer.start)
        self.consumer = await retry_transient("starting the client's consumer", self._consumer)
        parts = []
        topics = [self.topics.events] if self.events else []
        for topic in [*topics, self.topics.results]:
            for p in self.consumer.partitions_for_topic(topic) or await self._partitions(topic):
                parts.append(TopicPartition(topic, p))
        self.consumer.assign(parts)
        await self.consumer.seek_to_end(*parts)  # only what happens from now on
        for tp in parts:  # resolve the end offsets now, before anything is published
            await self.consumer.position(tp)
        return self

    async def _consumer(self) -> AIOKafkaConsumer:
        return await start_consumer(
            AIOKafkaConsumer(
                bootstrap_servers=self.config.bootstrap_servers,
                enable_auto_commit=False,
                fetch_max_wait_ms=self.config.fetch_max_wait_ms,
            )
        )

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

    async def submit_many(self, jobs: list[schema.Job]) -> None:
        """Publish a batch of jobs at once; returns when the broker has acknowledged all of
        them (one acknowledgement wait for the batch, not one per job)."""
        await self.producer.send_many([(self.topics.jobs, j.id, schema.encode(j)) for j in jobs])

    async def follow(
        self, job_ids: set[str], timeout_s: float = 300.0, grace_s: float = 2.0
    ) -> AsyncIterator[schema.Event | schema.Result]:
        """Events and Results of these jobs until every Result is in (only the Results for a
        client made with `events=False`).

        Events and Results travel on different topics, so a Result can overtake its job's
        last events: after an ok or cached Result, reading goes on until that job's `final`
        event is in (or `grace_s` passes).
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
                        final_due = self.events and result.status in ("ok", "cached")
                        if result.id in waiting and final_due:
                            finals[result.id] = loop.time() + grace_s
                        waiting.discard(result.id)
                        yield result
                    else:
                        event = schema.decode(r.value, schema.Event)
                        if event.kind == "final":
                            finals.pop(event.id, None)
                        yield event


class GatewayStreamError(StepwiseError):
    """The gateway refused the stream (its `{"error": ...}` message), or it broke for good."""


def stream_url(url: str) -> str:
    """`http(s)://host:port[/...]` or `ws(s)://...` -> the `/v1/stream` WebSocket URL."""
    url = url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            url = ws + url[len(http) :]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url if url.endswith("/v1/stream") else url + "/v1/stream"


class GatewayClient:
    """The gateway's WebSocket stream: submit a Job (or follow a job id) and read its Events in
    `seq` order, then its Result. A dropped connection (or a slow-consumer close) is resumed
    from the next `seq`, at most `max_resumes` times in a row, so no event is lost or repeated.
    """

    def __init__(
        self, url: str, api_key: str | None = None, max_resumes: int = 5, open_timeout: float = 10
    ):
        self.url = stream_url(url)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.max_resumes = max_resumes
        self.open_timeout = open_timeout
        self.num_resumes = 0  # reconnections, over every stream of this client
        self.num_duplicates = 0  # events received again (after a resume) and dropped here

    async def stream(
        self,
        submit: dict | None = None,
        *,
        job_id: str | None = None,
        from_seq: int = 0,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[schema.Event | schema.Result]:
        """Submit `submit` (a Job as a dict; an id is added if it has none) or follow `job_id`;
        `on_open()` runs once the request is sent on each connection."""
        if submit is not None:
            submit = {"id": f"cli-{uuid.uuid4().hex[:12]}", **submit}
            job_id = submit["id"]
            first: dict = {"submit": submit}
        elif job_id is not None:
            first = {"subscribe": job_id, "from_seq": from_seq}
        else:
            raise ValueError("give a Job to submit or a job_id to follow")
        next_seq, resumes = from_seq, 0
        while True:
            async with websockets.connect(
                self.url, additional_headers=self.headers, open_timeout=self.open_timeout
            ) as ws:
                await ws.send(json.dumps(first))
                if on_open is not None:
                    on_open()
                try:
                    async for raw in ws:
                        try:  # the hot path: an Event, decoded and checked in one pass
                            event = msgspec.json.decode(raw, type=schema.Event)
                        except msgspec.ValidationError:
                            event = None
                        if event is not None:
                            if event.seq < next_seq:
                                self.num_duplicates += 1
                                continue  # already had it
                            next_seq, resumes = event.seq + 1, 0
                            yield event
                            continue
                        msg = json.loads(raw)
                        if "kind" not in msg and isinstance(msg.get("error"), dict):
                            err = msg["error"]  # the refusal; the close (4xxx) follows
                            raise GatewayStreamError(err.get("message", ""), code=err.get("code"))
                        if msg.get("kind") == "result":
                            msg.pop("kind")
                            yield msgspec.convert(msg, schema.Result)
                            return
                        # else: a message this client does not know (a newer gateway): skipped
                except websockets.ConnectionClosedError:
                    pass  # closed without a close frame: resumable, see below
            code, reason = ws.close_code, ws.close_reason or ""
            if code not in RESUMABLE_CLOSES and code is not None:
                raise GatewayStreamError(f"stream closed {code} {reason}".strip(), code="closed")
            if resumes >= self.max_resumes:
                raise GatewayStreamError(f"stream lost ({code} {reason})", code="stream_lost")
            resumes += 1
            self.num_resumes += 1
            await asyncio.sleep(0.2 * resumes)
            first = {"subscribe": job_id, "from_seq": next_seq}
