"""Per-tenant rate limits: one token bucket per tenant (jobs/s refill, `burst` capacity).

Pure logic with an injectable clock; the Gateway takes a token for every job it accepts and
answers 429 with `Retry-After` when the bucket is empty. Limits are per gateway replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class RateLimit:
    """`rate` jobs per second sustained, up to `burst` at once; rate 0: no limit."""

    rate: float = 0.0
    burst: int = 1

    def __post_init__(self) -> None:
        if self.rate < 0 or self.burst < 1:
            raise ValueError(f"rate must be >= 0 and burst >= 1, got {self.rate}/{self.burst}")

    @property
    def is_limited(self) -> bool:
        return self.rate > 0


class TokenBucket:
    def __init__(self, limit: RateLimit, now: float):
        self.limit = limit
        self.tokens = float(limit.burst)  # a new tenant may burst at once
        self.updated = now

    def take(self, now: float) -> float:
        """Take one token: 0.0 if granted, else the seconds until one is there."""
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(float(self.limit.burst), self.tokens + elapsed * self.limit.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.limit.rate


class RateLimiter:
    """A bucket per tenant; `overrides` name tenants whose limit differs from `default`."""

    def __init__(
        self,
        default: RateLimit,
        overrides: dict[str, RateLimit] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.default = default
        self.overrides = dict(overrides or {})
        self.clock = clock
        self.buckets: dict[str, TokenBucket] = {}

    def limit_for(self, tenant: str) -> RateLimit:
        return self.overrides.get(tenant, self.default)

    def take(self, tenant: str) -> float:
        """0.0: go ahead (a token was taken); else retry after this many seconds."""
        limit = self.limit_for(tenant)
        if not limit.is_limited:
            return 0.0
        now = self.clock()
        bucket = self.buckets.get(tenant)
        if bucket is None or bucket.limit != limit:
            bucket = self.buckets[tenant] = TokenBucket(limit, now)
        return bucket.take(now)
