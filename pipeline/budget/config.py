"""The budget controller's configuration: per SLO class targets, bounds, gains (docs/budget.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pipeline import schema
from pipeline.settings import Settings, build, declared, setting

SLO_CLASSES: tuple[schema.SloClass, ...] = ("interactive", "batch")


@dataclass(slots=True, frozen=True)
class SloClassConfig:
    """Targets, actuator bounds and gains of one SLO class's law.

    The law moves one pressure level `u` in [0, 5]; each unit is one rung of the actuator
    ladder, cheapest in accuracy first (pipeline/budget/ladder.py): 0-1 the per-job backtrack
    cap, 1-2 resampling off (steps still checked and reported), 2-3 early-exit probes, 3-4
    thinking tokens and steps, 4-5 admission (a share of new jobs refused as `overloaded`)."""

    slo_p95_ms: float = 20_000.0
    # Thinking tokens: the class's ceiling and the floor the law cuts to before it sheds; the
    # floor is where answers stop being worth serving (the r1-reasoner's budget-forcing curve
    # keeps 96% of its accuracy at 96 tokens, 54% at 64: bench/RESULTS.md).
    min_thinking_tokens: int = 64
    max_thinking_tokens: int = 512
    min_steps: int = 4
    max_steps: int = 64
    tokens_per_step: int = 8  # max_steps = thinking tokens / this, within the step bounds
    backtrack_cap: int = 8  # the first rung's cap on backtracks per job; it tightens to 1
    min_probe_effort: int = 1  # probe_effort: steps between early-exit answer probes
    max_probe_effort: int = 8
    answer_tokens: int = 24  # a forced answer's tokens, in every latency prediction
    max_shed: float = 0.95  # admission never refuses every job: some keep measuring the pace
    control_period_s: float = 1.0
    # The predicted latency over the SLO is held inside [band_lo, band_hi]: nothing moves in
    # the band (hysteresis), above it the pressure rises, below it falls.
    band_lo: float = 0.8
    band_hi: float = 1.0
    rise_per_s: float = 0.5  # pressure rise per second per unit of ln(predicted / band_hi)
    fall_per_s: float = 0.05  # pressure fall per second while under the band (slower: no flapping)
    max_rise_per_s: float = 1.0  # a rung a second at the most
    calm_s: float = 10.0  # the ratio stays under the band this long before the pressure falls
    # Completed jobs' latencies: the last `window_jobs` within `window_slos` SLOs, whichever
    # holds fewer; their say grows with their count up to `full_say_jobs`.
    window_jobs: int = 40
    window_slos: float = 4.0
    full_say_jobs: int = 5

    def with_slo(self, slo_p95_ms: float) -> SloClassConfig:
        return replace(self, slo_p95_ms=slo_p95_ms)

    @property
    def window_s(self) -> float:
        return self.window_slos * self.slo_p95_ms / 1000.0

    def __post_init__(self) -> None:
        if self.slo_p95_ms <= 0:
            raise ValueError("slo_p95_ms must be positive")
        if not 1 <= self.min_thinking_tokens <= self.max_thinking_tokens:
            raise ValueError("need 1 <= min_thinking_tokens <= max_thinking_tokens")
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError("need 1 <= min_steps <= max_steps")
        if not 1 <= self.min_probe_effort <= self.max_probe_effort:
            raise ValueError("need 1 <= min_probe_effort <= max_probe_effort")
        if self.tokens_per_step < 1 or self.backtrack_cap < 1 or self.answer_tokens < 1:
            raise ValueError("tokens_per_step, backtrack_cap and answer_tokens must be >= 1")
        if not 0.0 <= self.max_shed < 1.0:
            raise ValueError("max_shed must be in [0, 1)")
        if self.control_period_s <= 0 or self.window_slos <= 0:
            raise ValueError("control_period_s and window_slos must be positive")
        if not 0 < self.band_lo <= self.band_hi <= 1.0:
            raise ValueError("need 0 < band_lo <= band_hi <= 1")
        if min(self.rise_per_s, self.fall_per_s, self.max_rise_per_s) <= 0:
            raise ValueError("rise_per_s, fall_per_s and max_rise_per_s must be positive")
        if self.window_jobs < 1 or self.full_say_jobs < 1:
            raise ValueError("window_jobs and full_say_jobs must be >= 1")


@dataclass(slots=True, frozen=True)
class BudgetConfig:
    """Both SLO classes; the one place for the budget law's defaults."""

    interactive: SloClassConfig = field(default_factory=SloClassConfig)
    # Batch trades latency for thinking: a looser SLO, a slower period.
    batch: SloClassConfig = field(
        default_factory=lambda: SloClassConfig(slo_p95_ms=120_000.0, control_period_s=2.0)
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
        min_thinking_tokens: int | None = None,
    ) -> BudgetConfig:
        """The defaults, with each class's SLO (STEPWISE_SLO_MS, STEPWISE_BATCH_SLO_MS) and the
        law's token bounds (STEPWISE_MAX_THINKING_TOKENS, STEPWISE_MIN_THINKING_TOKENS) where
        given; a value that is not positive is a ValueError."""
        base = cls()
        out = {}
        for name, slo in (("interactive", slo_ms), ("batch", batch_slo_ms)):
            cfg = base.for_class(name)
            if slo is not None:
                cfg = cfg.with_slo(_positive("SLO", slo))
            top = cfg.max_thinking_tokens
            if max_thinking_tokens is not None:
                top = int(_positive("max_thinking_tokens", max_thinking_tokens))
            floor = min(cfg.min_thinking_tokens, top)
            if min_thinking_tokens is not None:
                floor = int(_positive("min_thinking_tokens", min_thinking_tokens))
                top = max(top, floor)
            out[name] = replace(cfg, max_thinking_tokens=top, min_thinking_tokens=floor)
        return cls(**out)


@declared
@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """The budget controller's settings (the rest of the law is `SloClassConfig`'s)."""

    slo_ms: float | None = setting(
        None,
        env="SLO_MS",
        concern="budget",
        kind=float,
        help="the interactive class's latency SLO (ms); empty: 20000",
    )
    batch_slo_ms: float | None = setting(
        None,
        env="BATCH_SLO_MS",
        concern="budget",
        kind=float,
        help="the batch class's latency SLO (ms); empty: 120000",
    )
    max_thinking_tokens: int | None = setting(
        None,
        env="MAX_THINKING_TOKENS",
        concern="budget",
        kind=int,
        help="the law's ceiling on thinking tokens (its rest state); empty: 512",
    )
    min_thinking_tokens: int | None = setting(
        None,
        env="MIN_THINKING_TOKENS",
        concern="budget",
        kind=int,
        help="the thinking budget the law cuts to before it sheds load; empty: 64",
    )

    def config(self) -> BudgetConfig:
        return BudgetConfig.scaled(
            self.slo_ms, self.batch_slo_ms, self.max_thinking_tokens, self.min_thinking_tokens
        )


def budget_config(source: Settings | None = None) -> BudgetConfig:
    """The budget law's configuration from the process's settings."""
    return build(BudgetSettings, source).config()


def _positive(what: str, value: float) -> float:
    if value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return value


DEFAULT_BUDGET_CONFIG = BudgetConfig()
