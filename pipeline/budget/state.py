"""The controller's state in Redis: per class limits (one hash, versioned), decode's load
reports, ingest's arrival counts and the law's last decision (for `stepwise budget status`)."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline import schema
from pipeline.budget.ladder import ClassLimits
from pipeline.budget.signals import DecodeReport

REPORT_TTL_S = 5  # a decode worker that stopped reporting drops out after this
STATUS_TTL_S = 30  # the law's last decision, kept while the budget worker lives

# -- the limits ---------------------------------------------------------------------------------

_INT_FIELDS = ("max_steps", "max_thinking_tokens", "probe_effort")
_FLOAT_FIELDS = ("shed", "retry_after_s", "slo_ms", "pressure")


def budget_key(prefix: str, slo_class: str) -> str:
    return f"{prefix}budget:{slo_class}"


async def publish(redis: Redis, prefix: str, slo_class: str, limits: ClassLimits) -> int:
    """Writes the class's limits and bumps its version in one MULTI/EXEC; returns the version.

    The version is a field of the same hash, so a reader's HGETALL sees limits and version
    from the same publish; HINCRBY keeps it increasing across controller restarts."""
    key = budget_key(prefix, slo_class)
    mapping: dict[str, int | float] = {name: getattr(limits, name) for name in _INT_FIELDS}
    mapping.update({name: float(getattr(limits, name)) for name in _FLOAT_FIELDS})
    mapping["resample_cap"] = -1 if limits.resample_cap is None else limits.resample_cap
    mapping["early_exit"] = int(limits.early_exit)
    mapping["updated_ms"] = int(time.time() * 1000)
    async with redis.pipeline(transaction=True) as p:
        p.hset(key, mapping=mapping)
        p.hincrby(key, "version", 1)
        _, version = await p.execute()
    return int(version)


def _decode_hash(raw: dict) -> ClassLimits:
    got = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
    cap = int(got.get("resample_cap", -1))
    return ClassLimits(
        max_steps=int(got["max_steps"]),
        max_thinking_tokens=int(got["max_thinking_tokens"]),
        probe_effort=int(got["probe_effort"]),
        resample_cap=None if cap < 0 else cap,
        early_exit=bool(int(got.get("early_exit", 0))),
        shed=float(got.get("shed", 0.0)),
        retry_after_s=float(got.get("retry_after_s", 0.0)),
        slo_ms=float(got.get("slo_ms", 0.0)),
        pressure=float(got.get("pressure", 0.0)),
        version=int(got.get("version", 0)),
    )


async def read(redis: Redis, prefix: str, slo_class: str) -> ClassLimits | None:
    """The class's published limits; None when nothing was published (callers use defaults)."""
    raw = await redis.hgetall(budget_key(prefix, slo_class))
    return _decode_hash(raw) if raw else None


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
        self._cache: dict[str, tuple[float, ClassLimits | None]] = {}
        # The same limits as a Budget, built once per read: decode asks for it every tick.
        self._budgets: dict[str, schema.Budget | None] = {}
        self.num_reads = 0  # Redis round trips, for tests and metrics

    async def get(self, slo_class: str) -> ClassLimits | None:
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


# -- decode's load reports ---------------------------------------------------------------------


def report_key(prefix: str, worker: str) -> str:
    return f"{prefix}decode_report:{worker}"


async def publish_report(redis: Redis, prefix: str, report: DecodeReport) -> None:
    await redis.set(report_key(prefix, report.worker), msgspec.msgpack.encode(report),
                    ex=REPORT_TTL_S)  # fmt: skip


async def read_reports(redis: Redis, prefix: str) -> list[DecodeReport]:
    """Every live decode worker's latest report (a bad one is skipped)."""
    keys = [k async for k in redis.scan_iter(report_key(prefix, "*"))]
    out = []
    for raw in await redis.mget(keys) if keys else []:
        if raw:
            try:
                out.append(msgspec.msgpack.decode(raw, type=DecodeReport))
            except msgspec.DecodeError:
                continue
    return out


# -- ingest's arrivals ---------------------------------------------------------------------------


def counts_key(prefix: str, slo_class: str) -> str:
    return f"{prefix}budget_counts:{slo_class}"


async def count_arrival(redis: Redis, prefix: str, slo_class: str, shed: bool) -> None:
    """One job of this class arrived at ingest (and was refused, with `shed`)."""
    async with redis.pipeline(transaction=False) as p:
        p.hincrby(counts_key(prefix, slo_class), "arrivals", 1)
        if shed:
            p.hincrby(counts_key(prefix, slo_class), "shed", 1)
        await p.execute()


async def read_counts(redis: Redis, prefix: str, slo_class: str) -> tuple[int, int]:
    """(arrivals, shed) so far, counters that only grow."""
    raw = await redis.hgetall(counts_key(prefix, slo_class))
    got = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    return got.get("arrivals", 0), got.get("shed", 0)


# -- the law's last decision ----------------------------------------------------------------------


class ClassStatus(msgspec.Struct, kw_only=True):
    """One class's limits, what the law read and what it did, for `stepwise budget status`."""

    slo_class: str
    limits: dict[str, float | int | bool | None]
    rung: str
    decision: str  # the law's last action and why
    predicted_ratio: float | None = None
    new_job_ratio: float | None = None
    running_ratio: float | None = None
    done_ratio: float | None = None
    pace_tok_s: float | None = None
    occupancy: float = 0.0
    queue_s: float = 0.0
    arrivals_per_s: float = 0.0
    shed_per_s: float = 0.0
    running_jobs: int = 0
    completed_in_window: int = 0
    deadline_cuts: int = 0


class Status(msgspec.Struct, kw_only=True):
    ts_ms: int
    worker: str
    classes: list[ClassStatus]


def status_key(prefix: str) -> str:
    return f"{prefix}budget_status"


async def publish_status(redis: Redis, prefix: str, status: Status) -> None:
    await redis.set(status_key(prefix), msgspec.json.encode(status), ex=STATUS_TTL_S)


async def read_status(redis: Redis, prefix: str) -> Status | None:
    raw = await redis.get(status_key(prefix))
    return msgspec.json.decode(raw, type=Status) if raw else None
