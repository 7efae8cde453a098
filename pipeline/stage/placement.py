"""Decode placement: a handoff goes to a decode worker with room, not only to its key's partition.

Each decode worker says, about once a second, which `handoff` partitions it consumes and how much
room it has (running slots free, share of its KV pool free) in a Redis key of its own that
expires when it stops saying so. A prefill worker reads them every half second and
sends each handoff to a partition of the worker with the most room, counting what it sent there
since that worker's last report (so a batch spreads instead of landing on one worker). With no
reports, one decode worker, or stale reports, the key's partition is used as before: placement is
a hint, never a condition. Prefix routing (ingest -> a warm prefill worker) is unchanged; this
is the next hop.

A job's first placement is kept (`pin`): a handoff sent again for the same job (its prefill
task redelivered after a prefill worker died) goes to the same partition, so the decode worker
that may already run it is the one that sees the second copy and drops it: exactly one Result,
as with key partitioning.

Plain logic (`Placer`) plus the Redis reads and writes (`publish_load`, `read_loads`, `pin`).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable

import msgspec

LOAD_TTL_S = 5  # a worker that stopped reporting drops out after this
# How long a job's first placement is kept: far past when its prefill task could be redelivered
# (a dead prefill worker's group session times out in seconds), short enough that a busy
# stack's pins stay small in Redis (one short key per job).
PIN_TTL_S = 3600
STALE_MS = 3_000  # a report older than this is not trusted for placement


class DecodeLoad(msgspec.Struct, frozen=True, array_like=True):
    """One decode worker's report: where to reach it, how much it can take now."""

    worker: str
    partitions: tuple[int, ...]
    # Running slots free now: its batch size less the jobs it holds (negative: that many wait
    # beyond its batch, in its engine's queue, until it pauses its partitions).
    room: int
    kv_free: float  # share of its engine's KV pool free (1.0 when it cannot tell)
    ts_ms: int


KEY = -1  # a pinned "the key's partition"


def load_key(prefix: str, worker: str) -> str:
    return f"{prefix}decode_load:{worker}"


def members_key(prefix: str) -> str:
    return f"{prefix}decode_workers"


def pin_key(prefix: str, job_id: str) -> str:
    return f"{prefix}placed:{job_id}"


class Placer:
    """Chooses a handoff's partition from the decode workers' last reports."""

    def __init__(self, stale_ms: int = STALE_MS) -> None:
        self.stale_ms = stale_ms
        self.loads: dict[str, DecodeLoad] = {}
        self.sent: Counter[str] = Counter()  # handoffs placed on a worker since its report
        self.num_placed = 0

    def update(self, loads: Iterable[DecodeLoad]) -> None:
        fresh = {load.worker: load for load in loads}
        for worker, load in fresh.items():
            old = self.loads.get(worker)
            if old is None or load.ts_ms > old.ts_ms:  # its room now counts what it received
                self.sent.pop(worker, None)
        self.loads = fresh

    def place(self, job_id: str, now_ms: int) -> int | None:
        """The partition for `job_id`'s handoff, or None: leave it to the key's partition."""
        live = [
            load
            for load in self.loads.values()
            if load.partitions and now_ms - load.ts_ms <= self.stale_ms
        ]
        if len(live) < 2:
            return None  # nothing to choose between
        best = max(live, key=lambda load: (load.room - self.sent[load.worker], load.kv_free))
        self.sent[best.worker] += 1
        self.num_placed += 1
        # Spread a worker's jobs over its partitions by job id (stable for a redelivery).
        parts = best.partitions
        return parts[zlib.crc32(job_id.encode()) % len(parts)]


async def publish_load(redis, prefix: str, load: DecodeLoad) -> None:
    """A decode worker's heartbeat: its load, under a key that expires if it stops."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(load_key(prefix, load.worker), msgspec.msgpack.encode(load), ex=LOAD_TTL_S)
        pipe.sadd(members_key(prefix), load.worker)
        await pipe.execute()


async def withdraw_load(redis, prefix: str, worker: str) -> None:
    """A decode worker that stops: no more handoffs placed on it."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(load_key(prefix, worker))
        pipe.srem(members_key(prefix), worker)
        await pipe.execute()


async def read_loads(redis, prefix: str) -> list[DecodeLoad]:
    """Every live decode worker's last report; workers whose key expired are forgotten."""
    workers = sorted(w.decode() if isinstance(w, bytes) else w for w in
                     await redis.smembers(members_key(prefix)))  # fmt: skip
    if not workers:
        return []
    raw = await redis.mget([load_key(prefix, w) for w in workers])
    loads, gone = [], []
    for worker, value in zip(workers, raw, strict=True):
        if value is None:
            gone.append(worker)
            continue
        try:
            loads.append(msgspec.msgpack.decode(value, type=DecodeLoad))
        except msgspec.DecodeError:
            gone.append(worker)
    if gone:
        await redis.srem(members_key(prefix), *gone)
    return loads


async def pin(
    redis, prefix: str, choices: list[tuple[str, int | None]], ttl_s: int = PIN_TTL_S
) -> list[int | None]:
    """Each job's partition as first placed: `choices` (job id, partition or None for the
    key's) are kept where a job has none yet, and a job placed before keeps its first choice.
    One round trip for a batch (SET NX GET)."""
    async with redis.pipeline(transaction=False) as pipe:
        for job_id, part in choices:
            value = KEY if part is None else part
            pipe.set(pin_key(prefix, job_id), value, nx=True, get=True, ex=ttl_s)
        before = await pipe.execute()
    out: list[int | None] = []
    for (_, part), old in zip(choices, before, strict=True):
        if old is None:  # first placement: ours
            out.append(part)
        else:
            first = int(old)
            out.append(None if first == KEY else first)
    return out
