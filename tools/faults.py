"""Infrastructure faults injected into a real local stack under load (issue 24).

A `FaultStack` is a stack of its own: an embedded broker and Redis on free ports, its own topics,
and real worker processes (ingest, prefill, decode, a Celery verify worker). `run_case` sends a
batch of jobs, injects one fault once decode is stepping (handoffs, KV imports and checks in
flight, jobs still being sent), follows every job to its Result or its deadline, then counts
every Result record on the topic per job id. The matrix (`FAULTS`):

* `redis_restart`: redis-server SIGKILLed and started again on its port, empty (the embedded
  Redis keeps nothing on disk: job-state markers, KV acks, the Celery queue, verdict streams
  and caches are gone);
* `broker_pause`: the broker SIGSTOPped for 10 s, then SIGCONT: every connection hangs, as
  behind a dead switch, and every consumer group's session expires meanwhile;
* `verify_killed` / `verify_replaced`: every Celery process SIGKILLed; no replacement (verdict
  timeouts must keep jobs moving), or a replacement started at once. With no replacement the
  pool dies before the jobs are sent (`BEFORE_JOBS`): decode settles the plain arithmetic
  claims itself, and on a fast host a batch had written its last Celery-bound step before a
  kill once decode was stepping could land, so no step was left to wait;
* `decode_lost`: the decode worker and its engine core SIGKILLed together (a host lost with
  handoffs in flight) and a replacement started: it imports the KV from prefill's pool while
  the leases last, else prefills again.

tests/integration/test_faults.py asserts on each case; bench/faults.py tabulates them beside a
run without a fault (`none`). What each fault does to a job: docs/pipeline.md, "Faults".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer

from pipeline import schema
from pipeline.client import StepwiseClient
from pipeline.local.services import LocalServices, create_topics
from pipeline.local.workers import WorkerProcesses, engine_core_pid
from pipeline.topics import STAGES as STAGES_TOPICS
from pipeline.topics import Topics

STAGES = ("ingest", "prefill", "decode", "verify")
BROKER_PAUSE_S = 10.0
# Settings that keep a fault's cost small on a loaded two-core machine: a step with no verdict
# after 2 s counts as unknown (10 s by default).
FAST_SETTINGS = {"VERDICT_TIMEOUT_S": 2.0}


class FaultStack:
    """Embedded broker and Redis of its own, topics under one prefix, and worker processes."""

    def __init__(self, log_dir: Path, partitions: int = 3, **settings: object):
        self.services = LocalServices(log_dir=Path(log_dir) / "services")
        self.topics = Topics(f"faults.{uuid.uuid4().hex[:8]}.")
        self.partitions = partitions
        self.log_dir = Path(log_dir)
        self.settings = {**FAST_SETTINGS, **settings}
        self.workers: WorkerProcesses | None = None

    @property
    def kafka(self) -> str:
        return self.services.bootstrap_servers

    async def start(self) -> None:
        await self.services.astart()
        counts = self.topics.partitions(dict.fromkeys(STAGES_TOPICS, self.partitions))
        await create_topics(self.kafka, self.topics.all(), counts)
        self.workers = WorkerProcesses(
            self.kafka, self.services.redis_url, self.topics.prefix, self.log_dir, **self.settings
        )
        self.heal()
        # Every stage up and consuming before the first case: its latencies are then a
        # fault's, not the workers' start-up.
        warm = await run_case(self, "none", make_jobs(2, f"warm-{uuid.uuid4().hex[:6]}"), 240)
        if warm.lost:
            raise RuntimeError(f"the fault stack did not start\n{self.logs()}")

    def heal(self) -> None:
        """One live process per stage: a stage a fault left without one gets a new one."""
        assert self.workers is not None
        for name in STAGES:
            if not self.workers.live(name):
                self.workers.start(name)

    async def stop(self) -> None:
        if self.workers is not None:
            self.workers.stop_all()
        broker = self.services.kafka
        if broker is not None and broker.pid is not None:
            with contextlib.suppress(ProcessLookupError):  # failed mid-pause: let it stop
                os.kill(broker.pid, signal.SIGCONT)
        await self.services.astop()

    def logs(self) -> str:
        return self.workers.logs() if self.workers is not None else ""

    async def __aenter__(self) -> FaultStack:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# -- the faults -------------------------------------------------------------------------------


async def restart_redis(stack: FaultStack) -> None:
    redis = stack.services.redis
    assert redis is not None
    await redis.arestart()  # spawned on this thread: PDEATHSIG follows the thread that forks


async def pause_broker(stack: FaultStack, seconds: float = BROKER_PAUSE_S) -> None:
    broker = stack.services.kafka
    assert broker is not None and broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        os.kill(broker.pid, signal.SIGCONT)


async def kill_verify(stack: FaultStack, replace: bool) -> None:
    assert stack.workers is not None
    for proc in stack.workers.live("verify"):
        stack.workers.kill(proc)
    if replace:
        stack.workers.start("verify")


async def lose_decode(stack: FaultStack) -> None:
    """The worker and its engine core at once: a host lost, not a worker that dies alone."""
    assert stack.workers is not None
    for proc in stack.workers.live("decode"):
        core = engine_core_pid(proc, timeout_s=5)
        os.kill(core, signal.SIGKILL)
        stack.workers.kill(proc)
    stack.workers.start("decode")


Fault = Callable[[FaultStack], Awaitable[None]]


async def no_fault(stack: FaultStack) -> None:
    return None


FAULTS: dict[str, Fault] = {
    "none": no_fault,
    "redis_restart": restart_redis,
    "broker_pause": pause_broker,
    "verify_killed": lambda stack: kill_verify(stack, replace=False),
    "verify_replaced": lambda stack: kill_verify(stack, replace=True),
    "decode_lost": lose_decode,
}
# Faults injected before the first job is sent rather than once decode is stepping.
BEFORE_JOBS = frozenset({"verify_killed"})


# -- one case -----------------------------------------------------------------------------


def make_jobs(n: int, tag: str, max_tokens: int = 160) -> list[schema.Job]:
    """Sampled jobs without a seed of their own: neither the answer cache nor the step cache
    serves them (a case measures the pipeline, not a cache hit), verified asynchronously so
    Celery and Redis are on every job's path."""
    params = schema.JobParams(temperature=0.7, max_tokens=max_tokens, verify="async")
    return [
        schema.Job(id=f"{tag}-{i}", prompt=f"What is {10 + i} + {20 + 3 * i}?", params=params)
        for i in range(n)
    ]


@dataclass
class FaultRun:
    """What one case saw: every job's Result records on the topic, its first Result's status
    and code, and its latency (submit to first Result, as the client saw it)."""

    fault: str
    job_ids: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    latency_s: dict[str, float] = field(default_factory=dict)
    injected_at_s: float | None = None  # after the first submit
    reprefilled: int = 0  # jobs whose KV could not be imported (decode prefilled them again)
    verdict_timeouts: int = 0  # steps whose verdict did not come in time (counted `unknown`)

    @property
    def sent(self) -> int:
        return len(self.job_ids)

    @property
    def results(self) -> int:
        """Jobs with at least one Result."""
        return sum(1 for j in self.job_ids if self.counts.get(j, 0) > 0)

    @property
    def lost(self) -> list[str]:
        return [j for j in self.job_ids if self.counts.get(j, 0) == 0]

    @property
    def duplicated(self) -> dict[str, int]:
        return {j: n for j in self.job_ids if (n := self.counts.get(j, 0)) > 1}

    @property
    def not_ok(self) -> dict[str, str]:
        return {j: s for j, s in self.statuses.items() if not s.startswith("ok")}

    @property
    def worst_latency_s(self) -> float:
        return max(self.latency_s.values(), default=0.0)

    def row(self, baseline: FaultRun | None = None) -> dict[str, object]:
        """The table's row; `extra_s`: this run's worst latency minus the baseline's worst."""
        extra = self.worst_latency_s - baseline.worst_latency_s if baseline else None
        return {
            "fault": self.fault,
            "sent": self.sent,
            "results": self.results,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "not_ok": len(self.not_ok),
            "worst_s": round(self.worst_latency_s, 1),
            "extra_s": None if extra is None else round(extra, 1),
            "reprefilled": self.reprefilled,
            "verdict_timeouts": self.verdict_timeouts,
        }


async def run_case(
    stack: FaultStack,
    fault: str,
    jobs: list[schema.Job],
    deadline_s: float = 150.0,
    after_steps: int = 4,
    stagger_s: float = 0.05,
) -> FaultRun:
    """Send `jobs` (`stagger_s` apart: handoffs keep arriving while decode runs), inject
    `fault` once `after_steps` step events came (decode stepping, the later jobs still being
    sent: on a fast host the first jobs finished before the last was sent, and a fault that
    waited for every send could come after the last Result, or never; a fault in
    `BEFORE_JOBS` before the first is sent), follow every job to its Result or `deadline_s`,
    then count the Results on the topic. Never raises for a job that got no Result: it is
    reported lost."""
    run = FaultRun(fault, [j.id for j in jobs])
    inject = FAULTS[fault]
    injecting: asyncio.Task | None = None
    steps = 0
    async with StepwiseClient(stack.kafka, stack.topics.prefix) as client:
        t0 = time.monotonic()
        if fault in BEFORE_JOBS:
            await inject(stack)
            run.injected_at_s = 0.0
        sent: dict[str, float] = {}

        async def submit() -> None:
            for job in jobs:
                sent[job.id] = time.monotonic()
                await client.submit(job)
                await asyncio.sleep(stagger_s)

        submitting = asyncio.create_task(submit())
        try:
            async for msg in client.follow(set(run.job_ids), timeout_s=deadline_s):
                if isinstance(msg, schema.Event) and msg.kind == "step":
                    steps += 1
                if isinstance(msg, schema.Event) and msg.kind == "verdict":
                    run.verdict_timeouts += "timeout" in (msg.detail or "")
                if run.injected_at_s is None and steps >= after_steps:
                    run.injected_at_s = time.monotonic() - t0
                    injecting = asyncio.create_task(inject(stack))
                if isinstance(msg, schema.Result) and msg.id not in run.statuses:
                    run.latency_s[msg.id] = time.monotonic() - sent.get(msg.id, t0)
                    code = f":{msg.error.code}" if msg.error is not None else ""
                    run.statuses[msg.id] = msg.status + code
                    run.reprefilled += "reprefill" in msg.timings.stages
        except TimeoutError:
            pass  # the jobs without a Result are the lost ones
        finally:
            await submitting
            if injecting is not None:
                await injecting
    run.counts = await count_results(stack.kafka, stack.topics.prefix, set(run.job_ids))
    return run


async def count_results(
    kafka: str, prefix: str, job_ids: set[str] | None = None, quiet_s: float = 3.0
) -> dict[str, int]:
    """Every Result record on the topic, by job id (duplicates show as counts > 1); only
    `job_ids`' when given. Reads until `quiet_s` pass without a new record."""
    consumer = AIOKafkaConsumer(
        f"{prefix}results", bootstrap_servers=kafka, auto_offset_reset="earliest"
    )
    await consumer.start()
    counts: dict[str, int] = {}
    try:
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            batch = await consumer.getmany(timeout_ms=500)
            for recs in batch.values():
                for r in recs:
                    key = r.key.decode()
                    quiet_since = time.monotonic()
                    if job_ids is None or key in job_ids:
                        counts[key] = counts.get(key, 0) + 1
    finally:
        await consumer.stop()
    return counts
