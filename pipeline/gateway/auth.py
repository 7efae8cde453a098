"""API keys -> tenants. Keys come from config (STEPWISE_API_KEYS) and, when switched on
(STEPWISE_API_KEYS_REDIS=1), from the Redis hash `{prefix}apikeys` (field: key, value: tenant),
read through a short TTL cache. No keys at all: auth off and every caller is tenant `default`."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from starlette.requests import HTTPConnection

DEFAULT_TENANT = "default"
MAX_KEY_LEN = 256  # longer is never a key: refused before any lookup

Lookup = Callable[[str], Awaitable[str | None]]  # key -> tenant, None: unknown


class Unauthorized(Exception):
    """No key, or a key this gateway does not know (HTTP 401, WebSocket close 4401)."""


class KeysUnavailable(Exception):
    """The Redis that holds the keys did not answer (HTTP 503, WebSocket close 4503)."""


def redis_keys_name(prefix: str) -> str:
    return f"{prefix}apikeys"


class ApiKeys:
    """Config keys first, then `lookup` (Redis), whose answers are cached `ttl_s` (unknown keys
    too, so a bad key cannot hammer Redis; a revoked key stops working within `ttl_s`)."""

    def __init__(
        self,
        keys: dict[str, str],
        lookup: Lookup | None = None,
        ttl_s: float = 5.0,
        max_cached: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.keys = dict(keys)
        self.lookup = lookup
        self.ttl_s = ttl_s
        self.max_cached = max_cached
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, str | None]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return bool(self.keys) or self.lookup is not None

    def tenant_for(self, key: str | None) -> str:
        """The tenant of a config key (no Redis): for callers without a running loop."""
        if not self.enabled:
            return DEFAULT_TENANT
        if key is None or key not in self.keys:
            raise Unauthorized("missing or unknown API key")
        return self.keys[key]

    async def resolve(self, key: str | None) -> str:
        """The caller's tenant: a config key, else a Redis-held one; Unauthorized otherwise."""
        if self.lookup is None or (key is not None and key in self.keys):
            return self.tenant_for(key)
        if not key or len(key) > MAX_KEY_LEN:
            raise Unauthorized("missing or unknown API key")
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            tenant = hit[1]
        else:
            tenant = await self.lookup(key)
            self._cache[key] = (now + self.ttl_s, tenant)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        if tenant is None:
            raise Unauthorized("missing or unknown API key")
        return tenant

    def may_see(self, tenant: str, owner: str | None) -> bool:
        """A caller sees a job its tenant owns; with auth off, every job."""
        return not self.enabled or owner == tenant


def redis_lookup(client, name: str) -> Lookup:
    """A Lookup reading field `key` of the Redis hash `name` (a `redis.asyncio.Redis`)."""

    async def lookup(key: str) -> str | None:
        try:
            value = await client.hget(name, key)
        except Exception as exc:  # redis.RedisError, OSError: not the caller's fault
            raise KeysUnavailable(f"API keys unavailable: {exc}") from None
        if value is None:
            return None
        tenant = value.decode() if isinstance(value, bytes) else str(value)
        return tenant.strip() or None

    return lookup


def key_of(conn: HTTPConnection) -> str | None:
    """`Authorization: Bearer <key>`, else the `api_key` query parameter (browsers' WebSocket
    API cannot set headers)."""
    header = conn.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return conn.query_params.get("api_key")
