"""The budget worker's control loop on a fake clock and a fake Redis: each SLO class runs its
law on its own period, the shared queue lag is read against both classes' completions, and
limits Redis lost are published again."""

from __future__ import annotations

import asyncio
import contextlib
import warnings

import pytest

from pipeline import budget
from pipeline.budget.worker import BudgetWorker
from pipeline.config import PipelineConfig


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
        self.publishes += 1
        return FakePipeline(self)

    async def hget(self, key: str, field: str) -> bytes | None:
        return self.data.get(key, {}).get(field)

    async def hgetall(self, key: str) -> dict:
        return dict(self.data.get(key, {}))

    async def scan_iter(self, pattern: str):
        prefix = pattern.rstrip("*")
        for k in list(self.data):
            if k.startswith(prefix):
                yield k

    async def mget(self, keys: list[str]) -> list:
        return [self.data.get(k) for k in keys]


def make_worker(redis: FakeRedis, clock: list[float]) -> BudgetWorker:
    async def fake_sleep(seconds: float) -> None:  # time passes at once
        clock[0] += seconds
        await asyncio.sleep(0)  # let the test run

    config = PipelineConfig(kafka="localhost:1", redis="redis://localhost:1/0", topic_prefix="t.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the producer is never started
        worker = BudgetWorker(config, clock=lambda: clock[0], sleep=fake_sleep)
    worker.redis = redis  # type: ignore[assignment]
    return worker


class Recorder(budget.BudgetController):
    def __init__(self, cfg: budget.SloClassConfig) -> None:
        super().__init__(cfg)
        self.runs: list[tuple[float, int, str]] = []

    def update(self, now_s, lag_jobs=None, completion_rate=None):
        limits = super().update(now_s, lag_jobs, completion_rate)
        self.runs.append((now_s, limits.max_thinking_tokens, self.state.action))
        return limits


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


async def test_each_class_runs_its_law_on_its_own_period():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    worker.controllers = {c: Recorder(ctl.cfg) for c, ctl in worker.controllers.items()}
    batch = worker.controllers["batch"]
    assert batch.cfg.control_period_s == 10.0 and batch.cfg.brake_hold_periods == 3
    for _ in range(30):  # 30 s over a 20 s SLO (> 1.25x: brake), all inside the 60 s window
        batch.observe(0.0, 30_000.0)
    await run_loop(worker, clock, until_s=40.0)
    runs = {c: ctl.runs for c, ctl in worker.controllers.items()}
    assert [t for t, _, _ in runs["interactive"]][:5] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert [t for t, _, _ in runs["batch"]][:4] == [10.0, 20.0, 30.0, 40.0]
    # One brake (512 -> 358), then a hold of three batch periods: not 5 brakes down to 86.
    assert [(tokens, action) for _, tokens, action in runs["batch"][:4]] == [
        (358, "brake"),
        (358, "hold"),
        (358, "hold"),
        (358, "hold"),
    ]


async def test_a_late_wake_up_skips_missed_periods():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    worker.start_schedule(0.0)
    assert await worker.control_step(1.0) == []
    assert await worker.control_step(25.0) == ["interactive", "batch"]  # once, not 12 times
    assert worker.due == {"interactive": 27.0, "batch": 35.0}  # a period after the wake-up
    assert await worker.control_step(27.0) == ["interactive"]


async def test_another_class_backlog_does_not_brake_batch():
    clock, redis = [60.0], FakeRedis()
    redis.data["t.lag:decode:w1"] = b"6"  # 6 jobs waiting for the shared workers
    worker = make_worker(redis, clock)
    worker.start_schedule(50.0)  # both classes due at 60 s
    inter, batch = worker.controllers["interactive"], worker.controllers["batch"]
    for k in range(60):  # interactive: 10 jobs/s at 1 s (its band is 1.6..1.9 s)
        inter.observe(60.0 - k * 0.1, 1000.0)
    for k in range(30):  # batch: 0.5 jobs/s at 10 s (SLO 20 s)
        batch.observe(60.0 - k * 2.0, 10_000.0)
    assert await worker.control_step(60.0) == ["interactive", "batch"]
    # The queue drains at 10.5 jobs/s: ~0.6 s of waiting, nothing for a 20 s SLO. Divided by
    # batch's own 0.5 jobs/s it read as 12 s, over the 10 s brake mark.
    assert batch.state.action != "brake"
    assert batch.limits.max_thinking_tokens == 512


async def test_limits_redis_lost_are_published_again():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    for c, ctl in worker.controllers.items():
        await worker._publish(c, ctl.limits)
    assert redis.publishes == 2
    worker.start_schedule(0.0)
    await worker.control_step(10.0)  # both classes: limits unchanged, nothing new published
    assert redis.publishes == 2
    redis.data.clear()  # Redis restarted without its data
    await worker.control_step(20.0)
    assert redis.publishes == 4
    for c in ("interactive", "batch"):
        got = await budget.read(redis, "t.", c)  # type: ignore[arg-type]
        assert got is not None and got.max_thinking_tokens == 512


async def test_a_newer_version_from_another_publisher_is_left_alone():
    clock, redis = [0.0], FakeRedis()
    worker = make_worker(redis, clock)
    limits = worker.controllers["interactive"].limits
    await worker._publish("interactive", limits)
    tight = budget.BudgetLimits(max_steps=1, max_thinking_tokens=40, probe_effort=1)
    await budget.publish(redis, "t.", "interactive", tight)  # type: ignore[arg-type]
    await worker._publish("interactive", limits)
    got = await budget.read(redis, "t.", "interactive")  # type: ignore[arg-type]
    assert got is not None and got.max_thinking_tokens == 40 and got.version == 2


@pytest.mark.parametrize("rate", [None, 5.0])
def test_update_takes_the_queue_drain_rate(rate):
    ctl = budget.BudgetController(budget.DEFAULT_BUDGET_CONFIG.batch)
    for k in range(30):  # 0.5 jobs/s of its own
        ctl.observe(60.0 - k * 2.0, 10_000.0)
    limits = ctl.update(60.0, lag_jobs=6, completion_rate=rate)
    # 6 jobs at 0.5/s: 12 s of queue, over the 10 s brake mark; at 5 jobs/s: 1.2 s, under even
    # the 2 s hold mark, and the p95 (10 s) is under the band: the budget stays at the top.
    if rate is None:
        assert ctl.state.action == "brake" and limits.max_thinking_tokens == 358
    else:
        assert ctl.state.action == "saturated" and limits.max_thinking_tokens == 512
