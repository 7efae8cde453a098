"""The thinking-budget control law (docs/budget.md): pure code driven by the caller's clock.

Per SLO class, a PI law on log(max_thinking_tokens) holds the p95 end-to-end latency inside a
band just under the class SLO, so it spends as much thinking as the SLO allows; a brake cuts
the budget at once when p95 (or the consumer lag) is far over. `max_steps` and the probe
effort follow the token budget. The law is plain code driven by the caller's clock (`now_s`),
so the simulator (pipeline/budget/sim.py) and the tests run it without sleeping.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from pipeline import schema
from pipeline.budget.config import SloClassConfig


@dataclass(slots=True, frozen=True)
class BudgetLimits:
    """What the controller publishes per class; ingest stamps it, decode re-reads it."""

    max_steps: int
    max_thinking_tokens: int
    probe_effort: int  # steps between early-exit answer probes (1: probe after every step)
    version: int = 0  # Redis version it was published (or read) under; 0: not published

    def to_budget(self) -> schema.Budget:
        return schema.Budget(
            max_steps=self.max_steps,
            max_thinking_tokens=self.max_thinking_tokens,
            probe_effort=self.probe_effort,
            version=self.version,
        )


def limits_for(cfg: SloClassConfig, tokens: float) -> BudgetLimits:
    """The published limits for a token budget: steps and probe effort follow it."""
    max_tokens = min(max(round(tokens), cfg.min_thinking_tokens), cfg.max_thinking_tokens)
    steps = min(max(math.ceil(max_tokens / cfg.tokens_per_step), cfg.min_steps), cfg.max_steps)
    probe = round(steps / cfg.probes_per_job)
    probe = min(max(probe, cfg.min_probe_effort), cfg.max_probe_effort)
    return BudgetLimits(max_steps=steps, max_thinking_tokens=max_tokens, probe_effort=probe)


# -- measurement ----------------------------------------------------------------------------


class LatencyWindow:
    """End-to-end latencies of the jobs completed in the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()  # (completed at s, latency ms)

    def add(self, now_s: float, latency_ms: float) -> None:
        self._items.append((now_s, latency_ms))

    def prune(self, now_s: float) -> None:
        cutoff = now_s - self.window_s
        while self._items and self._items[0][0] < cutoff:
            self._items.popleft()

    def count(self, now_s: float) -> int:
        self.prune(now_s)
        return len(self._items)

    def rate(self, now_s: float) -> float:
        """Completions per second over the window."""
        return self.count(now_s) / self.window_s

    def p95(self, now_s: float) -> float | None:
        """Nearest-rank p95 in ms; None when the window is empty."""
        return self.quantile(now_s, 0.95)

    def quantile(self, now_s: float, q: float) -> float | None:
        """Nearest-rank quantile of the values in the window; None when it is empty."""
        self.prune(now_s)
        if not self._items:
            return None
        values = sorted(v for _, v in self._items)
        return values[max(0, math.ceil(q * len(values)) - 1)]


# -- the law --------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Observation:
    """What one control period sees: the window's p95 and size, and optionally the lag."""

    p95_ms: float | None
    count: int
    lag_jobs: int | None = None  # jobs admitted but not started (consumer lag)
    completion_rate: float = 0.0  # jobs/s, turns the lag into a queueing time
    demand_tokens: float | None = None  # p90 of the tokens jobs in the window actually used


@dataclass(slots=True, frozen=True)
class LawState:
    """The law's memory: u = log(tokens) (the clamped output is the integrator), last error."""

    log_tokens: float
    prev_error: float = 0.0
    hold: int = 0  # periods left after a brake, while the window still holds older jobs
    brake_lag: int = 0  # lag at the last brake: a lag still growing brakes again in the hold
    action: str = "init"  # the last step: brake, hold, band, queue, pi, saturated

    @classmethod
    def initial(cls, cfg: SloClassConfig) -> LawState:
        # Start at the top: a cold system is idle, and the first over-SLO window brakes.
        return cls(log_tokens=math.log(cfg.max_thinking_tokens))

    @property
    def tokens(self) -> float:
        return math.exp(self.log_tokens)


def control_step(cfg: SloClassConfig, state: LawState, obs: Observation) -> LawState:
    """One period of the law: brake, hold, hysteresis band, or a velocity-form PI step."""
    u_min, u_max = math.log(cfg.min_thinking_tokens), math.log(cfg.max_thinking_tokens)
    slo = cfg.slo_p95_ms
    queued_ms = None
    if obs.lag_jobs is not None and obs.completion_rate > 0:
        queued_ms = 1000.0 * obs.lag_jobs / obs.completion_rate  # Little: time to drain
    p95 = obs.p95_ms if obs.count >= cfg.min_samples else None
    lag_over = queued_ms is not None and queued_ms > cfg.lag_brake_frac * slo
    over = lag_over or (p95 is not None and p95 > cfg.brake_ratio * slo)
    # The lag is seen at once, the window's p95 only after jobs finish: during the hold a
    # growing queue still brakes, so a large load step is met within a few periods.
    lag_growing = lag_over and (obs.lag_jobs or 0) > state.brake_lag
    # A cut starts from what jobs use, not from a limit none of them reaches: cutting 512 to
    # 358 when jobs stop at 100 changes nothing, and the pipeline measured that (bench/RESULTS).
    cut_from = state.log_tokens
    if obs.demand_tokens is not None and obs.demand_tokens > 0:
        cut_from = min(cut_from, max(u_min, math.log(obs.demand_tokens)))
    if (over and state.hold == 0) or lag_growing:
        # Far over: do not wait for the integrator.
        u = max(u_min, cut_from + math.log(cfg.brake_factor))
        return LawState(u, 0.0, cfg.brake_hold_periods, obs.lag_jobs or 0, "brake")
    if state.hold > 0:
        return replace(state, hold=state.hold - 1, prev_error=0.0, action="hold")
    # Two errors in log space, the tighter one wins: latency outside the band (0 inside it:
    # hysteresis), and a standing queue above its target (the pool is at capacity, so more
    # thinking would only wait in line; the lag shows this periods before the p95 does).
    error = None
    if p95 is not None:
        lo, hi = cfg.band_lo * slo, cfg.band_hi * slo
        # Outside the band, steer for its middle (not its edge, which is only approached).
        error = 0.0 if lo <= p95 <= hi else math.log(math.sqrt(lo * hi) / p95)
    in_band = error == 0.0
    if queued_ms is not None and queued_ms > cfg.lag_hold_frac * slo:
        # Between the hold and cut marks the queue only stops rises (a band of its own: a
        # Poisson queue at capacity jitters); above the cut mark it cuts in proportion.
        queue_error = min(0.0, math.log(cfg.lag_cut_frac * slo / queued_ms))
        error = queue_error if error is None else min(error, queue_error)
    if error is None:
        return replace(state, prev_error=0.0, action="hold")  # too few samples to judge
    if error == 0.0:
        return replace(state, prev_error=0.0, action="band" if in_band else "queue")
    delta = cfg.kp * (error - state.prev_error) + cfg.ki * error
    # Rises are capped (latency reacts late to a budget raise), cuts are not.
    delta = min(delta, cfg.max_rise)
    u = (cut_from if delta < 0 else state.log_tokens) + delta
    # Anti-windup: the state is the clamped output, so a long saturation stores nothing and
    # the first period with an error of the other sign moves the budget off its bound.
    clamped = min(max(u, u_min), u_max)
    return LawState(clamped, error, 0, 0, "saturated" if clamped != u else "pi")


class BudgetController:
    """One SLO class's law with its latency window; feed it Results, call `update` per period."""

    def __init__(self, cfg: SloClassConfig) -> None:
        self.cfg = cfg
        self.window = LatencyWindow(cfg.window_s)
        self.used = LatencyWindow(cfg.window_s)  # tokens used per job, same window
        self.state = LawState.initial(cfg)

    def observe(self, now_s: float, latency_ms: float, used_tokens: int | None = None) -> None:
        self.window.add(now_s, latency_ms)
        if used_tokens is not None:
            self.used.add(now_s, float(used_tokens))

    def update(
        self, now_s: float, lag_jobs: int | None = None, completion_rate: float | None = None
    ) -> BudgetLimits:
        """One period of the law. `completion_rate` (jobs/s) is the rate that drains the queue
        `lag_jobs` counts; None: this class's own, right when the queue holds only its jobs. A
        queue shared with other classes drains at all their rates: the pipeline passes the sum,
        so another class's backlog is not divided by this class's (smaller) rate."""
        rate = self.window.rate(now_s) if completion_rate is None else completion_rate
        obs = Observation(
            p95_ms=self.window.p95(now_s),
            count=self.window.count(now_s),
            lag_jobs=lag_jobs,
            completion_rate=rate,
            demand_tokens=self.used.quantile(now_s, 0.9),
        )
        self.state = control_step(self.cfg, self.state, obs)
        return self.limits

    @property
    def limits(self) -> BudgetLimits:
        return limits_for(self.cfg, self.state.tokens)
