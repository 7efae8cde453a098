"""The budget law: one pressure level per SLO class, moved by the predicted latency.

Every control period the law reads the class's signals (signals.py) and computes the predicted
latency over the SLO at the limits in force (`predicted_ratio`). Inside the band
[band_lo, band_hi] nothing moves (hysteresis). Above it the pressure rises in proportion to
ln(ratio / band_hi), at most a rung a second. Below the band it falls at
`fall_per_s` a second, so every rung comes back when the load goes, most expensive first,
but only as far as the prediction one step down stays under the band (else the rung given back
would be taken again the next period: a limit cycle). The
pressure maps to the actuators through the ladder (ladder.py); running jobs are held to their
own deadlines in decode meanwhile (effective.py), so a job admitted before the law caught up
is answered on time rather than late.

Nothing here counts samples before it acts: at 0.1 jobs/s the running jobs and the pace say
within a period what ten completions would say in two minutes. The law is plain code on the
caller's clock, so the simulator (sim.py) and the tests run it without sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipeline.budget.config import SloClassConfig
from pipeline.budget.ladder import LEVELS, ClassLimits, limits_at
from pipeline.budget.signals import Completed, Demand, Prediction, Signals, predicted_ratio


@dataclass(slots=True, frozen=True)
class LawState:
    """The law's memory: the pressure level and what the last period did, and why."""

    pressure: float = 0.0
    action: str = "init"  # hold | band | rise | fall | rest | kept | calm
    ratio: float | None = None
    source: str = "none"  # which signal set the ratio: new_job | running | done | none
    calm_s: float = 0.0  # how long the ratio has stayed under the band

    def describe(self) -> str:
        ratio = "unknown" if self.ratio is None else f"{self.ratio:.2f}"
        return f"{self.action}: predicted/SLO {ratio} (from {self.source})"


def control_step(
    cfg: SloClassConfig,
    state: LawState,
    predict: Callable[[float], Prediction],
    dt_s: float,
    floor: float = 0.0,
) -> LawState:
    """One period of the law. `predict(u)` is the class's prediction at pressure `u` (the
    thinking cap moves with it); `floor` is a pressure the class may not go under (batch
    yields to interactive)."""
    u, calm = max(state.pressure, floor), state.calm_s
    pred = predict(u)
    ratio = pred.ratio
    if ratio is None:
        action = "hold"
    elif ratio > cfg.band_hi:
        action = "rise"
        u += min(cfg.max_rise_per_s, cfg.rise_per_s * math.log(ratio / cfg.band_hi)) * dt_s
    elif ratio < cfg.band_lo and u > floor:
        calm += dt_s
        # Fall once the ratio has stayed under the band a while (one period under it can be a
        # lull between arrivals), and only where the prediction one step down stays under the
        # band: a rung given back would otherwise be taken again (a limit cycle).
        lower = max(floor, u - cfg.fall_per_s * dt_s)
        after = predict(lower).ratio
        if calm < cfg.calm_s:
            action = "calm"
        elif after is None or after <= cfg.band_hi:
            action, u = "fall", lower
        else:
            action = "kept"
    else:
        action = "band" if ratio >= cfg.band_lo else "rest"
    if action not in ("calm", "fall", "kept"):
        calm = 0.0
    u = min(LEVELS, max(floor, u))
    return LawState(u, action, ratio, pred.source, calm)


class BudgetController:
    """One SLO class's law: its completed-jobs window and its pressure. Feed it Results
    (`observe`), call `update` once a period with the live signals."""

    def __init__(self, cfg: SloClassConfig) -> None:
        self.cfg = cfg
        self.done = Completed(cfg.window_jobs, cfg.window_s)
        self.state = LawState()
        self.last_s: float | None = None
        self.prediction = Prediction(None, None, None, None)

    def observe(self, now_s: float, latency_ms: float, demand: Demand) -> None:
        """A completed job: its latency and the work it wanted."""
        self.done.add(now_s, latency_ms, demand)

    def signals(self, now_s: float, sig: Signals) -> Signals:
        """`sig` (the live pace, queue, running jobs) with this class's own window in it."""
        p90 = self.done.latency_quantile(now_s, 0.9)
        return replace(
            sig,
            slo_s=self.cfg.slo_p95_ms / 1000.0,
            answer_tokens=self.cfg.answer_tokens,
            demand=sig.demand or self.done.demands(),
            done_p90_s=None if p90 is None else p90 / 1000.0,
            done_count=self.done.count(now_s),
            full_say=self.cfg.full_say_jobs,
        )

    def update(self, now_s: float, sig: Signals, floor: float = 0.0) -> ClassLimits:
        dt = self.cfg.control_period_s if self.last_s is None else now_s - self.last_s
        self.last_s = now_s
        sig = self.signals(now_s, sig)

        def predict(u: float) -> Prediction:
            return predicted_ratio(sig, limits_at(self.cfg, u))

        self.state = control_step(self.cfg, self.state, predict, max(0.0, dt), floor)
        self.prediction = predict(self.state.pressure)
        return self.limits_for(sig)

    def limits_for(self, sig: Signals | None = None) -> ClassLimits:
        """The limits at the present pressure; a refused job is told to come back after about
        one job's time at the present pace (bounded by the SLO)."""
        retry = self.cfg.slo_p95_ms / 2000.0
        if sig is not None:
            new = sig.new_job_s(limits_at(self.cfg, self.state.pressure))
            if new is not None:
                retry = new
        retry = min(max(1.0, retry), self.cfg.slo_p95_ms / 1000.0)
        return limits_at(self.cfg, self.state.pressure, retry)

    @property
    def limits(self) -> ClassLimits:
        return self.limits_for()
