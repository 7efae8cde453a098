"""`stepwise worker budget`: the live signals -> the control law -> limits in Redis.

Every control period, per SLO class, the worker reads decode's load reports (the pace, the
running jobs, the queueing times, the verdicts' round trip), ingest's arrival counts, the queue
lag the stage workers publish, and the Results it consumes (latencies, and the work each job
wanted), folds them into the class's signals (signals.py) and runs its law (law.py). The limits
(ladder.py) go to Redis with a version when they change; ingest stamps them on admission and
sheds new jobs when they say so; decode re-reads them at every step and holds each running job
to its own deadline. The batch class yields first: its pressure never sits below the
interactive class's plus one rung. The law's last decision and what it read go to Redis too,
for `stepwise budget status`, and to Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from aiokafka import ConsumerRecord

from pipeline import budget, schema, telemetry
from pipeline.budget.signals import EARLY_EXIT_SAVING, Demand, Signals, merge_reports, quantile
from pipeline.budget.state import (
    ClassStatus,
    Status,
    publish_status,
    read_counts,
    read_reports,
)
from pipeline.bus import Ack
from pipeline.config import PipelineConfig
from pipeline.stage.worker import StageWorker, now_ms

log = logging.getLogger(__name__)

LAG_STAGES = ("prefill", "decode")  # jobs admitted but not yet decoding
ARRIVALS_WINDOW_S = 30.0  # arrival rates are counted over this long
BATCH_YIELDS = 1.0  # batch's pressure is at least interactive's plus this (a rung)


def lag_key(prefix: str, stage: str, worker_id: str) -> str:
    return f"{prefix}lag:{stage}:{worker_id}"


def demand_of(result: schema.Result) -> Demand:
    """The work a finished job wanted, as the law predicts it at any pressure: the thinking it
    kept (cut, when a budget or its deadline forced the answer; about a tenth more when it
    exited early) and the contradictions verification found in it."""
    u, b = result.usage, result.budget
    natural = float(max(0, b.used - u.wasted_tokens - u.probe_tokens))
    if b.stop_reason == "early_exit":
        natural /= 1.0 - EARLY_EXIT_SAVING
    return Demand(natural, u.backtracks + u.unresampled, cut=b.stop_reason == "budget")


class _Rates:
    """Arrivals and refusals per second from ingest's counters, over `window_s`."""

    def __init__(self, window_s: float = ARRIVALS_WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int, int]] = deque()

    def add(self, now_s: float, arrivals: int, shed: int) -> tuple[float, float]:
        self.samples.append((now_s, arrivals, shed))
        while len(self.samples) > 2 and self.samples[1][0] <= now_s - self.window_s:
            self.samples.popleft()
        t0, a0, s0 = self.samples[0]
        span = now_s - t0
        if span <= 0:
            return 0.0, 0.0
        return max(0, arrivals - a0) / span, max(0, shed - s0) / span


class BudgetWorker(StageWorker):
    stage = "budget"
    input_stage = "results"

    def __init__(
        self,
        config: PipelineConfig,
        budget_config: budget.BudgetConfig | None = None,  # None: the process's settings'
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        arrivals_window_s: float = ARRIVALS_WINDOW_S,
    ) -> None:
        super().__init__(config)
        budget_config = budget_config or budget.budget_config()
        self.budget_config = budget_config
        self.clock = clock  # injectable with `sleep`: the tests drive the loop without sleeping
        self.sleep = sleep
        self.controllers = {
            c: budget.BudgetController(budget_config.for_class(c)) for c in budget.SLO_CLASSES
        }
        # Per class: the limits last published and the version Redis gave them.
        self.published: dict[str, tuple[tuple, int]] = {}
        self.due: dict[str, float] = {}  # per class: when its law runs next (clock seconds)
        self.rates = {c: _Rates(arrivals_window_s) for c in budget.SLO_CLASSES}
        self.waste = {c: (0, 0) for c in budget.SLO_CLASSES}  # (tokens wasted, backtracks)
        self.cuts_seen: dict[str, int] = {}  # decode's deadline-cut counters, as last read
        self.num_observed = 0

    async def setup(self) -> None:
        for c, ctl in self.controllers.items():  # readers see limits from the start
            await self._publish(c, ctl.limits)
        self._tasks.append(asyncio.create_task(self._control_loop()))

    async def handle(self, record: ConsumerRecord, ack: Ack) -> None:
        result = schema.decode(record.value or b"", schema.Result)
        if result.status == "ok" and result.timings.e2e_ms is not None:
            ctl = self.controllers[result.slo_class]
            demand = demand_of(result)
            ctl.observe(self.clock(), result.timings.e2e_ms, demand)
            if result.usage.backtracks:
                tokens, count = self.waste[result.slo_class]
                self.waste[result.slo_class] = (
                    tokens + result.usage.wasted_tokens,
                    count + result.usage.backtracks,
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
        while not self.halting:  # (a cancellation a library swallows still ends it)
            await self.sleep(max(0.0, min(self.due.values()) - self.clock()))
            await self.control_step(self.clock())

    async def signals(self, now: float) -> tuple[Signals, dict[str, list], dict[str, float]]:
        """The shared part of every class's signals, each class's running jobs, and each
        class's arrival and refusal rates."""
        prefix = self.config.topic_prefix
        reports = [r for r in await read_reports(self.redis, prefix) if r.ts_ms]
        lag = await self.queue_lag()
        completion_rate = sum(ctl.done.rate(now) for ctl in self.controllers.values())
        merged = merge_reports(reports) if reports else None
        queue_s = 0.0
        overhead_s = 0.2  # publishing and the client's read
        running: dict[str, list] = {c: [] for c in budget.SLO_CLASSES}
        rates: dict[str, float] = {}
        for c in budget.SLO_CLASSES:
            arrivals, shed = await read_counts(self.redis, prefix, c)
            rates[c], rates[f"{c}:shed"] = self.rates[c].add(now, arrivals, shed)
        if merged is not None:
            measured = quantile(merged.queue_ms, 0.9) or 0.0
            waiting = lag + merged.waiting
            # Little: what waits drains at the completion rate (both classes share workers).
            drain = waiting / completion_rate if completion_rate > 0 and waiting else 0.0
            queue_s = max(measured / 1000.0, drain)
            overhead_s += (merged.verdict_wait_ms or 0.0) / 1000.0
            for j in merged.jobs:
                if j.slo_class in running:
                    running[j.slo_class].append((j.age_ms / 1000.0, j.used, j.thinking))
            for c, n in merged.deadline_cuts.items():
                if c in budget.SLO_CLASSES:
                    seen = self.cuts_seen.get(c, 0)
                    telemetry.add_deadline_cuts(c, max(0, n - seen))
                    self.cuts_seen[c] = max(n, seen)
        shared = Signals(
            slo_s=1.0,
            pace_tok_s=merged.pace_tok_s if merged else None,
            running_now=merged.running if merged else 0,
            occupancy=merged.running / max(1, merged.capacity) if merged else 0.0,
            step_a_s=merged.step_a_s if merged else None,
            step_b_s=merged.step_b_s if merged else None,
            queue_s=queue_s,
            overhead_s=overhead_s,
        )
        return shared, running, rates

    async def control_step(self, now: float) -> list[str]:
        """Runs the law of each class whose own control period is due at `now` and publishes
        the limits; returns those classes."""
        ready = [c for c, t in self.due.items() if now >= t]
        for c in ready:  # a late wake-up skips the missed periods rather than catching up
            due = self.due[c] + self.controllers[c].cfg.control_period_s
            self.due[c] = due if due > now else now + self.controllers[c].cfg.control_period_s
        if not ready:
            return ready
        try:
            shared, running, rates = await self.signals(now)
        except Exception:  # Redis trouble: readers keep the last limits meanwhile
            log.exception("budget control step failed")
            return ready
        statuses = []
        # Interactive first: batch's floor is interactive's pressure plus a rung.
        for c in sorted(ready, key=lambda c: c != "interactive"):
            ctl = self.controllers[c]
            tokens, count = self.waste[c]
            sig = replace(
                shared, arrivals_per_s=rates[c], running=tuple(running[c]),
                waste_per_backtrack=tokens / count if count else shared.waste_per_backtrack,
            )  # fmt: skip
            floor = 0.0
            if c == "batch":
                inter = self.controllers["interactive"].state.pressure
                floor = inter + BATCH_YIELDS if inter > 0 else 0.0
            limits = ctl.update(now, sig, floor)
            statuses.append(self._status(c, ctl, limits, shared, rates, running[c]))
            telemetry.set_controller(c, limits, ctl.prediction.ratio)
            try:
                await self._publish(c, limits)
            except Exception:  # Redis trouble: readers keep the last limits meanwhile
                log.exception("budget %s: publish failed", c)
        with contextlib.suppress(Exception):  # the status is for operators: never fatal
            status = Status(ts_ms=now_ms(), worker=self.worker_id, classes=statuses)
            await publish_status(self.redis, self.config.topic_prefix, status)
        return ready

    def _status(self, c, ctl, limits, shared, rates, running) -> ClassStatus:
        p, state = ctl.prediction, ctl.state
        fields = {f: getattr(limits, f) for f in budget.ClassLimits.__dataclass_fields__}
        return ClassStatus(
            slo_class=c, limits=fields, rung=limits.rung, decision=state.describe(),
            predicted_ratio=p.ratio, new_job_ratio=p.new_job, running_ratio=p.running,
            done_ratio=p.done, pace_tok_s=shared.pace_tok_s, occupancy=shared.occupancy,
            queue_s=shared.queue_s, arrivals_per_s=rates[c], shed_per_s=rates[f"{c}:shed"],
            running_jobs=len(running), completed_in_window=ctl.done.count(self.clock()),
            deadline_cuts=self.cuts_seen.get(c, 0),
        )  # fmt: skip

    async def _publish(self, slo_class: str, limits: budget.ClassLimits) -> None:
        """Publishes changed limits (a new version). Unchanged ones are published again when
        the hash in Redis is gone or older than our last publish (Redis lost or rolled back its
        data): readers would otherwise use the defaults until the limits next change. A newer
        version is another publisher's, left alone until our limits change."""
        key = _published_key(limits)
        last = self.published.get(slo_class)
        if last is not None and last[0] == key:
            stored = await self.redis.hget(
                budget.budget_key(self.config.topic_prefix, slo_class), "version"
            )
            if stored is not None and int(stored) >= last[1]:
                return  # unchanged and still there: no new version
            log.warning(
                "budget %s: Redis lost v%d (has %s), republishing", slo_class, last[1], stored
            )
        version = await budget.publish(self.redis, self.config.topic_prefix, slo_class, limits)
        self.published[slo_class] = (key, version)
        telemetry.set_budget(slo_class, limits)
        log.info("budget %s v%d: %s (%s)", slo_class, version, key,
                 self.controllers[slo_class].state.describe())  # fmt: skip


def _published_key(limits: budget.ClassLimits) -> tuple:
    """What a change is: any actuator. The pressure itself moves every period; its rung and
    the actuators it sets are what readers act on."""
    return (limits.max_steps, limits.max_thinking_tokens, limits.probe_effort,
            limits.resample_cap, limits.early_exit, limits.shed, limits.slo_ms)  # fmt: skip
