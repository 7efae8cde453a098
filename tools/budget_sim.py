"""A deterministic discrete-event model of the pipeline, to test the budget law without sleeping.

Model (docs/budget.md has the parameters and where they were measured):
* arrivals: open-loop Poisson under a piecewise-constant rate schedule, seeded; every draw of a
  job (arrival, thinking it wants, backtracks it would make, correctness, admission draw) is made
  up front, so a fixed budget and the controller see the same jobs (common random numbers);
* admission: ingest refuses a job when its admission draw falls under the class's shed share;
* ingest + prefill + handoff: a fixed delay; then a FIFO decode queue (its length is the lag);
* decode: continuous batching of up to `capacity` sequences; an engine step emits one token per
  running sequence in `t_iter = a + b * batch` seconds (the r1-reasoner on this CPU: 70 ms
  + 5 ms a sequence). Between events the batch is constant, so the simulator jumps from event
  to event;
* a job wants `natural` thinking tokens (lognormal) and would make `backtracks` backtracks
  (verification async), each discarding `waste_per_backtrack` tokens; the live resample cap
  stops its backtracks (the rest of its contradictions are kept, unresampled); early exit
  saves `early_exit_saving` of its thinking; a thinking cap (the class's, or its deadline's
  at the live pace) forces its answer; the answer takes `answer_tokens`, then its last
  verdicts `verdict_wait_s`;
* quality (an assumption, stated in docs/budget.md): right with `p_verified` when every
  backtrack it wanted was made, `p_unverified` when none, in between in proportion; each
  halving of the thinking it wanted costs `loss_per_halving`, down to `p_floor`.
The controller sees what the pipeline's budget worker sees: the pace, the running jobs, the
queue, completed jobs; it runs the same `BudgetController` every control period, and running
jobs follow the live limits and their deadlines at each period (decode does at every step).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.budget.config import SloClassConfig
from pipeline.budget.effective import DEADLINE_RESERVE
from pipeline.budget.ladder import ClassLimits, rest_limits
from pipeline.budget.law import BudgetController
from pipeline.budget.signals import Demand, Signals

Schedule = Sequence[tuple[float, float]]  # (from time s, arrivals per s), sorted by time


@dataclass(slots=True, frozen=True)
class SimConfig:
    """The pipeline model. Defaults: the r1-reasoner on two CPU cores (docs/budget.md)."""

    capacity: int = 64  # running sequences (the decode worker's max_decode_seqs)
    t_token_a_s: float = 0.070  # one engine step at batch 1
    t_token_b_s: float = 0.005  # plus this per running sequence
    prefill_s: float = 0.5  # ingest + prefill + handoff, a fixed delay
    answer_tokens: int = 24
    natural_median_tokens: float = 115.0  # thinking a job wants: lognormal
    natural_sigma: float = 0.55
    natural_max_tokens: int = 768
    backtrack_share: float = 0.3  # jobs whose verification would backtrack at all
    backtracks_mean: float = 4.5  # among those: backtracks, geometric
    waste_per_backtrack: int = 130  # tokens a backtrack discards (the step and what followed)
    verdict_wait_s: float = 0.3
    early_exit_saving: float = 0.09  # of the thinking (the r1-reasoner's agree3 probes)
    early_exit_loss: float = 0.005
    p_verified: float = 0.74
    p_unverified: float = 0.49
    loss_per_halving: float = 0.12
    p_floor: float = 0.15
    bucket_s: float = 10.0

    def t_iter(self, batch: int) -> float:
        return self.t_token_a_s + self.t_token_b_s * batch

    def p_correct(self, job: JobSpec, thought: float, backtracks: int, early: bool) -> float:
        p = self.p_verified
        if job.backtracks:
            share = min(1.0, backtracks / job.backtracks)
            p = self.p_unverified + share * (self.p_verified - self.p_unverified)
        wanted = job.natural_tokens * (1 - self.early_exit_saving if early else 1.0)
        if thought < wanted:
            p -= self.loss_per_halving * math.log2(wanted / max(1.0, thought))
        if early:
            p -= self.early_exit_loss
        return max(self.p_floor, p)


@dataclass(slots=True, frozen=True)
class JobSpec:
    arrival_s: float
    natural_tokens: int
    backtracks: int
    draw: float  # uniform in [0, 1): right when draw < p_correct
    admit_draw: float  # uniform in [0, 1): refused when under the class's shed share


@dataclass(slots=True)
class Bucket:
    """One `bucket_s` interval of simulated time; completions are counted when they finish."""

    start_s: float
    arrivals: int = 0
    shed: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    num_correct: int = 0
    num_within_slo: int = 0
    num_correct_within_slo: int = 0
    pressure: float = 0.0  # at the end of the bucket
    thinking_limit: int = 0

    @property
    def completions(self) -> int:
        return len(self.latencies_ms)

    @property
    def p95_ms(self) -> float | None:
        if not self.latencies_ms:
            return None
        values = sorted(self.latencies_ms)
        return values[math.ceil(0.95 * len(values)) - 1]


@dataclass(slots=True)
class SimResult:
    buckets: list[Bucket]
    limits: list[tuple[float, ClassLimits]]  # after each control period
    slo_ms: float
    bucket_s: float

    def summary(self, start_s: float = 0.0, end_s: float = math.inf) -> dict[str, float]:
        """Rates per second and shares over [start_s, end_s): attainment counts refused jobs
        as misses; `attainment_admitted` counts admitted jobs only."""
        chosen = [b for b in self.buckets if start_s <= b.start_s < end_s]
        span = len(chosen) * self.bucket_s or 1.0
        lats = sorted(lat for b in chosen for lat in b.latencies_ms)
        done, arrivals = len(lats), sum(b.arrivals for b in chosen)
        shed, within = sum(b.shed for b in chosen), sum(b.num_within_slo for b in chosen)
        tokens = [t for b in chosen for t in b.tokens]
        return {
            "arrivals_per_s": arrivals / span,
            "shed_per_s": shed / span,
            "completions_per_s": done / span,
            "goodput_per_s": within / span,
            "correct_goodput_per_s": sum(b.num_correct_within_slo for b in chosen) / span,
            "attainment": within / max(1, done + shed),
            "attainment_admitted": within / max(1, done),
            "p95_ms": lats[math.ceil(0.95 * done) - 1] if done else math.inf,
            "accuracy": sum(b.num_correct for b in chosen) / done if done else 0.0,
            "mean_tokens": sum(tokens) / len(tokens) if tokens else 0.0,
            "mean_pressure": sum(b.pressure for b in chosen) / max(1, len(chosen)),
        }


def make_jobs(sim: SimConfig, schedule: Schedule, duration_s: float, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs: list[JobSpec] = []
    bounds = [t for t, _ in schedule[1:]] + [duration_s]
    mu = math.log(sim.natural_median_tokens)
    p_more = 1 - 1 / sim.backtracks_mean  # geometric on 1, 2, ... with this mean
    for (start, rate), end in zip(schedule, bounds, strict=True):
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= min(end, duration_s):
                break
            natural = round(rng.lognormvariate(mu, sim.natural_sigma))
            natural = min(sim.natural_max_tokens, max(8, natural))
            backtracks = 0
            if rng.random() < sim.backtrack_share:
                backtracks = 1
                while rng.random() < p_more and backtracks < 32:
                    backtracks += 1
            jobs.append(JobSpec(t, natural, backtracks, rng.random(), rng.random()))
    return jobs


@dataclass(slots=True)
class _Running:
    spec: JobSpec
    start_it: float  # engine step counter when it joined the batch
    stamped: ClassLimits  # the class's limits when it was admitted
    finish_it: float = 0.0
    think: int = 0  # thinking tokens it will spend (discarded ones included) under its limits
    backtracks: int = 0
    early: bool = False
    cut: bool = False  # its thinking was capped (forced answer)


def _plan(sim: SimConfig, r: _Running, live: ClassLimits, deadline_tokens: float | None) -> None:
    """Its thinking under the limits in force: backtracks within the resample cap, early exit,
    then the tightest of the class cap and what still fits before its deadline."""
    caps = [c for c in (r.stamped.resample_cap, live.resample_cap) if c is not None]
    r.backtracks = min([r.spec.backtracks, *caps])
    r.early = r.stamped.early_exit or live.early_exit
    wanted = r.spec.natural_tokens * (1 - sim.early_exit_saving if r.early else 1.0)
    total = round(wanted) + r.backtracks * sim.waste_per_backtrack
    cap = min(r.stamped.max_thinking_tokens, live.max_thinking_tokens)
    if deadline_tokens is not None:
        cap = min(cap, max(0, math.floor(deadline_tokens)))
    r.cut = total > cap
    r.think = min(total, cap)
    r.finish_it = r.start_it + r.think + sim.answer_tokens


def simulate(
    sim: SimConfig,
    cfg: SloClassConfig,
    schedule: Schedule,
    duration_s: float,
    seed: int = 0,
    controlled: bool = True,
) -> SimResult:
    """Run one scenario; `controlled=False` is the fixed budget (the class's rest limits, no
    deadlines, no shedding): the pipeline without a budget worker."""
    jobs = make_jobs(sim, schedule, duration_s, seed)
    ctl = BudgetController(cfg)
    live = rest_limits(cfg) if controlled else _fixed(cfg)
    slo_ms, slo_s = cfg.slo_p95_ms, cfg.slo_p95_ms / 1000.0
    buckets = [Bucket(i * sim.bucket_s) for i in range(math.ceil(duration_s / sim.bucket_s))]
    history: list[tuple[float, ClassLimits]] = []

    now, it = 0.0, 0.0  # simulated seconds; engine steps done (fractional between events)
    queue: deque[tuple[int, ClassLimits, float]] = deque()  # (job, stamped, admitted at s)
    running: dict[int, _Running] = {}
    heap: list[tuple[float, int]] = []
    started: deque[tuple[float, float]] = deque()  # (decode start s, queued s), lately
    next_job, next_tick = 0, cfg.control_period_s
    arrived: deque[float] = deque()  # arrival times, the last ARRIVALS_WINDOW_S

    def bucket_at(t: float) -> Bucket:
        return buckets[min(int(t // sim.bucket_s), len(buckets) - 1)]

    def replan() -> None:
        pace = 1.0 / sim.t_iter(len(running))
        for r in running.values():
            used = it - r.start_it
            if used >= r.think:
                continue  # answering: the answer goes on
            dl = None
            if controlled:
                reserve = sim.answer_tokens / pace + sim.verdict_wait_s + DEADLINE_RESERVE * slo_s
                dl = used + max(0.0, r.spec.arrival_s + slo_s - now - reserve) * pace
            _plan(sim, r, live, dl)
            r.think = max(r.think, math.ceil(used))  # never below what it has thought
            r.finish_it = r.start_it + r.think + sim.answer_tokens
        heap[:] = [(r.finish_it, i) for i, r in running.items()]
        heapq.heapify(heap)

    for spec in jobs:
        bucket_at(spec.arrival_s).arrivals += 1
    while True:
        t_admit = jobs[next_job].arrival_s + sim.prefill_s if next_job < len(jobs) else math.inf
        t_done = now + (heap[0][0] - it) * sim.t_iter(len(running)) if heap else math.inf
        t_next = min(t_admit, t_done, next_tick)
        if t_next >= duration_s:
            break
        if running:
            it += (t_next - now) / sim.t_iter(len(running))
        now = t_next
        if t_next == t_done:
            it = max(it, heap[0][0])
            while heap and heap[0][0] <= it:
                i = heapq.heappop(heap)[1]
                r = running.pop(i)
                lat_ms = 1000.0 * (now + sim.verdict_wait_s - r.spec.arrival_s)
                b = bucket_at(now)
                waste = r.backtracks * sim.waste_per_backtrack
                thought = r.think * (1 - waste / max(1, waste + r.spec.natural_tokens))
                right = r.spec.draw < sim.p_correct(r.spec, thought, r.backtracks, r.early)
                b.latencies_ms.append(lat_ms)
                b.tokens.append(r.think + sim.answer_tokens)
                b.num_correct += right
                b.num_within_slo += lat_ms <= slo_ms
                b.num_correct_within_slo += right and lat_ms <= slo_ms
                # What the budget worker reads off the Result: the thinking kept (cut short,
                # when it was) and the contradictions verification found.
                natural = r.think - r.backtracks * sim.waste_per_backtrack if r.cut else None
                kept = max(1.0, natural) if natural is not None else r.spec.natural_tokens
                ctl.observe(now, lat_ms, Demand(kept, r.spec.backtracks, cut=r.cut))
        elif t_next == t_admit:
            spec = jobs[next_job]
            arrived.append(now)
            if spec.admit_draw < live.shed:
                bucket_at(spec.arrival_s).shed += 1
            else:
                queue.append((next_job, live, now))
            next_job += 1
        else:
            next_tick += cfg.control_period_s
            if controlled:
                while arrived and arrived[0] < now - ARRIVALS_WINDOW_S:
                    arrived.popleft()
                rate = len(arrived) / min(ARRIVALS_WINDOW_S, max(now, cfg.control_period_s))
                sig = _signals(sim, cfg, running, it, now, queue, started, rate)
                live = ctl.update(now, sig)
                replan()
            history.append((now, live))
            bucket_at(now).pressure = live.pressure
            bucket_at(now).thinking_limit = live.max_thinking_tokens
        while queue and len(running) < sim.capacity:
            i, stamped, queued_at = queue.popleft()
            started.append((now, now - queued_at + sim.prefill_s))
            r = _Running(jobs[i], it, stamped)
            running[i] = r
            _plan(sim, r, live, None)
            if controlled:
                replan()
            else:
                heapq.heappush(heap, (r.finish_it, i))
    return SimResult(buckets, history, slo_ms, sim.bucket_s)


def _fixed(cfg: SloClassConfig) -> ClassLimits:
    """The pipeline's defaults with no controller: no deadlines (slo_ms 0), nothing capped."""
    rest = rest_limits(cfg)
    return ClassLimits(rest.max_steps, rest.max_thinking_tokens, rest.probe_effort)


ARRIVALS_WINDOW_S = 30.0  # the budget worker's window for the arrival rate


def _signals(sim, cfg, running, it, now, queue, started, rate) -> Signals:
    """What the budget worker would read now: the pace, the running jobs, the queue."""
    while started and started[0][0] < now - 10.0:
        started.popleft()
    pace = 1.0 / sim.t_iter(max(1, len(running)))
    measured = max((q for _, q in started), default=0.0)
    waiting = (
        len(queue)
        * (sim.answer_tokens + sim.natural_median_tokens)
        / max(1e-9, pace * sim.capacity)
    )
    jobs = tuple(
        (now - r.spec.arrival_s, int(it - r.start_it), it - r.start_it < r.think)
        for r in running.values()
    )
    return Signals(
        slo_s=cfg.slo_p95_ms / 1000.0,
        pace_tok_s=pace,
        running_now=len(running),
        occupancy=len(running) / sim.capacity,
        step_a_s=sim.t_token_a_s,
        step_b_s=sim.t_token_b_s,
        arrivals_per_s=rate,
        queue_s=max(measured, waiting),
        overhead_s=sim.verdict_wait_s,
        waste_per_backtrack=sim.waste_per_backtrack,
        running=jobs,
    )


def run_fixed(
    sim: SimConfig, cfg: SloClassConfig, schedule: Schedule, duration_s: float, seed: int = 0
) -> SimResult:
    """The same scenario under the fixed budget (the class ceiling, nothing else)."""
    return simulate(sim, cfg, schedule, duration_s, seed, controlled=False)
