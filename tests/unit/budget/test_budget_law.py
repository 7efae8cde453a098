"""The budget law's pure parts: the actuator ladder, a job's effective budget, the signals'
prediction, and the law's step (no Redis, no clock)."""

from __future__ import annotations

import math

import msgspec
import pytest

from pipeline import schema
from pipeline.budget import (
    BudgetConfig,
    BudgetController,
    ClassLimits,
    Deadline,
    LawState,
    Pace,
    Signals,
    SloClassConfig,
    control_step,
    job_budget,
    limits_at,
    predicted_ratio,
    rest_limits,
)
from pipeline.budget.effective import DEADLINE_RESERVE, deadline_of
from pipeline.budget.signals import RUNNING_FLOOR, UNSETTLED, Demand, Prediction

CFG = SloClassConfig(slo_p95_ms=20_000.0)

# -- the ladder ---------------------------------------------------------------------------------


def test_at_rest_every_job_runs_as_it_asked():
    rest = rest_limits(CFG)
    assert rest == limits_at(CFG, 0.0) == limits_at(CFG, -3.0)
    assert (rest.resample_cap, rest.early_exit, rest.shed) == (None, False, 0.0)
    assert rest.max_thinking_tokens == CFG.max_thinking_tokens and rest.rung == "none"


def test_rungs_move_in_order_cheapest_first():
    levels = [k / 20 for k in range(0, 101)]
    lim = [limits_at(CFG, u) for u in levels]
    caps = [-1 if x.resample_cap is None else x.resample_cap for x in lim]
    # Backtrack cap: none at 0, then 8 tightening to 1 within the first rung, 0 (resampling
    # off) from 1 on; it never loosens as the pressure rises.
    assert caps[0] == -1 and limits_at(CFG, 1e-6).resample_cap == CFG.backtrack_cap
    assert 1 < caps[1] <= CFG.backtrack_cap and caps[19] == 1 and caps[20] == 0
    assert all(a >= b for a, b in zip(caps[1:], caps[2:], strict=False))
    for u, x in zip(levels, lim, strict=True):
        assert x.early_exit == (u >= 2)  # the third rung
        assert (x.max_thinking_tokens < CFG.max_thinking_tokens) == (u > 3)  # the fourth
        assert (x.shed > 0) == (u > 4)  # the fifth: admission
    tokens = [x.max_thinking_tokens for x in lim]
    assert tokens == sorted(tokens, reverse=True) and tokens[-1] == CFG.min_thinking_tokens
    assert lim[-1].shed == CFG.max_shed and lim[-1].rung == "admission"
    probes = [x.probe_effort for x in lim if x.early_exit]
    assert probes[0] == CFG.max_probe_effort and probes[-1] == CFG.min_probe_effort


def test_steps_follow_the_tokens_within_their_bounds():
    x = limits_at(CFG, 3.5)
    assert x.max_steps == min(max(math.ceil(x.max_thinking_tokens / 8), 4), 64)
    assert limits_at(CFG, 4.0).max_steps == 8  # 64 tokens


def test_a_refused_job_is_told_when_to_retry_only_while_shedding():
    assert limits_at(CFG, 3.9, retry_after_s=7.2).retry_after_s == 0.0
    assert limits_at(CFG, 4.5, retry_after_s=7.2).retry_after_s == 8.0  # whole seconds, up


def test_limits_round_trip_as_the_wire_budget():
    b = limits_at(CFG, 4.5).to_budget()
    assert isinstance(b, schema.Budget) and b.shed > 0 and b.resample_cap == 0
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(b), type=schema.Budget) == b


def test_config_scales_and_validates():
    cfg = BudgetConfig.scaled(slo_ms=30_000, max_thinking_tokens=384, min_thinking_tokens=96)
    assert cfg.interactive.slo_p95_ms == 30_000
    assert (cfg.interactive.min_thinking_tokens, cfg.interactive.max_thinking_tokens) == (96, 384)
    assert cfg.batch.slo_p95_ms > cfg.interactive.slo_p95_ms
    with pytest.raises(ValueError):
        BudgetConfig.scaled(slo_ms=0)
    with pytest.raises(ValueError):
        SloClassConfig(band_lo=0.9, band_hi=0.8)
    with pytest.raises(ValueError):
        SloClassConfig(max_shed=1.0)  # some jobs always run, to keep measuring the pace


# -- a job's effective budget -------------------------------------------------------------------

STAMPED = schema.Budget(max_steps=64, max_thinking_tokens=512, probe_effort=4)


def test_the_tightest_cap_wins_and_says_who_set_it():
    p = schema.JobParams()
    assert job_budget(p, STAMPED).binding == "default"  # no controller: the defaults
    own = schema.JobParams(max_thinking_tokens=200, max_steps=10)
    b = job_budget(own, STAMPED)
    assert (b.max_thinking_tokens, b.max_steps, b.binding) == (200, 10, "job")
    live = limits_at(CFG, 3.5).to_budget()
    live = msgspec.structs.replace(live, version=3)
    b = job_budget(own, STAMPED, live)
    assert b.max_thinking_tokens == min(200, live.max_thinking_tokens) and b.binding == "class"
    # The earlier name of the job's cap still counts (older producers), as does max_tokens.
    assert job_budget(schema.JobParams(thinking_budget=90), STAMPED).max_thinking_tokens == 90
    assert job_budget(schema.JobParams(max_tokens=70), STAMPED).max_thinking_tokens == 70


def test_live_limits_only_tighten_the_stamped_ones():
    stamped = schema.Budget(max_steps=8, max_thinking_tokens=100, probe_effort=2, version=1)
    looser = schema.Budget(max_steps=64, max_thinking_tokens=512, probe_effort=8, version=2)
    b = job_budget(schema.JobParams(), stamped, looser)
    assert (b.max_thinking_tokens, b.max_steps, b.probe_every) == (100, 8, 2)


def test_resample_cap_and_early_exit_combine():
    capped = schema.Budget(max_steps=64, max_thinking_tokens=512, resample_cap=2, version=1)
    off = schema.Budget(max_steps=64, max_thinking_tokens=512, resample_cap=0, version=2)
    assert job_budget(schema.JobParams(), STAMPED).resample_cap is None
    assert job_budget(schema.JobParams(), STAMPED, capped).resample_cap == 2
    assert job_budget(schema.JobParams(), capped, off).resample_cap == 0
    probing = schema.Budget(max_steps=64, max_thinking_tokens=512, early_exit=True, version=2)
    assert job_budget(schema.JobParams(), STAMPED, probing).early_exit
    assert job_budget(schema.JobParams(early_exit=True), STAMPED).early_exit


def task(created_ms: int, e2e_ms: int | None = None, slo_ms: float = 0.0) -> schema.PrefillTask:
    return schema.PrefillTask(
        id="j", model="m", token_ids=[1], admitted_ms=created_ms + 50, created_ms=created_ms,
        budget=schema.Budget(max_steps=64, max_thinking_tokens=512, slo_ms=slo_ms),
        slo=schema.SLO(e2e_ms=e2e_ms),
    )  # fmt: skip


def test_deadlines_are_enforced_only_while_a_controller_publishes():
    assert deadline_of(task(1000), None) is None
    live = schema.Budget(max_steps=64, max_thinking_tokens=512, slo_ms=20_000, version=1)
    assert deadline_of(task(1000), live) == Deadline(21_000, 20_000.0)
    assert deadline_of(task(1000, e2e_ms=5_000), live) == Deadline(6_000, 5_000.0)  # its own
    assert deadline_of(task(1000, slo_ms=8_000), None) == Deadline(9_000, 8_000.0)  # stamped


def test_a_deadline_leaves_the_thinking_that_fits_at_the_live_pace():
    d = Deadline(at_ms=20_000, slo_ms=20_000)
    pace = Pace(tokens_per_s=10.0, answer_tokens=24, verdict_wait_s=0.6)
    # 10 s left, less the answer (2.4 s), its verdicts (0.6 s), the margin (0.8 s) = 6.2 s.
    reserve = 2.4 + 0.6 + DEADLINE_RESERVE * 20
    assert d.reserve_s(pace) == pytest.approx(reserve)
    assert d.allowance(10_000, pace, used=40) == 40 + int((10 - reserve) * 10)
    assert d.allowance(19_000, pace, used=40) == 40  # nothing fits any more: answer now
    b = job_budget(schema.JobParams(), STAMPED, None, deadline=d, now_ms=10_000, pace=pace,
                   used=40)  # fmt: skip
    assert (b.max_thinking_tokens, b.binding) == (d.allowance(10_000, pace, 40), "deadline")
    early = job_budget(schema.JobParams(), STAMPED, None, deadline=d, now_ms=0, pace=pace)
    assert early.max_thinking_tokens == 162 and early.binding == "deadline"
    far = Deadline(at_ms=200_000, slo_ms=200_000)
    assert job_budget(schema.JobParams(), STAMPED, None, deadline=far, now_ms=0,
                      pace=pace).binding == "default"  # fmt: skip


# -- the signals' prediction ---------------------------------------------------------------------


def sig(**kw) -> Signals:
    base = dict(slo_s=20.0, pace_tok_s=10.0, answer_tokens=24)
    return Signals(**{**base, **kw})


def test_a_new_job_is_predicted_from_the_work_jobs_want_at_the_pace():
    demand = tuple(Demand(100.0, 0) for _ in range(9)) + (Demand(300.0, 0),)
    s = sig(demand=demand, queue_s=1.0, overhead_s=0.5)
    rest = rest_limits(CFG)
    # p90 of the work: 100 tokens (9 of 10), + 24 answer at 10 tok/s, + queue and overhead.
    assert s.new_job_s(rest) == pytest.approx(1.0 + 12.4 + 0.5)
    p = predicted_ratio(s, rest)
    assert p.ratio == pytest.approx(13.9 / 20) and p.source == "new_job"
    assert predicted_ratio(sig(), rest).ratio == 0.0  # idle: under no pressure at all
    busy_but_unknown = sig(running_now=3)  # another class's jobs run, nothing known of ours
    assert predicted_ratio(busy_but_unknown, rest).ratio is None


def test_work_is_predicted_at_each_rung():
    s = sig(demand=(Demand(200.0, 3),), waste_per_backtrack=50.0)
    assert s.works(rest_limits(CFG)) == [350.0]  # all three backtracks resampled
    assert s.works(limits_at(CFG, 0.99)) == [250.0]  # cap 1
    assert s.works(limits_at(CFG, 1.5)) == [200.0]  # resampling off
    assert s.works(limits_at(CFG, 2.5)) == [pytest.approx(180.0)]  # early exit saves a tenth
    assert s.works(limits_at(CFG, 4.0)) == [CFG.min_thinking_tokens]  # the cap binds


def test_a_cut_job_wanted_what_longer_uncut_jobs_wanted():
    uncut = [Demand(n, 0) for n in (40.0, 80.0, 120.0, 200.0)]
    s = sig(demand=(*uncut, Demand(60.0, 0, cut=True), Demand(300.0, 0, cut=True)))
    works = s.works(rest_limits(CFG))
    assert works[4] == 120.0  # the median of 80, 120, 200: the uncut jobs longer than 60
    assert works[5] == 512.0  # none longer than 300: twice it, within the ceiling


def test_the_pace_settles_where_the_arrivals_load_the_batch():
    # t(B) = 0.07 + 0.005 B; 0.5 jobs/s of 100 + 24 tokens: B = 0.5*124*0.07/(1-0.31) = 6.29.
    s = sig(demand=(Demand(100.0, 0),), step_a_s=0.07, step_b_s=0.005, arrivals_per_s=0.5)
    settled = 0.07 + 0.005 * (0.5 * 124 * 0.07 / (1 - 0.5 * 124 * 0.005))
    assert s.step_s(rest_limits(CFG)) == pytest.approx(max(0.1, settled))
    over = sig(demand=(Demand(400.0, 0),), step_a_s=0.07, step_b_s=0.005, arrivals_per_s=1.0)
    assert over.step_s(rest_limits(CFG)) == math.inf  # 2.1 tok/s of step cost: never settles
    assert predicted_ratio(over, rest_limits(CFG)).ratio == UNSETTLED
    # Shedding half the arrivals brings it back.
    assert over.step_s(limits_at(CFG, 4.0 + 0.5 / CFG.max_shed)) < math.inf


def test_running_jobs_count_through_a_padded_90th_percentile():
    late = (30.0, 50, True)  # 30 s old already: over the SLO whatever it does
    few = sig(demand=(Demand(60.0, 0),), running=(late, (1.0, 5, True), (2.0, 9, True)))
    assert predicted_ratio(few, rest_limits(CFG)).running < 1  # one in three: not the class
    many = tuple([late] * 2 + [(1.0, 5, True)] * (RUNNING_FLOOR - 2))
    got = predicted_ratio(sig(demand=(Demand(60.0, 0),), running=many), rest_limits(CFG))
    assert got.running > 1.5 and got.source == "running"


def test_completed_jobs_say_more_the_more_there_are():
    one = predicted_ratio(sig(done_p90_s=30.0, done_count=1, full_say=5), rest_limits(CFG))
    five = predicted_ratio(sig(done_p90_s=30.0, done_count=5, full_say=5), rest_limits(CFG))
    assert one.done == pytest.approx(0.3) and five.done == pytest.approx(1.5)


# -- the law's step -------------------------------------------------------------------------------


def const(ratio: float | None):
    return lambda u: Prediction(ratio, ratio, None, None)


def test_the_pressure_rises_with_the_predicted_latency_and_is_capped():
    s = control_step(CFG, LawState(), const(1.5), 1.0)
    assert s.pressure == pytest.approx(CFG.rise_per_s * math.log(1.5 / CFG.band_hi))
    assert s.action == "rise"
    fast = control_step(CFG, LawState(), const(50.0), 1.0)
    assert fast.pressure == CFG.max_rise_per_s  # a rung a second at the most
    top = LawState(pressure=4.9)
    assert control_step(CFG, top, const(50.0), 1.0).pressure == 5.0  # bounded


def test_nothing_moves_inside_the_band_or_without_a_reading():
    assert control_step(CFG, LawState(2.0), const(0.85), 1.0).pressure == 2.0
    held = control_step(CFG, LawState(2.0), const(None), 1.0)
    assert (held.pressure, held.action) == (2.0, "hold")


def test_it_falls_only_after_a_calm_and_only_as_far_as_the_lookahead_allows():
    s = LawState(3.5)
    for _ in range(int(CFG.calm_s) - 1):
        s = control_step(CFG, s, const(0.3), 1.0)
    assert s.pressure == 3.5 and s.action == "calm"
    s = control_step(CFG, s, const(0.3), 1.0)
    s = control_step(CFG, s, const(0.3), 1.0)
    assert s.pressure < 3.5 and s.action == "fall"

    def cliff(u: float) -> Prediction:  # fine here, over the band one step down
        r = 0.3 if u >= 3.5 else 1.2
        return Prediction(r, r, None, None)

    kept = LawState(3.5, calm_s=100.0)
    after = control_step(CFG, kept, cliff, 1.0)
    assert (after.pressure, after.action) == (3.5, "kept")


def test_a_floor_holds_the_pressure_up():
    s = control_step(CFG, LawState(0.0), const(0.1), 1.0, floor=2.5)
    assert s.pressure == 2.5


def test_the_controller_predicts_from_its_own_completions():
    ctl = BudgetController(CFG)
    for k in range(10):
        ctl.observe(float(k), 12_000.0, Demand(400.0, 0))
    limits = ctl.update(10.0, sig(pace_tok_s=10.0))
    # 400 + 24 tokens at 10 tok/s = 42 s against 20: the ratio is 2.1, the pressure rises.
    assert ctl.prediction.new_job == pytest.approx(42.4 / 20)
    assert ctl.state.action == "rise" and limits.pressure > 0
    assert isinstance(limits, ClassLimits) and limits.slo_ms == 20_000
