"""Multi-granularity cache (docs/cache.md): answer, step and prefix levels in Redis (L2) behind an
in-process LRU (L1), with user / app / tenant scopes. Keys, rules and API: docs/cache.md.

Every key is a blake2b digest over the key version, the level, the scope's ids (the tenant id
always among them) and the content, so one tenant's entries are unreachable from another's.
One Cache belongs to one asyncio loop: L1 is touched only between awaits, so it needs no lock.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import msgspec
from redis.asyncio import Redis

from pipeline import schema

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


@dataclass(slots=True)
class CacheStats:
    """Plain counters per level and layer; telemetry reads them (`as_dict`)."""

    answer_l1_hits: int = 0
    answer_l1_misses: int = 0
    answer_l2_hits: int = 0
    answer_l2_misses: int = 0
    answer_puts: int = 0
    answer_refused: int = 0
    step_l1_hits: int = 0
    step_l1_misses: int = 0
    step_l2_hits: int = 0
    step_l2_misses: int = 0
    step_puts: int = 0
    step_refused: int = 0
    prefix_l2_hits: int = 0
    prefix_l2_misses: int = 0  # no owner, or no live owner
    prefix_dead: int = 0  # lookups that had owners, all of them dead
    prefix_puts: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class LRU:
    """Bounded map with an absolute deadline per entry on an injected clock; least recently
    used goes first."""

    def __init__(self, max_entries: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.clock() >= entry[1]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, value: bytes, expires_at: float) -> None:
        if self.max_entries == 0 or expires_at <= self.clock():
            self._entries.pop(key, None)
            return
        self._entries[key] = (value, expires_at)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def pop(self, key: str) -> None:
        self._entries.pop(key, None)


# -- keys: pure functions ----------------------------------------------------------------------


def digest(*parts: Any) -> str:
    """128-bit hex blake2b of the key version and the parts (msgpack: an unambiguous encoding)."""
    return hashlib.blake2b(_encoder.encode([KEY_VERSION, *parts]), digest_size=16).hexdigest()


def normalize_text(text: str) -> str:
    """NFC; line ends to \\n; trailing spaces cut; runs of spaces inside a line become one space;
    3+ newlines become 2; outer blank space stripped. Indentation is kept (code prompts)."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [_INNER_SPACE.sub(" ", line.rstrip()) for line in text.split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def is_reproducible(params: schema.JobParams) -> bool:
    """Greedy, or sampled with the user's own seed (ingest gives every other job a seed of its
    own id, so two such jobs never sample alike)."""
    return params.temperature == 0.0 or params.seed is not None


def _sampling(p: schema.JobParams) -> tuple | None:
    """The sampling knobs as floats (an int 0 and 0.0 must hash alike); None when greedy."""
    if p.temperature == 0.0:
        return None
    return (float(p.temperature), float(p.top_p), int(p.top_k), float(p.min_p))


def deterministic_params(params: schema.JobParams) -> tuple | None:
    """The params that shape the Result, canonical; None when the Result is not reproducible.
    Greedy decoding ignores the sampling knobs and the seed, so they are left out then."""
    if not is_reproducible(params):
        return None
    p, sampling = params, _sampling(params)
    seed = p.seed if sampling else None
    return (sampling, seed, p.max_tokens, p.max_steps, p.verify, p.early_exit)


def _prompt_part(prompt: str | None, messages: Sequence[schema.Message] | None) -> list:
    if messages is not None:
        return ["messages", [[m.role, normalize_text(m.content)] for m in messages]]
    return ["prompt", normalize_text(prompt or "")]


def _premises_part(premises: Iterable[str]) -> list[str]:
    return sorted({normalize_text(p) for p in premises})  # a set of assumptions: order-free


def answer_key(job: schema.Job, model: str) -> str | None:
    """The answer-level content key of a Job as received (before ingest assigns a seed), run on
    `model` (job.model or the default pool); None when its Result is not reproducible."""
    params = deterministic_params(job.params)
    if params is None:
        return None
    prompt = _prompt_part(job.prompt, job.messages)
    return digest("answer", model, prompt, _premises_part(job.premises), params)


def step_key(
    model: str, prompt: str | Sequence[int], premises: Iterable[str], params: schema.JobParams
) -> str | None:
    """The step-level base key of one job, computed once; `prompt` is its text or its token ids.
    None for a sampled job without its own seed: a cached step would remove the diversity asked
    for. Verdicts depend on premises, so they are part of the key. A sampled job's seed is too,
    as in `answer_key`: steps sampled under one seed spliced into another seed's run would make
    a seeded Result depend on the jobs run before it. Greedy steps leave the seed out.

    Decode passes the params as admitted, where ingest has given an unseeded job a seed of its
    own id (`job_seed`): such a job's steps then serve only its own redelivery."""
    if not is_reproducible(params):
        return None
    text = normalize_text(prompt) if isinstance(prompt, str) else list(prompt)
    sampling = _sampling(params)
    seed = params.seed if sampling else None
    return digest("step", model, text, _premises_part(premises), sampling, seed, params.verify)


def prefix_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids`, as the engine's BlockManager makes them."""
    from pipeline.engine.block_manager import NO_HASH, hash_block  # lazy: the engine pulls torch

    hashes, prev = [], NO_HASH
    for i in range(len(token_ids) // block_size):
        prev = hash_block(prev, list(token_ids[i * block_size : (i + 1) * block_size]))
        hashes.append(prev)
    return hashes


def _bounded(name: str) -> str:
    return name if _SAFE_ID.match(name) else digest("id", name)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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

    async def get_step(
        self, scope: Scope, job_key: str, accepted_steps: Sequence[str]
    ) -> tuple[str, str] | None:
        """(next step text, verdict) after `accepted_steps` for a `step_key`, or None."""
        value = await self._get("step", scope, self.step_content(job_key, accepted_steps))
        if value is None:
            return None
        text, verdict = msgspec.msgpack.decode(value)
        return text, verdict

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


def partitions_key(prefix: str, worker_id: str) -> str:
    """Where a prefill worker says which input partitions it consumes (prefix routing)."""
    return f"{prefix}partitions:{_bounded(worker_id)}"
