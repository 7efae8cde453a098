"""The budget worker's control loop on a fake clock and a fake Redis: each SLO class runs its
law on its own period, decode's load reports and ingest's arrivals become the law's signals,
batch yields to interactive, the law's decision is published for `stepwise budget status`, and
limits Redis lost are published again."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import warnings
from types import SimpleNamespace

import msgspec
import pytest

from pipeline import budget, schema
from pipeline.budget.signals import DecodeReport, RunningJob
from pipeline.budget.state import publish_report, read_status
from pipeline.config import PipelineConfig
from pipeline.controller.worker import BudgetWorker, demand_of


class FakePipeline:
    def __init__(self, redis: FakeRedis) -> None:
        self.redis, self.ops = redis, []

    async def __aenter__(self) -> FakePipeline:
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    def hset(self, key: str, mapping: dict) -> None:
        self.ops.append(("hset", key, mapping))

    def hincrby(self, key: str, field: str, by: int) -> None:
        self.ops.append(("hincrby", key, (field, by)))

    async def execute(self) -> list:
        out = []
        for op, key, arg in self.ops:
            h = self.redis.data.setdefault(key, {})
            if op == "hset":
                h.update({k: str(v).encode() for k, v in arg.items()})
                out.append(len(arg))
            else:
                field, by = arg
                h[field] = str(int(h.get(field, b"0")) + by).encode()
                out.append(int(h[field]))
        return out


class FakeRedis:
    """The few commands the budget worker uses; `data` maps key -> hash or plain value."""

    def __init__(self) -> None:
        self.data: dict[str, dict | bytes] = {}
        self.publishes = 0

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        self.publishes += transaction  # transactions: budget publishes
        return FakePipeline(self)

    async def hget(self, key: str, field: str) -> bytes | None:
        return self.data.get(key, {}).get(field)

    async def hgetall(self, key: str) -> dict:
        return dict(self.data.get(key, {}))

    async def scan_iter(self, pattern: str):
        for k in list(self.data):
            if fnmatch.fnmatch(k, pattern):
                yield k

    async def mget(self, keys: list[str]) -> list:
        return [self.data.get(k) for k in keys]

    async def set(self, key: str, value: bytes, ex: int | None = None) -> None:
        self.data[key] = value

    async def get(self, key: str) -> bytes | None:
        value = self.data.get(key)
        return value if isinstance(value, bytes) else None


def make_worker(redis: FakeRedis, clock: list[float], cfg=None) -> BudgetWorker:
    async def fake_sleep(seconds: float) -> None:  # time passes at once
        clock[0] += seconds
        await asyncio.sleep(0)  # let the test run

    config = PipelineConfig(kafka="localhost:1", redis="redis://localhost:1/0", topic_prefix="t.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the producer is never started
        worker = BudgetWorker(config, cfg, clock=lambda: clock[0], sleep=fake_sleep)
    worker.redis = redis  # type: ignore[assignment]
    return worker


async def run_loop(worker: BudgetWorker, clock: list[float], until_s: float) -> None:
    """Drives the worker's real control loop until the fake clock passes `until_s`."""
    task = asyncio.create_task(worker._control_loop())
    for _ in range(10_000):
        if clock[0] > until_s:
            break
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def report(pace: float, jobs: list[RunningJob], **kw) -> DecodeReport:
    return DecodeReport(worker="d1", ts_ms=1, pace_tok_s=pace, running=len(jobs), capacity=64,
                        jobs=jobs, **kw)  # fmt: skip


async def test_each_class_runs_its_law_on_its_own_period():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    runs: dict[str, list[float]] = {"interactive": [], "batch": []}
    for c, ctl in worker.controllers.items():
        original = ctl.update

        def update(now, sig, floor=0.0, _c=c, _orig=original):
            runs[_c].append(now)
            return _orig(now, sig, floor)

        ctl.update = update  # type: ignore[method-assign]
    await run_loop(worker, clock, until_s=6.0)
    assert runs["interactive"][:5] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert runs["batch"][:3] == [2.0, 4.0, 6.0]


async def test_a_late_wake_up_skips_missed_periods():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    worker.start_schedule(0.0)
    assert await worker.control_step(0.5) == []
    assert await worker.control_step(25.0) == ["interactive", "batch"]  # once, not 25 times
    assert worker.due == {"interactive": 26.0, "batch": 27.0}  # a period after the wake-up
    assert await worker.control_step(26.0) == ["interactive"]


async def test_a_slow_pace_and_long_jobs_raise_the_pressure_and_say_why():
    clock, redis = [100.0], FakeRedis()
    worker = make_worker(redis, clock)
    inter = worker.controllers["interactive"]
    for k in range(10):  # jobs of this class wanted ~400 tokens lately
        inter.observe(90.0 + k, 15_000.0, budget.signals.Demand(400.0, 0))
    # 5 tok/s a sequence: 424 tokens would take 85 s against the 20 s SLO.
    jobs = [RunningJob("interactive", 4_000.0, 20, True) for _ in range(12)]
    await publish_report(redis, "t.", report(5.0, jobs, queue_ms=[800.0]))
    redis.data["t.budget_counts:interactive"] = {b"arrivals": b"40", b"shed": b"0"}
    worker.start_schedule(99.0)
    await worker.control_step(100.0)
    state = inter.state
    assert state.action == "rise" and state.pressure > 0 and state.ratio > 3
    status = await read_status(redis, "t.")  # type: ignore[arg-type]
    assert status is not None
    (c,) = [c for c in status.classes if c.slo_class == "interactive"]
    assert c.pace_tok_s == 5.0 and c.running_jobs == 12 and "rise" in c.decision
    assert c.queue_s == pytest.approx(0.8)
    # Ten more periods of it: past the cheap rungs, the thinking is cut.
    for t in range(101, 111):
        await worker.control_step(float(t))
    got = await budget.read(redis, "t.", "interactive")  # type: ignore[arg-type]
    assert got is not None and got.max_thinking_tokens < 512 and got.resample_cap == 0


async def test_batch_yields_before_interactive():
    clock, redis = [100.0], FakeRedis()
    worker = make_worker(redis, clock)
    worker.controllers["interactive"].state = budget.LawState(pressure=2.4)
    worker.start_schedule(98.0)
    await worker.control_step(100.0)  # nothing known: interactive holds, batch sits above it
    assert worker.controllers["batch"].state.pressure >= 3.4
    got = await budget.read(redis, "t.", "batch")  # type: ignore[arg-type]
    assert got is not None and got.max_thinking_tokens < 512  # batch is on the token rung


async def test_limits_redis_lost_are_published_again():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    for c, ctl in worker.controllers.items():
        await worker._publish(c, ctl.limits)
    assert redis.publishes == 2
    worker.start_schedule(0.0)
    await worker.control_step(10.0)  # both classes: limits unchanged, nothing new published
    assert redis.publishes == 2
    for key in [k for k in redis.data if k.startswith("t.budget:")]:
        del redis.data[key]  # Redis restarted without its data
    await worker.control_step(20.0)
    assert redis.publishes == 4
    for c in ("interactive", "batch"):
        got = await budget.read(redis, "t.", c)  # type: ignore[arg-type]
        assert got is not None and got.max_thinking_tokens == 512 and got.slo_ms > 0


async def test_a_newer_version_from_another_publisher_is_left_alone():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    limits = worker.controllers["interactive"].limits
    await worker._publish("interactive", limits)
    tight = budget.ClassLimits(max_steps=1, max_thinking_tokens=40, probe_effort=1)
    await budget.publish(redis, "t.", "interactive", tight)  # type: ignore[arg-type]
    await worker._publish("interactive", limits)
    got = await budget.read(redis, "t.", "interactive")  # type: ignore[arg-type]
    assert got is not None and got.max_thinking_tokens == 40 and got.version == 2


def result(**kw) -> schema.Result:
    usage = schema.Usage(
        wasted_tokens=kw.pop("wasted", 0),
        probe_tokens=kw.pop("probes", 0),
        backtracks=kw.pop("backtracks", 0),
        unresampled=kw.pop("kept", 0),
    )
    b = schema.BudgetReport(used=kw.pop("used"), stop_reason=kw.pop("stop", "answer"))
    return schema.Result(id="r", status="ok", usage=usage, budget=b, ts_ms=1,
                         timings=schema.Timings(e2e_ms=kw.pop("e2e", 9000.0)))  # fmt: skip


def test_a_results_demand_predicts_its_work_at_any_rung():
    d = demand_of(result(used=300, wasted=120, probes=20, backtracks=2, kept=1))
    assert d == budget.signals.Demand(160.0, 3)
    assert demand_of(result(used=90, stop="budget")) == (90.0, 0, True)  # it wanted more
    assert demand_of(result(used=90, stop="early_exit")).natural == pytest.approx(100.0)


async def test_results_feed_the_class_window_and_its_backtrack_cost():
    clock, redis = [5.0], FakeRedis()
    worker = make_worker(redis, clock)
    acks = []
    for r in (result(used=300, wasted=200, backtracks=2), result(used=100)):
        record = SimpleNamespace(value=msgspec.msgpack.encode(r))
        await worker.handle(record, lambda: acks.append(1))  # type: ignore[arg-type]
    assert len(acks) == 2 and worker.num_observed == 2
    assert worker.controllers["interactive"].done.count(5.0) == 2
    assert worker.waste["interactive"] == (200, 2)  # 100 tokens a backtrack, measured
