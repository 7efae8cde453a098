"""`stepwise worker budget`: Results (and queue lag) -> the control law -> live limits in Redis.

Every Result's end-to-end latency goes into its SLO class's sliding window; every control
period the law (pipeline/budget.py) turns the window's p95 and the pipeline's queue lag into
limits, published to Redis with a version. Ingest stamps them on admission; decode re-reads
them at every step boundary, so jobs already running are tightened too. The lag comes from the
stage workers, which publish theirs to Redis every second (`lag_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import ConsumerRecord

from pipeline import budget, schema, telemetry
from pipeline.bus import Ack
from pipeline.worker import StageWorker

log = logging.getLogger(__name__)

SLO_CLASSES = ("interactive", "batch")
LAG_STAGES = ("prefill", "decode")  # jobs admitted but not yet decoding


def lag_key(prefix: str, stage: str, worker_id: str) -> str:
    return f"{prefix}lag:{stage}:{worker_id}"


class BudgetWorker(StageWorker):
    stage = "budget"
    input_stage = "results"

    async def setup(self) -> None:
        self.budget_config = budget.DEFAULT_BUDGET_CONFIG
        self.controllers = {
            c: budget.BudgetController(self.budget_config.for_class(c)) for c in SLO_CLASSES
        }
        self.published: dict[str, tuple[int, int, int]] = {}
        self.num_observed = 0
        for c, ctl in self.controllers.items():  # readers see limits from the start
            await self._publish(c, ctl.limits)
        self._tasks.append(asyncio.create_task(self._control_loop()))

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        result = schema.decode(record.value or b"", schema.Result)
        if result.status == "ok" and result.timings.e2e_ms is not None:
            self.controllers[result.slo_class].observe(
                time.monotonic(), result.timings.e2e_ms, result.budget.used
            )
            self.num_observed += 1
        ack()

    async def queue_lag(self) -> int:
        total = 0
        for stage in LAG_STAGES:
            pattern = lag_key(self.config.topic_prefix, stage, "*")
            keys = [k async for k in self.redis.scan_iter(pattern)]
            for value in await self.redis.mget(keys) if keys else []:
                with contextlib.suppress(TypeError, ValueError):
                    total += int(value)
        return total

    async def _control_loop(self) -> None:
        period = min(self.budget_config.for_class(c).control_period_s for c in SLO_CLASSES)
        while True:
            await asyncio.sleep(period)
            try:
                lag = await self.queue_lag()
                now = time.monotonic()
                for c, ctl in self.controllers.items():
                    await self._publish(c, ctl.update(now, lag_jobs=lag))
            except Exception:  # Redis trouble: readers keep the last limits meanwhile
                log.exception("budget control step failed")

    async def _publish(self, slo_class: str, limits: budget.BudgetLimits) -> None:
        key = (limits.max_steps, limits.max_thinking_tokens, limits.probe_effort)
        if self.published.get(slo_class) == key:
            return  # unchanged: no new version
        version = await budget.publish(self.redis, self.config.topic_prefix, slo_class, limits)
        self.published[slo_class] = key
        telemetry.set_budget(slo_class, limits)
        log.info("budget %s v%d: %s", slo_class, version, key)
