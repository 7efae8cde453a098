"""The budget law on its own: bounds, hysteresis, anti-windup, brake, direction, the window."""

from __future__ import annotations

import math

import pytest

from pipeline import budget
from pipeline.budget import (
    DEFAULT_BUDGET_CONFIG,
    BudgetController,
    BudgetLimits,
    LatencyWindow,
    LawState,
    Observation,
    SloClassConfig,
    control_step,
    limits_for,
)
from pipeline.settings import Settings

CFG = SloClassConfig()  # interactive: SLO 2000 ms, band 1600..1900 ms, tokens 32..512


def obs(p95: float, count: int = 100, **kw) -> Observation:
    return Observation(p95_ms=p95, count=count, **kw)


def run(state: LawState, p95: float, periods: int, cfg: SloClassConfig = CFG) -> LawState:
    for _ in range(periods):
        state = control_step(cfg, state, obs(p95))
    return state


def at(tokens: float) -> LawState:
    return LawState(log_tokens=math.log(tokens))


def test_starts_at_the_maximum_and_stays_there_when_idle():
    state = run(LawState.initial(CFG), p95=300.0, periods=50)
    assert state.tokens == pytest.approx(CFG.max_thinking_tokens)
    assert state.action == "saturated"


def test_bounds_hold_under_any_error():
    state = LawState.initial(CFG)
    for p95 in [50_000.0] * 40 + [10.0] * 40 + [2400.0] * 40 + [1.0] * 5:
        state = control_step(CFG, state, obs(p95))
        assert CFG.min_thinking_tokens <= round(state.tokens) <= CFG.max_thinking_tokens
        limits = limits_for(CFG, state.tokens)
        assert CFG.min_steps <= limits.max_steps <= CFG.max_steps
        assert CFG.min_probe_effort <= limits.probe_effort <= CFG.max_probe_effort


def test_hysteresis_no_change_inside_the_band():
    state = at(200.0)
    for p95 in (1600.0, 1700.0, 1750.0, 1899.0, 1900.0, 1650.0):
        new = control_step(CFG, state, obs(p95))
        assert new.log_tokens == state.log_tokens
        assert new.action == "band"
        state = new


def test_entering_the_band_does_not_kick_the_output():
    # Velocity form: a P term would jump when the error drops to 0; the band holds instead.
    state = run(at(200.0), p95=1000.0, periods=3)
    held = control_step(CFG, state, obs(1700.0))
    assert held.log_tokens == state.log_tokens


@pytest.mark.parametrize("p95", [100.0, 800.0, 1500.0, 1599.0])
def test_below_the_band_raises(p95):
    state = at(100.0)
    assert control_step(CFG, state, obs(p95)).tokens > state.tokens


@pytest.mark.parametrize("p95", [1901.0, 2100.0, 2400.0, 2499.0])
def test_above_the_band_cuts(p95):
    state = at(300.0)
    assert control_step(CFG, state, obs(p95)).tokens < state.tokens


def test_response_is_monotonic_in_the_error():
    state = at(200.0)
    p95s = [100.0, 400.0, 800.0, 1200.0, 1500.0, 1700.0, 1950.0, 2100.0, 2300.0, 2450.0]
    tokens = [control_step(CFG, state, obs(p)).tokens for p in p95s]
    assert tokens == sorted(tokens, reverse=True)


def test_rises_are_capped_per_period():
    new = control_step(CFG, at(40.0), obs(1.0))  # error ln(1600) would be a huge step
    assert new.tokens == pytest.approx(40.0 * 1.5)


def test_anti_windup_reacts_at_once_after_a_long_saturation():
    # 500 periods far below the band at the max: nothing accumulates...
    state = run(LawState.initial(CFG), p95=200.0, periods=500)
    assert state.tokens == pytest.approx(CFG.max_thinking_tokens)
    # ...so the first period over the band moves the budget off the bound.
    state = control_step(CFG, state, obs(2200.0))
    assert state.tokens < CFG.max_thinking_tokens
    # Symmetric at the floor: a long overload, then room again, rises on the first period.
    state = at(CFG.min_thinking_tokens)
    for _ in range(500):
        state = control_step(CFG, state, obs(2300.0))
    assert state.tokens == pytest.approx(CFG.min_thinking_tokens)
    assert control_step(CFG, state, obs(500.0)).tokens > CFG.min_thinking_tokens


def test_brake_cuts_at_once_then_holds_while_the_window_catches_up():
    state = at(400.0)
    braked = control_step(CFG, state, obs(3000.0))
    assert braked.action == "brake"
    assert braked.tokens == pytest.approx(400.0 * CFG.brake_factor)
    held = braked
    for _ in range(CFG.brake_hold_periods):
        held = control_step(CFG, held, obs(3000.0))  # the window still has pre-brake jobs
        assert held.action == "hold" and held.tokens == braked.tokens
    assert control_step(CFG, held, obs(3000.0)).action == "brake"


def test_growing_lag_brakes_even_during_the_hold():
    # 200 queued at 100 jobs/s: 2 s of work, far over lag_brake_frac * SLO = 1 s.
    state = control_step(CFG, at(400.0), obs(1000.0, lag_jobs=200, completion_rate=100.0))
    assert state.action == "brake"
    again = control_step(CFG, state, obs(1000.0, lag_jobs=300, completion_rate=100.0))
    assert again.action == "brake" and again.tokens < state.tokens
    drained = control_step(CFG, again, obs(1000.0, lag_jobs=150, completion_rate=100.0))
    assert drained.action == "hold"  # still over, but shrinking: the cuts are working


def test_queue_stops_rises_then_cuts():
    state = at(200.0)
    free = control_step(CFG, state, obs(1000.0, lag_jobs=5, completion_rate=100.0))  # 50 ms
    assert free.tokens > state.tokens
    held = control_step(CFG, state, obs(1000.0, lag_jobs=30, completion_rate=100.0))  # 300 ms
    assert held.tokens == state.tokens
    cut = control_step(CFG, state, obs(1000.0, lag_jobs=80, completion_rate=100.0))  # 800 ms
    assert cut.tokens < state.tokens


def test_too_few_samples_hold():
    state = at(200.0)
    for p95 in (100.0, 5000.0):
        new = control_step(CFG, state, obs(p95, count=CFG.min_samples - 1))
        assert new.tokens == state.tokens and new.action == "hold"


def test_steady_overload_converges_into_the_band():
    # A static plant p95 = k * tokens: the law must settle inside the band, not cycle.
    state, k = LawState.initial(CFG), 2500.0 / 150.0  # 150 tokens would give 2.5 s
    history = []
    for _ in range(100):
        p95 = k * state.tokens
        state = control_step(CFG, state, obs(p95))
        history.append(state.tokens)
    final = k * history[-1]
    assert 0.80 * CFG.slo_p95_ms <= final <= 0.95 * CFG.slo_p95_ms
    assert max(history[-30:]) == min(history[-30:])  # parked in the band


def test_limits_follow_the_token_budget():
    assert limits_for(CFG, 512) == BudgetLimits(
        max_steps=64, max_thinking_tokens=512, probe_effort=8
    )
    assert limits_for(CFG, 32) == BudgetLimits(max_steps=4, max_thinking_tokens=32, probe_effort=1)
    mid = limits_for(CFG, 200)
    assert (mid.max_steps, mid.probe_effort) == (25, 3)
    assert limits_for(CFG, 10_000).max_thinking_tokens == 512
    assert limits_for(CFG, 1.0).max_thinking_tokens == 32
    budget = BudgetLimits(max_steps=5, max_thinking_tokens=40, probe_effort=1, version=7)
    assert (budget.to_budget().max_steps, budget.to_budget().version) == (5, 7)


def test_window_is_time_based():
    w = LatencyWindow(window_s=10.0)
    assert w.p95(0.0) is None and w.count(0.0) == 0
    for i in range(100):
        w.add(i * 0.1, float(i + 1))  # 1..100 ms over 10 s
    assert w.count(9.9) == 100
    assert w.p95(9.9) == 95.0
    assert w.count(15.0) == 50  # the first 5 s slid out
    assert w.p95(15.0) == 98.0
    assert w.rate(15.0) == pytest.approx(5.0)


def test_controller_feeds_the_law():
    c = BudgetController(CFG)
    for i in range(200):
        c.observe(i * 0.01, 3000.0)
    limits = c.update(2.0)
    assert c.state.action == "brake"
    assert limits.max_thinking_tokens == round(512 * CFG.brake_factor)


def test_config_checks_and_classes():
    assert DEFAULT_BUDGET_CONFIG.for_class("batch").slo_p95_ms == 20_000.0
    assert DEFAULT_BUDGET_CONFIG.for_class("interactive").slo_p95_ms == 2000.0
    with pytest.raises(ValueError):
        DEFAULT_BUDGET_CONFIG.for_class("bulk")
    with pytest.raises(ValueError):
        SloClassConfig(band_lo=0.9, band_hi=0.8)
    with pytest.raises(ValueError):
        SloClassConfig(min_thinking_tokens=600)
    with pytest.raises(ValueError):
        SloClassConfig(brake_factor=1.0)


def test_a_cut_starts_from_what_jobs_use_not_from_an_unreached_limit():
    cfg = budget.DEFAULT_BUDGET_CONFIG.for_class("interactive")
    state = budget.LawState.initial(cfg)  # at the maximum, 512
    far_over = dict(p95_ms=10 * cfg.slo_p95_ms, count=100)
    blind = budget.control_step(cfg, state, budget.Observation(**far_over))
    seeing = budget.control_step(cfg, state, budget.Observation(**far_over, demand_tokens=100.0))
    assert blind.action == seeing.action == "brake"
    assert abs(blind.tokens - cfg.max_thinking_tokens * cfg.brake_factor) < 1e-6
    assert abs(seeing.tokens - 100.0 * cfg.brake_factor) < 1e-6
    # Demand above the limit changes nothing; rises still start from the limit.
    high = budget.control_step(cfg, state, budget.Observation(**far_over, demand_tokens=1e6))
    assert abs(high.tokens - blind.tokens) < 1e-6


def test_budget_config_from_settings_scales_window_and_period_with_the_slo():
    cfg = Settings.load(
        env={"STEPWISE_SLO_MS": "10000", "STEPWISE_MAX_THINKING_TOKENS": "768"}
    ).budget()
    base = DEFAULT_BUDGET_CONFIG.interactive
    ia = cfg.interactive
    assert ia.slo_p95_ms == 10_000.0
    assert ia.window_s == pytest.approx(base.window_s * 5)
    assert ia.control_period_s == pytest.approx(base.control_period_s * 5)
    assert ia.max_thinking_tokens == 768 and cfg.batch.max_thinking_tokens == 768
    assert cfg.batch.slo_p95_ms == DEFAULT_BUDGET_CONFIG.batch.slo_p95_ms  # untouched
    assert Settings.load(env={}).budget() == DEFAULT_BUDGET_CONFIG


@pytest.mark.parametrize("value", ["fast", "1e400x"])
def test_budget_settings_name_a_bad_variable(value):
    with pytest.raises(ValueError, match="STEPWISE_BATCH_SLO_MS"):
        Settings.load(env={"STEPWISE_BATCH_SLO_MS": value})


@pytest.mark.parametrize("value", ["0", "-5"])
def test_budget_config_refuses_a_slo_that_is_not_positive(value):
    with pytest.raises(ValueError, match="positive"):
        Settings.load(env={"STEPWISE_BATCH_SLO_MS": value}).budget()
