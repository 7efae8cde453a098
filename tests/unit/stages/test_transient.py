"""Transient infrastructure errors: which are, the backoff, a stage's retry of its handler, a
dead background task failing its worker, and KV acks while Redis is away (issue 24)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaTimeoutError, NodeNotReadyError, UnsupportedVersionError
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pipeline import schema
from pipeline.config import PipelineConfig
from pipeline.stage import worker as stage_worker
from pipeline.stage.jobstate import JobState
from pipeline.stage.transient import Backoff, is_transient
from pipeline.stage.worker import StageWorker


@pytest.mark.parametrize(
    "exc",
    [
        RedisConnectionError("Connection closed by server."),
        RedisTimeoutError("Timeout reading from socket"),
        BusyLoadingError("loading"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError(),
        NodeNotReadyError("node 1"),  # aiokafka marks it retriable
        KafkaTimeoutError(),  # aiokafka does not, but a send that timed out is the broker's
    ],
)
def test_infrastructure_that_comes_back_is_transient(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        schema.SchemaError("bad record", code="bad_request"),
        ValueError("bad"),
        ResponseError("WRONGTYPE"),  # Redis answered: retrying changes nothing
        UnsupportedVersionError("no"),
    ],
)
def test_errors_about_the_record_or_the_code_are_not(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_reset() -> None:
    backoff = Backoff(first=0.1, cap=0.5)
    assert [backoff.next() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.next() == 0.1


class Flaky(StageWorker):
    """A stage whose handler fails with `error` the first `failures` times, then acks."""

    def __init__(self, failures: int, error: Exception) -> None:
        super().__init__(PipelineConfig(kafka="127.0.0.1:1", redis="redis://127.0.0.1:1/0"))
        self.failures, self.error, self.calls = failures, error, 0

    async def handle(self, record, ack) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        ack()


RECORD = SimpleNamespace(topic="t.jobs", partition=0, offset=7)


class Acks:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1


async def test_a_handler_that_hits_a_redis_restart_is_retried_not_dead_lettered(caplog) -> None:
    worker, acks = Flaky(2, RedisConnectionError("Connection closed by server.")), Acks()
    await worker.handle_retrying(RECORD, acks)  # type: ignore[arg-type]
    assert (worker.calls, acks.n) == (3, 1)
    assert caplog.text.count("retrying in") == 2  # each retry is logged, with the record


async def test_a_bad_record_is_raised_at_once_for_the_dead_letter_path() -> None:
    worker, acks = Flaky(1, ValueError("bad")), Acks()
    with pytest.raises(ValueError):
        await worker.handle_retrying(RECORD, acks)  # type: ignore[arg-type]
    assert (worker.calls, acks.n) == (1, 0)


async def test_an_outage_past_the_deadline_becomes_the_jobs_error(monkeypatch) -> None:
    monkeypatch.setattr(stage_worker, "TRANSIENT_RETRY_S", 0.25)
    worker, acks = Flaky(100, RedisConnectionError("refused")), Acks()
    with pytest.raises(RedisConnectionError):
        await worker.handle_retrying(RECORD, acks)  # type: ignore[arg-type]
    assert 2 <= worker.calls <= 3 and acks.n == 0  # 0.1 s, 0.2 s: then the deadline


async def test_a_stopping_worker_gives_the_record_back_unacked() -> None:
    worker, acks = Flaky(100, RedisConnectionError("refused")), Acks()
    worker.stop()
    await worker.handle_retrying(RECORD, acks)  # type: ignore[arg-type]
    assert (worker.calls, acks.n) == (1, 0)  # not acked: redelivered to the next owner


async def test_a_background_task_that_dies_fails_its_worker() -> None:
    worker = Flaky(0, ValueError("unused"))

    async def prefill_loop() -> None:
        raise RedisConnectionError("Connection closed by server.")

    consume = asyncio.create_task(asyncio.Event().wait())  # a consume loop that runs on
    worker._tasks.append(asyncio.create_task(prefill_loop(), name="prefill-loop"))
    async with asyncio.timeout(5):
        await worker._until_stopped(consume)
    assert worker.failure is not None and "prefill-loop died" in str(worker.failure)
    consume.cancel()


async def test_a_task_that_ends_quietly_does_not() -> None:
    worker = Flaky(0, ValueError("unused"))

    async def done_early() -> None:
        return None

    consume = asyncio.create_task(asyncio.Event().wait())
    worker._tasks.append(asyncio.create_task(done_early()))
    waiting = asyncio.create_task(worker._until_stopped(consume))
    await asyncio.sleep(0.05)
    assert not waiting.done() and worker.failure is None
    worker.stop()
    await waiting
    assert worker.failure is None
    consume.cancel()


async def test_an_outage_past_the_retries_is_an_unavailable_error_not_a_rejection() -> None:
    worker = Flaky(0, ValueError("unused"))
    sent: list[tuple[str, object]] = []

    async def publish(stage: str, key: str, msg: object) -> None:
        sent.append((stage, msg))

    async def publish_result(result: schema.Result, reply_topic: str | None = None) -> None:
        sent.append(("results", result))

    worker.publish, worker.publish_result = publish, publish_result  # type: ignore[method-assign]
    job = schema.encode(schema.Job(id="j-1", prompt="What is 2 + 2?"))
    record = SimpleNamespace(topic="t.jobs", partition=0, offset=3, key=b"j-1", value=job,
                             headers=[])  # fmt: skip
    await worker.on_poison(record, RedisConnectionError("refused"))  # type: ignore[arg-type]
    (_, dead), (_, result) = sent
    assert dead.code == "unavailable" and result.status == "error"
    assert result.error.code == "unavailable" and "refused" in result.error.message
    sent.clear()
    await worker.on_poison(record, ValueError("bad"))  # type: ignore[arg-type]
    assert sent[1][1].status == "rejected" and sent[1][1].error.code == "internal"


class DownRedis:
    async def lpop(self, key: str, count: int) -> list[bytes]:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


async def test_kv_acks_while_redis_is_away_are_none_not_an_error() -> None:
    assert await JobState(DownRedis()).take_kv_acks("prefill-1") == []  # type: ignore[arg-type]
