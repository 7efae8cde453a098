"""Infrastructure errors that pass on their own, and the backoff a stage retries them with.

A stage's handler talks to Redis (job state, caches) and the broker on every record. When
Redis restarts or the broker stops answering for a while, those calls fail with connection
errors and timeouts that say nothing about the record: the same record succeeds a few seconds
later. Dead-lettering it then (what the consume loop does with any handler error) would turn a
good job into a `rejected` one. `StageWorker` retries such errors with `Backoff` up to a
deadline, and dead-letters only what is not transient (docs/pipeline.md, "Faults").
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.errors import KafkaError, KafkaTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How long a stage retries one record through an outage before it dead-letters it: past this,
# the outage is not transient, and the job gets a clear error Result instead of waiting on.
TRANSIENT_RETRY_S = 60.0

_TRANSIENT = (
    # Redis restarting, refusing or dropping connections (and BusyLoadingError, a subclass:
    # a Redis that restarted with persistence, still loading its data)
    RedisConnectionError,
    RedisTimeoutError,
    KafkaTimeoutError,  # a send the broker did not take in time (aiokafka: not "retriable")
    ConnectionError,  # the builtin: a socket refused or reset under any client
    TimeoutError,  # asyncio's and the socket's (one class since Python 3.11)
)


def is_transient(exc: BaseException) -> bool:
    """True for an error that says the infrastructure is away for now, not that the record or
    the code is wrong: a Redis connection error or timeout, a refused or reset socket, a
    retriable Kafka error (aiokafka marks them)."""
    if isinstance(exc, _TRANSIENT):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


@dataclass(slots=True)
class Backoff:
    """Exponential delays: `first`, doubling, at most `cap` (a retry loop's sleeps)."""

    first: float = 0.1
    cap: float = 5.0
    _next: float = 0.0

    def next(self) -> float:
        """The delay before the next retry."""
        self._next = self.first if self._next == 0.0 else min(self._next * 2, self.cap)
        return self._next

    def reset(self) -> None:
        self._next = 0.0
