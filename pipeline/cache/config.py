"""The cache's configuration and scopes (docs/cache.md): user, app, tenant (always hashed)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

import msgspec

KEY_VERSION = 2  # bump on any change of key or value layout: old entries are then never read
ScopeName = Literal["user", "app", "tenant"]
SCOPES: tuple[ScopeName, ...] = ("user", "app", "tenant")  # lookup order: narrowest first
CACHEABLE_VERDICTS = frozenset({"entailed", "consistent"})  # what "verified" means here
CACHEABLE_STOPS = frozenset({"answer", "early_exit"})  # a complete answer, not a cut-off one
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_INNER_SPACE = re.compile(r"(?<=\S)[^\S\n]+")  # a run after a non-space: never indentation
_BLANK_LINES = re.compile(r"\n{3,}")
_encoder = msgspec.msgpack.Encoder()
_MS_MARGIN_S = 0.002  # Redis counts whole milliseconds: L1 lets go this much earlier


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """TTLs per scope, prefix ownership and liveness TTLs, L1 bounds, the Redis key prefix."""

    user_ttl_s: float = 15 * 60
    app_ttl_s: float = 2 * 3600
    tenant_ttl_s: float = 24 * 3600
    prefix_ttl_s: float = 120.0  # prefill re-publishes ownership on every prefill
    alive_ttl_s: float = 10.0  # a worker refreshes its heartbeat every third of this
    l1_max_entries: int = 4096  # 0: no L1
    l1_ttl_cap_s: float = 30.0  # puts in other processes are not broadcast: bounds staleness
    put_scopes: tuple[ScopeName, ...] = ("tenant",)  # where a put writes unless told
    key_prefix: str = "stepwise:"

    def __post_init__(self) -> None:
        for name in ("user_ttl_s", "app_ttl_s", "tenant_ttl_s", "prefix_ttl_s", "alive_ttl_s"):
            if (value := getattr(self, name)) < 0.001:
                raise ValueError(f"CacheConfig.{name} must be >= 0.001 s, got {value}")
        if self.l1_max_entries < 0 or self.l1_ttl_cap_s <= 0:
            raise ValueError("CacheConfig: l1_max_entries must be >= 0 and l1_ttl_cap_s > 0")
        _check_scopes(self.put_scopes)

    def ttl_s(self, scope: ScopeName) -> float:
        return getattr(self, f"{scope}_ttl_s")


def _check_scopes(scopes: Iterable[str]) -> None:
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {SCOPES}, got {tuple(scopes)}")


class _HasScope(Protocol):
    tenant: str
    app: str
    user: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a job runs for; a user belongs to an app, an app to a tenant."""

    tenant: str
    app: str = "default"
    user: str = "default"

    @classmethod
    def of(cls, msg: _HasScope) -> Scope:
        """The scope of a Job, PrefillTask or Handoff."""
        return cls(msg.tenant, msg.app, msg.user)

    def ids(self, name: ScopeName) -> tuple[str, ...]:
        """The ids a key at scope `name` hashes: the tenant always, then narrower ones."""
        return (self.tenant, self.app, self.user)[: SCOPES[::-1].index(name) + 1]
