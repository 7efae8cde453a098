"""The actuator ladder: one pressure level -> every knob the pipeline has, cheapest first.

The law (law.py) moves a single pressure level `u` in [0, LEVELS]; this module turns it into
the limits a class publishes. Each unit of `u` is one rung, and a rung only moves once the rungs
below it are spent, in the order of what they cost in accuracy (docs/budget.md has the figures):

    0-1  backtracks per job: no cap at 0, then `backtrack_cap` tightening to 1
    1-2  resampling off: a contradicted step is still checked and reported, no longer redone
    2-3  early exit on, its probes from every `max_probe_effort` steps to every step
    3-4  thinking tokens (and steps) from the class ceiling down to its floor, on a log scale
    4-5  admission: a share of new jobs, rising to `max_shed`, is refused as `overloaded`

Every rung moves back the same way when the pressure falls, so every decision is reversible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline import schema
from pipeline.budget.config import SloClassConfig

LEVELS = 5.0
RUNGS = ("backtracks", "resampling", "early_exit", "thinking", "admission")


@dataclass(slots=True, frozen=True)
class ClassLimits:
    """What the controller publishes per class; ingest stamps it, decode re-reads it live."""

    max_steps: int
    max_thinking_tokens: int
    probe_effort: int  # steps between early-exit answer probes (1: after every step)
    resample_cap: int | None = None  # backtracks per job before resampling stops (None: no cap)
    early_exit: bool = False  # probe for an early answer even in jobs that did not ask
    shed: float = 0.0  # share of new jobs ingest refuses as `overloaded`
    retry_after_s: float = 0.0  # what a refused job is told
    slo_ms: float = 0.0  # the class SLO: a job's deadline when it brings no `slo.e2e_ms`
    pressure: float = 0.0
    version: int = 0  # Redis version it was published (or read) under; 0: not published

    @property
    def rung(self) -> str:
        """The rung the pressure is on (`none` at rest)."""
        if self.pressure <= 0:
            return "none"
        return RUNGS[min(len(RUNGS) - 1, int(self.pressure))]

    def to_budget(self) -> schema.Budget:
        """The limits as the wire's Budget (stamped by ingest, re-read by decode)."""
        return schema.Budget(
            max_steps=self.max_steps,
            max_thinking_tokens=self.max_thinking_tokens,
            probe_effort=self.probe_effort,
            resample_cap=self.resample_cap,
            early_exit=self.early_exit,
            shed=self.shed,
            retry_after_s=self.retry_after_s,
            slo_ms=self.slo_ms,
            pressure=self.pressure,
            version=self.version,
        )


def _between(u: float, rung: int) -> float:
    """How far `u` is into rung `rung` (0: not reached, 1: spent)."""
    return min(1.0, max(0.0, u - rung))


def _geometric(hi: float, lo: float, x: float) -> float:
    """From hi (x = 0) to lo (x = 1) on a log scale: the same relative step everywhere."""
    return math.exp(math.log(hi) + x * (math.log(lo) - math.log(hi)))


def thinking_tokens(cfg: SloClassConfig, u: float) -> int:
    return round(_geometric(cfg.max_thinking_tokens, cfg.min_thinking_tokens, _between(u, 3)))


def shed_share(cfg: SloClassConfig, u: float) -> float:
    return cfg.max_shed * _between(u, 4)


def limits_at(cfg: SloClassConfig, u: float, retry_after_s: float = 0.0) -> ClassLimits:
    """The class's limits at pressure `u` (clamped to [0, LEVELS])."""
    u = min(LEVELS, max(0.0, u))
    cap = None
    if u > 0:
        # 0+ -> backtrack_cap, 1 -> 1 backtrack, past 1 -> 0 (resampling off).
        cap = 0 if u >= 1 else max(1, round(_geometric(cfg.backtrack_cap, 1, u)))
    early = u >= 2
    probe = cfg.max_probe_effort
    if early:
        probe = round(_geometric(cfg.max_probe_effort, cfg.min_probe_effort, _between(u, 2)))
    tokens = thinking_tokens(cfg, u)
    steps = min(max(math.ceil(tokens / cfg.tokens_per_step), cfg.min_steps), cfg.max_steps)
    shed = shed_share(cfg, u)
    return ClassLimits(
        max_steps=steps,
        max_thinking_tokens=tokens,
        probe_effort=max(cfg.min_probe_effort, min(probe, cfg.max_probe_effort)),
        resample_cap=cap,
        early_exit=early,
        shed=round(shed, 2),  # steps of 1%: a publish per change, not per period
        retry_after_s=float(math.ceil(retry_after_s)) if shed > 0 else 0.0,
        slo_ms=cfg.slo_p95_ms,
        pressure=round(u, 4),
    )


def rest_limits(cfg: SloClassConfig) -> ClassLimits:
    """The limits with no pressure: the class's defaults, every job as it asked."""
    return limits_at(cfg, 0.0)
