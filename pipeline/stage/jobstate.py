"""Job state in Redis that makes at-least-once delivery harmless (docs/pipeline.md).

* admission: `SET NX` of the job id with the source offset. The same offset again is a
  redelivery (redo the work: the first try may have died before its output was acked); a
  different offset is a duplicate publish of the same job id (drop it).
* done: set after a job's Result is acknowledged by the broker; a redelivered handoff of a
  done job is skipped, so each job id gets one Result.
* KV acks: a decode worker pushes the handle of an imported KV buffer to the exporter's list;
  the exporter releases the buffer when it reads it.
"""

from __future__ import annotations

import logging
from enum import Enum

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)


class Admission(Enum):
    NEW = "new"
    REDELIVERY = "redelivery"
    DUPLICATE = "duplicate"


class JobState:
    def __init__(self, redis: Redis, prefix: str = "stepwise:", ttl_s: int = 24 * 3600):
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_s

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    async def admit(self, job_id: str, source: str) -> Admission:
        key = self._key("admit", job_id)
        if await self.redis.set(key, source, nx=True, ex=self.ttl_s):
            return Admission.NEW
        seen = await self.redis.get(key)
        seen = seen.decode() if isinstance(seen, bytes) else seen
        return Admission.REDELIVERY if seen == source else Admission.DUPLICATE

    async def is_done(self, job_id: str) -> bool:
        return bool(await self.redis.exists(self._key("done", job_id)))

    async def mark_done(self, job_id: str, worker: str) -> bool:
        """True if this call marked it (False: someone had already)."""
        return bool(await self.redis.set(self._key("done", job_id), worker, nx=True, ex=self.ttl_s))

    async def ack_kv(self, owner: str, handle: str) -> None:
        key = self._key("kvack", owner)
        async with self.redis.pipeline(transaction=False) as p:
            p.rpush(key, handle)
            p.expire(key, 3600)
            await p.execute()

    async def take_kv_acks(self, owner: str, max_items: int = 256) -> list[str]:
        """The handles importers acked, taken off the list; none while Redis is away (a release
        is only early: an unacked lease still expires). Prefill asks on every loop turn, and
        the error once ended that loop, and with it the worker's prefilling."""
        try:
            items = await self.redis.lpop(self._key("kvack", owner), max_items)
        except (RedisConnectionError, RedisTimeoutError) as e:
            log.warning("cannot take KV acks now (%r); the leases will expire if need be", e)
            return []
        return [i.decode() if isinstance(i, bytes) else i for i in items or []]
