"""The budget law's configuration: per SLO class targets, bounds and gains (docs/budget.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pipeline import schema

SLO_CLASSES: tuple[schema.SloClass, ...] = ("interactive", "batch")


@dataclass(slots=True, frozen=True)
class SloClassConfig:
    """Targets, bounds and gains of one SLO class's budget law."""

    slo_p95_ms: float = 2000.0
    min_thinking_tokens: int = 32
    max_thinking_tokens: int = 512
    min_steps: int = 4
    max_steps: int = 64
    tokens_per_step: int = 8  # max_steps = thinking tokens / this, within the step bounds
    min_probe_effort: int = 1  # probe_effort: steps between early-exit answer probes
    max_probe_effort: int = 8
    probes_per_job: int = 8  # probe_effort = max_steps / this: the probe count stays flat
    window_s: float = 6.0  # latencies of jobs completed in the last window_s seconds
    min_samples: int = 20  # fewer in the window: p95 is noise, the law holds
    control_period_s: float = 2.0
    band_lo: float = 0.80  # hysteresis: no change while band_lo*SLO <= p95 <= band_hi*SLO
    band_hi: float = 0.95
    kp: float = 0.10  # velocity-form PI gains on log(tokens), per period
    ki: float = 0.10
    max_rise: float = math.log(1.5)  # one period raises the budget by at most 1.5x
    brake_ratio: float = 1.25  # p95 above this x SLO: cut by brake_factor at once
    brake_factor: float = 0.7
    # Queued work (lag / completion rate) as a fraction of the SLO: above lag_hold_frac the
    # budget may not rise, above lag_cut_frac the PI cuts, above lag_brake_frac it brakes.
    lag_hold_frac: float = 0.1
    lag_cut_frac: float = 0.2
    lag_brake_frac: float = 0.5
    brake_hold_periods: int = 3  # after a brake, wait for the window to see its effect

    def with_slo(self, slo_p95_ms: float) -> SloClassConfig:
        """This class at another SLO: the window and the control period keep their ratio to
        the SLO (the law's dynamics are in units of the SLO)."""
        k = slo_p95_ms / self.slo_p95_ms
        return replace(
            self,
            slo_p95_ms=slo_p95_ms,
            window_s=self.window_s * k,
            control_period_s=self.control_period_s * k,
        )

    def __post_init__(self) -> None:
        if self.slo_p95_ms <= 0:
            raise ValueError("slo_p95_ms must be positive")
        if not 1 <= self.min_thinking_tokens <= self.max_thinking_tokens:
            raise ValueError("need 1 <= min_thinking_tokens <= max_thinking_tokens")
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError("need 1 <= min_steps <= max_steps")
        if not 1 <= self.min_probe_effort <= self.max_probe_effort:
            raise ValueError("need 1 <= min_probe_effort <= max_probe_effort")
        if self.tokens_per_step < 1 or self.probes_per_job < 1 or self.min_samples < 1:
            raise ValueError("tokens_per_step, probes_per_job and min_samples must be >= 1")
        if self.window_s <= 0 or self.control_period_s <= 0:
            raise ValueError("window_s and control_period_s must be positive")
        if not 0 < self.band_lo <= self.band_hi <= 1.0 < self.brake_ratio:
            raise ValueError("need 0 < band_lo <= band_hi <= 1 < brake_ratio")
        if not 0 < self.brake_factor < 1:
            raise ValueError("brake_factor must be in (0, 1)")
        if self.kp < 0 or self.ki <= 0 or self.max_rise <= 0:
            raise ValueError("gains and max_rise must be positive")
        if not 0 < self.lag_hold_frac <= self.lag_cut_frac <= self.lag_brake_frac:
            raise ValueError("need 0 < lag_hold_frac <= lag_cut_frac <= lag_brake_frac")
        if self.brake_hold_periods < 0:
            raise ValueError("brake_hold_periods must be >= 0")


@dataclass(slots=True, frozen=True)
class BudgetConfig:
    """Both SLO classes; the one place for the budget law's defaults."""

    interactive: SloClassConfig = field(default_factory=SloClassConfig)
    # Batch trades latency for thinking: a 10x looser SLO, longer windows, slower periods.
    batch: SloClassConfig = field(
        default_factory=lambda: SloClassConfig(
            slo_p95_ms=20_000.0, window_s=60.0, control_period_s=10.0, min_samples=10
        )
    )

    def for_class(self, slo_class: str) -> SloClassConfig:
        if slo_class not in SLO_CLASSES:
            raise ValueError(f"unknown SLO class {slo_class!r}")
        return getattr(self, slo_class)

    @classmethod
    def scaled(
        cls,
        slo_ms: float | None = None,
        batch_slo_ms: float | None = None,
        max_thinking_tokens: int | None = None,
    ) -> BudgetConfig:
        """The defaults, with each class's SLO (STEPWISE_SLO_MS, STEPWISE_BATCH_SLO_MS) and the
        law's upper token bound (STEPWISE_MAX_THINKING_TOKENS) where given. A changed SLO
        scales the class's window and control period with it (a law that looks 6 s back
        cannot hold a 20 s SLO); a value that is not positive is a ValueError."""
        base = cls()
        out = {}
        for name, slo in (("interactive", slo_ms), ("batch", batch_slo_ms)):
            cfg = base.for_class(name)
            if slo is not None:
                cfg = cfg.with_slo(_positive("SLO", slo))
            if max_thinking_tokens is not None:
                top = int(_positive("max_thinking_tokens", max_thinking_tokens))
                cfg = replace(cfg, max_thinking_tokens=max(top, cfg.min_thinking_tokens))
            out[name] = cfg
        return cls(**out)


def _positive(what: str, value: float) -> float:
    if value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return value


DEFAULT_BUDGET_CONFIG = BudgetConfig()
