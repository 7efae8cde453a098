"""The budget limits in Redis: one hash per SLO class with a version bumped on every publish."""

from __future__ import annotations

import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline import schema
from pipeline.budget.law import BudgetLimits

# -- Redis state ----------------------------------------------------------------------------

_FIELDS = ("max_steps", "max_thinking_tokens", "probe_effort")


def budget_key(prefix: str, slo_class: str) -> str:
    return f"{prefix}budget:{slo_class}"


async def publish(redis: Redis, prefix: str, slo_class: str, limits: BudgetLimits) -> int:
    """Writes the class's limits and bumps its version in one MULTI/EXEC; returns the version.

    The version is a field of the same hash, so a reader's HGETALL sees limits and version
    from the same publish; HINCRBY keeps it increasing across controller restarts."""
    key = budget_key(prefix, slo_class)
    mapping = {name: getattr(limits, name) for name in _FIELDS}
    mapping["updated_ms"] = int(time.time() * 1000)
    async with redis.pipeline(transaction=True) as p:
        p.hset(key, mapping=mapping)
        p.hincrby(key, "version", 1)
        _, version = await p.execute()
    return int(version)


async def read(redis: Redis, prefix: str, slo_class: str) -> BudgetLimits | None:
    """The class's published limits; None when nothing was published (callers use defaults)."""
    raw = await redis.hgetall(budget_key(prefix, slo_class))
    if not raw:
        return None
    got = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    return BudgetLimits(
        max_steps=got["max_steps"],
        max_thinking_tokens=got["max_thinking_tokens"],
        probe_effort=got["probe_effort"],
        version=got.get("version", 0),
    )


class BudgetReader:
    """Cached reads of the live limits: ingest reads per admission, decode per step boundary,
    so each class is fetched from Redis at most once per `refresh_s`."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "stepwise:",
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.refresh_s = refresh_s
        self.clock = clock
        self._cache: dict[str, tuple[float, BudgetLimits | None]] = {}
        # The same limits as a Budget, built once per read: decode asks for it every tick.
        self._budgets: dict[str, schema.Budget | None] = {}
        self.num_reads = 0  # Redis round trips, for tests and metrics

    async def get(self, slo_class: str) -> BudgetLimits | None:
        now = self.clock()
        hit = self._cache.get(slo_class)
        if hit is not None and now - hit[0] < self.refresh_s:
            return hit[1]
        try:
            limits = await read(self.redis, self.prefix, slo_class)
        except (RedisError, OSError):
            # Redis away: keep serving what we had (or the defaults), retry next refresh.
            limits = hit[1] if hit is not None else None
        self.num_reads += 1
        self._cache[slo_class] = (now, limits)
        self._budgets[slo_class] = limits.to_budget() if limits is not None else None
        return limits

    def cached(self, slo_class: str) -> schema.Budget | None:
        """The last limits read, as a Budget (ingest's synchronous BudgetSource); no I/O."""
        return self._budgets.get(slo_class)
