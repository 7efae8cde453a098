"""Multi-granularity cache (docs/cache.md): answer, step and prefix levels in Redis (L2) behind an
in-process LRU (L1), with user / app / tenant scopes. Keys, rules and API: docs/cache.md.

One Cache belongs to one asyncio loop: L1 is touched only between awaits, so it needs no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec
from redis.asyncio import Redis

from pipeline import schema
from pipeline.cache.config import (
    _MS_MARGIN_S,
    CACHEABLE_STOPS,
    CACHEABLE_VERDICTS,
    KEY_VERSION,
    SCOPES,
    CacheConfig,
    Scope,
    ScopeName,
    _check_scopes,
    _encoder,
)
from pipeline.cache.keys import _bounded, _text, digest, normalize_text
from pipeline.cache.lru import LRU, CacheStats


class Cache:
    """The three levels; L1 in front of Redis for answers and steps, Redis only for routing."""

    def __init__(
        self,
        redis: Redis,
        config: CacheConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis  # decode_responses=False: values are msgpack bytes
        self.config = config = config or CacheConfig()
        self.clock = clock
        self.l1 = LRU(config.l1_max_entries, clock)
        self.stats = CacheStats()

    def key(self, level: str, scope_name: ScopeName, scope: Scope, content: str) -> str:
        h = digest(level, scope_name, scope.ids(scope_name), content)
        return f"{self.config.key_prefix}cache:v{KEY_VERSION}:{level}:{scope_name}:{h}"

    def _count(self, name: str, n: int = 1) -> None:
        setattr(self.stats, name, getattr(self.stats, name) + n)

    async def _get(self, level: str, scope: Scope, content: str) -> bytes | None:
        keys = [self.key(level, s, scope, content) for s in SCOPES]
        for k in keys:
            if (value := self.l1.get(k)) is not None:
                self._count(f"{level}_l1_hits")
                return value
        self._count(f"{level}_l1_misses")
        now = self.clock()  # before the read: L1 then expires no later than Redis does
        async with self.redis.pipeline(transaction=False) as p:
            for k in keys:
                p.get(k).pttl(k)
            found = await p.execute()
        for i, k in enumerate(keys):
            value, pttl = found[2 * i], found[2 * i + 1]
            if value is not None and pttl != -2:
                ttl = self.config.l1_ttl_cap_s if pttl < 0 else pttl / 1000 - _MS_MARGIN_S
                if k not in self.l1:  # else a put landed during the await: it is newer
                    self.l1.put(k, value, now + min(ttl, self.config.l1_ttl_cap_s))
                self._count(f"{level}_l2_hits")
                return value
        self._count(f"{level}_l2_misses")
        return None

    async def _put(
        self, level: str, scope: Scope, content: str, value: bytes, scopes: Sequence[ScopeName]
    ) -> None:
        scopes = tuple(scopes or self.config.put_scopes)
        _check_scopes(scopes)
        keys = [self.key(level, s, scope, content) for s in scopes]
        for k in keys:
            self.l1.pop(k)  # invalidate first: a failed write leaves no stale L1 entry
        now = self.clock()
        async with self.redis.pipeline(transaction=False) as p:
            for s, k in zip(scopes, keys, strict=True):
                p.set(k, value, px=max(1, int(self.config.ttl_s(s) * 1000)))
            await p.execute()
        for s, k in zip(scopes, keys, strict=True):
            ttl = min(self.config.ttl_s(s) - _MS_MARGIN_S, self.config.l1_ttl_cap_s)
            self.l1.put(k, value, now + ttl)
        self._count(f"{level}_puts")

    # -- answer level ---------------------------------------------------------------------------

    async def get_answer(self, scope: Scope, key: str) -> bytes | None:
        """The cached Result bytes (msgpack) for an `answer_key`, narrowest scope first."""
        return await self._get("answer", scope, key)

    async def put_answer(
        self, scope: Scope, key: str, result: schema.Result, scopes: Sequence[ScopeName] = ()
    ) -> bool:
        """Store a complete, successful Result; False (nothing stored) for any other."""
        if result.status != "ok" or result.budget.stop_reason not in CACHEABLE_STOPS:
            self._count("answer_refused")
            return False
        await self._put("answer", scope, key, schema.encode(result), scopes)
        return True

    # -- step level -----------------------------------------------------------------------------

    @staticmethod
    def step_content(job_key: str, accepted_steps: Sequence[str]) -> str:
        return digest(job_key, [normalize_text(s) for s in accepted_steps])

    def step_keys(self, scope: Scope, job_key: str, accepted_steps: Sequence[str]) -> list[str]:
        """The Redis keys the step after `accepted_steps` may sit under, narrowest scope first
        (decode reads many jobs' at once, in one synchronous MGET at its step boundaries)."""
        content = self.step_content(job_key, accepted_steps)
        return [self.key("step", s, scope, content) for s in SCOPES]

    @staticmethod
    def cached_step(values: Sequence[bytes | None]) -> tuple[str, str] | None:
        """(step text, verdict) from the values of `step_keys`, narrowest first; None: a miss."""
        found = next((v for v in values if v), None)
        if found is None:
            return None
        text, verdict = msgspec.msgpack.decode(found)
        return text, verdict

    async def get_step(
        self, scope: Scope, job_key: str, accepted_steps: Sequence[str]
    ) -> tuple[str, str] | None:
        """(next step text, verdict) after `accepted_steps` for a `step_key`, or None."""
        value = await self._get("step", scope, self.step_content(job_key, accepted_steps))
        return self.cached_step([value])

    async def put_step(
        self,
        scope: Scope,
        job_key: str,
        accepted_steps: Sequence[str],
        step_text: str,
        verdict: str,
        scopes: Sequence[ScopeName] = (),
    ) -> bool:
        """Store a verified next step; any other verdict (contradicted, unknown, no_claim,
        unverified) stores nothing and returns False."""
        if verdict not in CACHEABLE_VERDICTS or not step_text.strip():
            self._count("step_refused")
            return False
        content = self.step_content(job_key, accepted_steps)
        await self._put("step", scope, content, _encoder.encode([step_text, verdict]), scopes)
        return True

    # -- prefix level and liveness (always Redis: routing must see fresh ownership) --------------

    def _prefix_key(self, tenant: str, model: str, block_hash: int) -> str:
        h = digest("prefix", tenant, model, block_hash)
        return f"{self.config.key_prefix}cache:v{KEY_VERSION}:prefix:{h}"

    def _alive_key(self, worker_id: str) -> str:
        return f"{self.config.key_prefix}cache:v{KEY_VERSION}:alive:{_bounded(worker_id)}"

    async def publish_prefix(
        self, tenant: str, model: str, hashes: Sequence[int], worker_id: str
    ) -> None:
        """Say that `worker_id` holds the KV of these chained blocks, for prefix_ttl_s.

        Each block hash keys a sorted set of owners scored by their expiry (wall-clock ms), so
        several workers may hold one prefix and each claim lapses on its own."""
        await self.publish_prefixes([(tenant, model, hashes)], worker_id)

    async def publish_prefixes(
        self, claims: Sequence[tuple[str, str, Sequence[int]]], worker_id: str
    ) -> None:
        """`publish_prefix` for several prompts' (tenant, model, hashes) in one round trip (a
        prefill batch's)."""
        claims = [c for c in claims if c[2]]
        if not claims:
            return
        ttl_ms = max(1, int(self.config.prefix_ttl_s * 1000))
        now_ms = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as p:
            for tenant, model, hashes in claims:
                for h in hashes:
                    k = self._prefix_key(tenant, model, h)
                    p.zadd(k, {worker_id: now_ms + ttl_ms}).zremrangebyscore(k, "-inf", now_ms)
                    p.pexpire(k, ttl_ms)
            await p.execute()
        self._count("prefix_puts", len(claims))

    async def warm_worker(self, tenant: str, model: str, hashes: Sequence[int]) -> str | None:
        """The live worker holding the longest cached prefix of `hashes` (the latest claim
        first among equals), or None."""
        candidates: list[str] = []  # longest prefix first
        if hashes:
            now_ms = int(time.time() * 1000)
            async with self.redis.pipeline(transaction=False) as p:
                for h in hashes:
                    p.zrevrangebyscore(self._prefix_key(tenant, model, h), "+inf", f"({now_ms}")
                found = await p.execute()
            for owners in reversed(found):
                candidates += [w for w in map(_text, owners) if w not in candidates]
        if candidates:
            alive = await self.redis.mget([self._alive_key(w) for w in candidates])
            for worker, beat in zip(candidates, alive, strict=True):
                if beat is not None:
                    self._count("prefix_l2_hits")
                    return worker
            self._count("prefix_dead")
        self._count("prefix_l2_misses")
        return None

    async def mark_alive(self, worker_id: str, ttl_s: float | None = None) -> None:
        """Heartbeat: the worker counts as alive for `ttl_s` (default alive_ttl_s)."""
        ttl = self.config.alive_ttl_s if ttl_s is None else ttl_s
        await self.redis.set(self._alive_key(worker_id), b"1", px=max(1, int(ttl * 1000)))

    async def mark_dead(self, worker_id: str) -> None:
        """On a clean shutdown (in `finally`), so routing stops at once rather than at expiry."""
        await self.redis.delete(self._alive_key(worker_id))

    async def is_alive(self, worker_id: str) -> bool:
        return bool(await self.redis.exists(self._alive_key(worker_id)))
