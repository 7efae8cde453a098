"""`stepwise worker budget`: Results (and queue lag) -> the control law -> live limits in Redis.

Every Result's end-to-end latency goes into its SLO class's sliding window; every control
period the law (pipeline/budget/) turns the window's p95 and the pipeline's queue lag into
limits, published to Redis with a version. Ingest stamps them on admission; decode re-reads
them at every step boundary, so jobs already running are tightened too. The lag comes from the
stage workers, which publish theirs to Redis every second (`lag_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRecord

from pipeline import budget, schema, settings, telemetry
from pipeline.bus import Ack
from pipeline.config import PipelineConfig
from pipeline.stage.worker import StageWorker

log = logging.getLogger(__name__)

LAG_STAGES = ("prefill", "decode")  # jobs admitted but not yet decoding


def lag_key(prefix: str, stage: str, worker_id: str) -> str:
    return f"{prefix}lag:{stage}:{worker_id}"


class BudgetWorker(StageWorker):
    stage = "budget"
    input_stage = "results"

    def __init__(
        self,
        config: PipelineConfig,
        budget_config: budget.BudgetConfig | None = None,  # None: the process's settings'
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        super().__init__(config)
        budget_config = budget_config or settings.current().budget()
        self.budget_config = budget_config
        self.clock = clock  # injectable with `sleep`: the tests drive the loop without sleeping
        self.sleep = sleep
        self.controllers = {
            c: budget.BudgetController(budget_config.for_class(c)) for c in budget.SLO_CLASSES
        }
        # Per class: the limits last published and the version Redis gave them.
        self.published: dict[str, tuple[tuple[int, int, int], int]] = {}
        self.due: dict[str, float] = {}  # per class: when its law runs next (clock seconds)
        self.num_observed = 0

    async def setup(self) -> None:
        for c, ctl in self.controllers.items():  # readers see limits from the start
            await self._publish(c, ctl.limits)
        self._tasks.append(asyncio.create_task(self._control_loop()))

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        result = schema.decode(record.value or b"", schema.Result)
        if result.status == "ok" and result.timings.e2e_ms is not None:
            self.controllers[result.slo_class].observe(
                self.clock(), result.timings.e2e_ms, result.budget.used
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

    def start_schedule(self, now: float) -> None:
        """Each class's first law run: one of its own control periods after `now`."""
        self.due = {c: now + ctl.cfg.control_period_s for c, ctl in self.controllers.items()}

    async def _control_loop(self) -> None:
        self.start_schedule(self.clock())
        while True:
            await self.sleep(max(0.0, min(self.due.values()) - self.clock()))
            await self.control_step(self.clock())

    async def control_step(self, now: float) -> list[str]:
        """Runs the law of each class whose own control period is due at `now` (interactive
        every 2 s, batch every 10 s: a class's brake hold counts its own periods) and publishes
        the limits; returns those classes."""
        ready = [c for c, t in self.due.items() if now >= t]
        for c in ready:  # a late wake-up skips the missed periods rather than catching up
            due = self.due[c] + self.controllers[c].cfg.control_period_s
            self.due[c] = due if due > now else now + self.controllers[c].cfg.control_period_s
        if not ready:
            return ready
        try:
            lag = await self.queue_lag()
        except Exception:  # Redis trouble: readers keep the last limits meanwhile
            log.exception("budget control step failed")
            return ready
        # The lag counts the jobs of both classes waiting for the same prefill and decode
        # workers, which drain them at both classes' completion rates together (Little).
        rate = sum(ctl.window.rate(now) for ctl in self.controllers.values())
        for c in ready:
            limits = self.controllers[c].update(now, lag_jobs=lag, completion_rate=rate)
            try:
                await self._publish(c, limits)
            except Exception:  # Redis trouble: readers keep the last limits meanwhile
                log.exception("budget %s: publish failed", c)
        return ready

    async def _publish(self, slo_class: str, limits: budget.BudgetLimits) -> None:
        """Publishes changed limits (a new version). Unchanged ones are published again when
        the hash in Redis is gone or older than our last publish (Redis lost or rolled back its
        data): readers would otherwise use the defaults until the limits next change. A newer
        version is another publisher's, left alone until our limits change."""
        key = (limits.max_steps, limits.max_thinking_tokens, limits.probe_effort)
        last = self.published.get(slo_class)
        if last is not None and last[0] == key:
            stored = await self.redis.hget(
                budget.budget_key(self.config.topic_prefix, slo_class), "version"
            )
            if stored is not None and int(stored) >= last[1]:
                return  # unchanged and still there: no new version
            log.warning(
                "budget %s: Redis lost v%d (has %s), republishing", slo_class, *last[1:], stored
            )
        version = await budget.publish(self.redis, self.config.topic_prefix, slo_class, limits)
        self.published[slo_class] = (key, version)
        telemetry.set_budget(slo_class, limits)
        log.info("budget %s v%d: %s", slo_class, version, key)
