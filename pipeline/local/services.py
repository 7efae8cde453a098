"""Local services: Kafka and Redis for one process tree.

`LocalServices` takes Kafka from `STEPWISE_KAFKA` (bootstrap servers) and Redis from
`STEPWISE_REDIS` (URL) when set, and starts embedded ones only for what is unset. The embedded
broker and Redis, and their quirks, are in pipeline/local/embedded.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

# The local-services API callers import from here (the parts live in embedded.py, the broker's
# administration in pipeline/bus/broker.py, process plumbing in pipeline/stage/processes.py).
from pipeline.bus.broker import (
    EMBEDDED_FETCH_MAX_WAIT_MS,
    EMBEDDED_GROUP_OPTIONS,
    create_topics,
    group_options_for,
    kafka_metadata_answers,
)
from pipeline.errors import ServiceError
from pipeline.local.embedded import (
    KAFKA_ENV,
    REDIS_ENV,
    START_TIMEOUT_S,
    EmbeddedKafka,
    EmbeddedRedis,
    EmbeddedService,
)
from pipeline.stage.processes import (
    HOST,
    child_setup,
    find_redis_server,
    find_tansu,
    free_port,
    set_parent_death_signal,
    spawned_children,
)

__all__ = [
    "EMBEDDED_FETCH_MAX_WAIT_MS",
    "EMBEDDED_GROUP_OPTIONS",
    "HOST",
    "KAFKA_ENV",
    "REDIS_ENV",
    "EmbeddedKafka",
    "EmbeddedRedis",
    "LocalServices",
    "ServiceError",
    "child_setup",
    "create_topics",
    "find_redis_server",
    "find_tansu",
    "free_port",
    "group_options_for",
    "kafka_metadata_answers",
    "set_parent_death_signal",
    "spawned_children",
]


class LocalServices:
    """Kafka and Redis for one process tree: the ones named (STEPWISE_KAFKA / STEPWISE_REDIS
    in the settings), else embedded ones."""

    def __init__(
        self,
        *,
        kafka: str | None = None,
        redis: str | None = None,
        kafka_port: int | None = None,
        redis_port: int | None = None,
        log_dir: str | Path | None = None,
        nice: int = 0,
    ) -> None:
        """`kafka` / `redis`: bootstrap servers / URL of running ones (None or empty: embed one);
        `nice`: how many steps below this process the embedded services run."""
        self._env_kafka, self._env_redis = (kafka or None), (redis or None)
        self.kafka = None if self._env_kafka else EmbeddedKafka(kafka_port, log_dir=log_dir)
        self.redis = None if self._env_redis else EmbeddedRedis(redis_port, log_dir=log_dir)
        for svc in self.embedded:
            svc.nice = nice

    @property
    def bootstrap_servers(self) -> str:
        return self._env_kafka or self.kafka.bootstrap_servers

    @property
    def redis_url(self) -> str:
        return self._env_redis or self.redis.url

    @property
    def embedded(self) -> list[EmbeddedService]:
        return [s for s in (self.kafka, self.redis) if s is not None]

    def describe(self) -> list[str]:
        """One line per service: where it is and where it came from (for `stepwise up`)."""
        lines = []
        for label, addr, svc, env in (
            ("kafka", lambda: self.bootstrap_servers, self.kafka, KAFKA_ENV),
            ("redis", lambda: self.redis_url, self.redis, REDIS_ENV),
        ):
            origin = f"embedded {svc.name}, log {svc.log_path}" if svc else f"from ${env}"
            lines.append(f"{label:<6}{addr()}  ({origin})")
        return lines

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        try:
            for svc in self.embedded:
                svc.start(timeout)
        except BaseException:
            self.stop()
            raise

    async def astart(self, timeout: float = START_TIMEOUT_S) -> None:
        try:
            for svc in self.embedded:
                await svc.astart(timeout)
        except BaseException:
            await self.astop()
            raise

    def stop(self) -> None:
        for svc in reversed(self.embedded):
            svc.stop()

    async def astop(self) -> None:
        await asyncio.gather(*(svc.astop() for svc in self.embedded))

    def __enter__(self) -> LocalServices:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    async def __aenter__(self) -> LocalServices:
        await self.astart()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.astop()
