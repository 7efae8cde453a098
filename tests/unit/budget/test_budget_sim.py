"""The budget law on the simulated pipeline (issue 6's acceptance, in simulation): step load up
and down, settling, recovery, steady-state band, and the controller against a fixed budget."""

from __future__ import annotations

import math
import statistics

import pytest

from pipeline.budget import SloClassConfig
from pipeline.budget.sim import SimConfig, make_jobs, run_fixed, simulate

CFG = SloClassConfig()  # interactive: SLO p95 2 s, 32..512 thinking tokens, period 2 s
SIM = SimConfig(bucket_s=5.0)  # capacity at the max budget: ~64 jobs/s (see docs/budget.md)
SLO = CFG.slo_p95_ms
STEP = [(0.0, 20.0), (60.0, 90.0), (240.0, 20.0)]  # jobs/s: light, 1.4x capacity, light
STEP_UP, STEP_DOWN, END = 60.0, 240.0, 360.0
SETTLE_S = 20.0  # stated settling time after the step up
RECOVER_S = 30.0  # stated time to reach 90% of the max budget after the step down
STEADY_BAND = (0.65, 1.35)  # stated steady-state band: budget / its median over 60 s
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module", params=SEEDS)
def step_run(request):
    return simulate(SIM, CFG, STEP, END, seed=request.param)


def test_p95_stays_under_the_slo_after_settling(step_run):
    for b in step_run.buckets:
        if b.start_s >= STEP_UP + SETTLE_S:
            assert b.p95_ms is not None and b.p95_ms <= SLO, (b.start_s, b.p95_ms)
    before = [b.p95_ms for b in step_run.buckets if b.start_s < STEP_UP]
    assert max(before) <= SLO


def test_budget_cuts_under_load_and_recovers_when_it_falls(step_run):
    budgets = dict(step_run.budgets)
    assert budgets[STEP_UP - CFG.control_period_s] == CFG.max_thinking_tokens  # light: max
    loaded = [tok for t, tok in step_run.budgets if STEP_UP + SETTLE_S <= t < STEP_DOWN]
    assert max(loaded) < 0.7 * CFG.max_thinking_tokens
    recovered = [tok for t, tok in step_run.budgets if t >= STEP_DOWN + RECOVER_S]
    assert min(recovered) >= 0.9 * CFG.max_thinking_tokens
    assert recovered[-1] == CFG.max_thinking_tokens


def test_no_oscillation_beyond_the_band_at_steady_load(step_run):
    steady = [tok for t, tok in step_run.budgets if STEP_DOWN - 60.0 <= t < STEP_DOWN]
    assert len(steady) == 30
    median = statistics.median(steady)
    lo, hi = STEADY_BAND
    assert lo * median <= min(steady) and max(steady) <= hi * median, (min(steady), max(steady))
    # At a light steady load it does not move at all: saturated at the max.
    light = [tok for t, tok in step_run.budgets if t >= STEP_DOWN + RECOVER_S + 30.0]
    assert set(light) == {CFG.max_thinking_tokens}


def test_controller_beats_a_fixed_budget_past_its_capacity():
    # 70 jobs/s is 1.1x what the pool serves at the fixed max budget: its queue grows.
    for seed in (1, 2):
        fixed = run_fixed(SIM, CFG, [(0.0, 70.0)], 150.0, seed=seed).summary(30.0, 150.0)
        ctl = simulate(SIM, CFG, [(0.0, 70.0)], 150.0, seed=seed).summary(30.0, 150.0)
        assert fixed["p95_ms"] > SLO
        assert ctl["p95_ms"] <= SLO
        assert ctl["goodput_per_s"] >= 2.0 * fixed["goodput_per_s"]
        assert abs(ctl["accuracy"] - fixed["accuracy"]) <= 0.05


@pytest.mark.parametrize("rate", [20.0, 40.0, 60.0, 80.0, 100.0])
def test_controller_never_worse_on_a_rate_ladder(rate):
    fixed = run_fixed(SIM, CFG, [(0.0, rate)], 150.0, seed=2).summary(30.0, 150.0)
    ctl = simulate(SIM, CFG, [(0.0, rate)], 150.0, seed=2).summary(30.0, 150.0)
    assert ctl["p95_ms"] <= SLO
    assert ctl["goodput_per_s"] >= 0.98 * fixed["goodput_per_s"]
    assert fixed["accuracy"] - ctl["accuracy"] <= 0.05
    if fixed["p95_ms"] <= 0.8 * SLO:  # light: the controller is the fixed max budget
        assert ctl == fixed


def test_deterministic_for_a_seed():
    a = simulate(SIM, CFG, STEP, 120.0, seed=7)
    b = simulate(SIM, CFG, STEP, 120.0, seed=7)
    c = simulate(SIM, CFG, STEP, 120.0, seed=8)
    assert a.budgets == b.budgets and a.summary() == b.summary()
    assert a.summary() != c.summary()


def test_arrivals_follow_the_schedule():
    jobs = make_jobs(SIM, [(0.0, 10.0), (100.0, 50.0)], 200.0, seed=3)
    first = sum(j.arrival_s < 100.0 for j in jobs)
    assert 900 <= first <= 1100 and 4500 <= len(jobs) - first <= 5500
    assert all(0.0 <= j.arrival_s < 200.0 for j in jobs)
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)


def test_an_idle_pool_serves_each_job_in_its_token_time():
    # One job at a time: latency = prefill + (min(natural, budget) + answer) * t_iter(1).
    sim = SimConfig(bucket_s=10.0)
    schedule, duration = [(0.0, 0.002)], 50_000.0  # overlaps are vanishingly rare
    result = run_fixed(sim, CFG, schedule, duration, seed=5, tokens=100)
    jobs = make_jobs(sim, schedule, duration, seed=5)
    want = sorted(
        1000.0 * (sim.prefill_s + (min(j.natural_tokens, 100) + sim.answer_tokens) * sim.t_iter(1))
        for j in jobs
    )
    got = sorted(lat for b in result.buckets for lat in b.latencies_ms)
    assert len(got) >= len(want) - 1  # the last may still run at the end
    assert got == pytest.approx(want[: len(got)], rel=1e-6)


def test_quality_model():
    assert SIM.p_correct(512, 300) == SIM.p_full
    assert SIM.p_correct(150, 300) == pytest.approx(SIM.p_full - SIM.loss_per_halving)
    assert SIM.p_correct(1, 2048) == SIM.p_floor
    assert math.isclose(SIM.t_iter(64), SIM.t_token_a_s + 64 * SIM.t_token_b_s)
