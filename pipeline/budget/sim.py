"""A deterministic discrete-event model of the pipeline, to test the budget law without sleeping.

Model (docs/budget.md has the parameters and why):
* arrivals: open-loop Poisson, piecewise-constant rate schedule, seeded RNG;
* ingest stamps the budget in force; prefill is a fixed delay; then a FIFO decode queue
  (its length is the consumer lag the law may see);
* decode: continuous batching of up to `capacity` sequences; every engine iteration emits one
  token per running sequence and takes `t_iter = a + b * batch` seconds. Between events the
  batch is constant, so the simulator jumps from event to event (no per-token loop);
* a job thinks min(natural, budget) tokens, then answers in `answer_tokens`. With
  `follow_live` the running jobs re-read the budget at every control period (decode re-reads
  at step boundaries): a cut forces the answer now (never below what was already thought);
* quality: a job that got all the thinking it wanted is right with `p_full`; each halving
  of its natural length costs `loss_per_halving`, down to `p_floor`.
The same jobs (arrival times, natural lengths, correctness draws) are replayed for every
budget policy of one seed, so a fixed budget and the controller are compared job for job.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.budget import BudgetController, SloClassConfig

Schedule = Sequence[tuple[float, float]]  # (from time s, arrivals per s), sorted by time


@dataclass(slots=True, frozen=True)
class SimConfig:
    """The pipeline model; defaults sketch a small GPU decode pool at 2 s interactive SLO."""

    capacity: int = 64  # running sequences (the decode worker's max_decode_seqs)
    t_token_a_s: float = 0.0015  # one iteration at batch 1 (memory-bound weights read)
    t_token_b_s: float = 0.00004  # plus this per running sequence (KV reads, sampling)
    prefill_s: float = 0.03  # ingest + prefill + handoff, a fixed delay
    answer_tokens: int = 16
    natural_median_tokens: float = 192.0  # thinking a job wants: lognormal
    natural_sigma: float = 0.7
    natural_max_tokens: int = 2048
    p_full: float = 0.90  # accuracy with all the thinking it wanted
    loss_per_halving: float = 0.10  # points lost per halving of the thinking it wanted
    p_floor: float = 0.30
    follow_live: bool = True
    bucket_s: float = 10.0

    def t_iter(self, batch: int) -> float:
        return self.t_token_a_s + self.t_token_b_s * batch

    def p_correct(self, granted: float, natural: float) -> float:
        if granted >= natural:
            return self.p_full
        return max(self.p_floor, self.p_full - self.loss_per_halving * math.log2(natural / granted))


@dataclass(slots=True, frozen=True)
class JobSpec:
    arrival_s: float
    natural_tokens: int
    draw: float  # uniform in [0, 1): right when draw < p_correct


@dataclass(slots=True)
class Bucket:
    """One `bucket_s` interval of simulated time; completions are counted when they finish."""

    start_s: float
    arrivals: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    num_correct: int = 0
    num_within_slo: int = 0
    budget_tokens: int = 0  # in force at the end of the bucket

    @property
    def completions(self) -> int:
        return len(self.latencies_ms)

    @property
    def p95_ms(self) -> float | None:
        if not self.latencies_ms:
            return None
        values = sorted(self.latencies_ms)
        return values[math.ceil(0.95 * len(values)) - 1]

    @property
    def accuracy(self) -> float | None:
        return self.num_correct / self.completions if self.completions else None


@dataclass(slots=True)
class SimResult:
    buckets: list[Bucket]
    budgets: list[tuple[float, int]]  # (time s, max_thinking_tokens) after each control period
    slo_ms: float
    bucket_s: float

    def summary(self, start_s: float = 0.0, end_s: float = math.inf) -> dict[str, float]:
        """Goodput (jobs/s within SLO), p95, accuracy and mean budget over [start_s, end_s)."""
        chosen = [b for b in self.buckets if start_s <= b.start_s and b.start_s < end_s]
        lats = sorted(lat for b in chosen for lat in b.latencies_ms)
        span = len(chosen) * self.bucket_s
        done = len(lats)
        budgets = [tok for t, tok in self.budgets if start_s <= t < end_s]
        return {
            "arrivals_per_s": sum(b.arrivals for b in chosen) / span if span else 0.0,
            "completions_per_s": done / span if span else 0.0,
            "goodput_per_s": sum(b.num_within_slo for b in chosen) / span if span else 0.0,
            "p95_ms": lats[math.ceil(0.95 * done) - 1] if done else math.inf,
            "accuracy": sum(b.num_correct for b in chosen) / done if done else 0.0,
            "mean_budget": sum(budgets) / len(budgets) if budgets else 0.0,
        }


def make_jobs(sim: SimConfig, schedule: Schedule, duration_s: float, seed: int) -> list[JobSpec]:
    """Poisson arrivals under a piecewise-constant rate (memoryless: restart at each change)."""
    rng = random.Random(seed)
    jobs: list[JobSpec] = []
    bounds = [t for t, _ in schedule[1:]] + [duration_s]
    mu = math.log(sim.natural_median_tokens)
    for (start, rate), end in zip(schedule, bounds, strict=True):
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= min(end, duration_s):
                break
            natural = min(
                sim.natural_max_tokens, max(1, round(rng.lognormvariate(mu, sim.natural_sigma)))
            )
            jobs.append(JobSpec(t, natural, rng.random()))
    return jobs


@dataclass(slots=True)
class _Running:
    spec: JobSpec
    start_it: float  # iteration counter when it joined the batch
    think: int  # thinking tokens it will do under the budget in force
    finish_it: float


def simulate(
    sim: SimConfig,
    cfg: SloClassConfig,
    schedule: Schedule,
    duration_s: float,
    seed: int = 0,
    fixed_tokens: int | None = None,
    use_lag: bool = True,
) -> SimResult:
    """Run one scenario; `fixed_tokens` replaces the controller by a constant budget."""
    jobs = make_jobs(sim, schedule, duration_s, seed)
    controller = None if fixed_tokens is not None else BudgetController(cfg)
    budget = fixed_tokens if fixed_tokens is not None else controller.limits.max_thinking_tokens
    slo = cfg.slo_p95_ms
    buckets = [Bucket(i * sim.bucket_s) for i in range(math.ceil(duration_s / sim.bucket_s))]
    budgets: list[tuple[float, int]] = []

    now, it = 0.0, 0.0  # simulated seconds; engine iterations done (fractional between events)
    queue: deque[tuple[JobSpec, int]] = deque()  # (job, budget stamped at admission), FIFO
    running: dict[int, _Running] = {}
    heap: list[tuple[float, int]] = []  # (finish_it, job index): next to leave the batch
    next_job, next_tick = 0, cfg.control_period_s
    for spec in jobs:
        buckets[int(spec.arrival_s // sim.bucket_s)].arrivals += 1

    while True:
        t_admit = jobs[next_job].arrival_s + sim.prefill_s if next_job < len(jobs) else math.inf
        t_done = now + (heap[0][0] - it) * sim.t_iter(len(running)) if heap else math.inf
        t_next = min(t_admit, t_done, next_tick)
        if t_next >= duration_s:
            break
        if running:
            it += (t_next - now) / sim.t_iter(len(running))
        now = t_next
        bucket = buckets[min(int(now // sim.bucket_s), len(buckets) - 1)]
        if t_next == t_done:
            it = max(it, heap[0][0])  # float safety: the sequence due now does leave
            while heap and heap[0][0] <= it:
                r = running.pop(heapq.heappop(heap)[1])
                latency_ms = 1000.0 * (now - r.spec.arrival_s)
                bucket.latencies_ms.append(latency_ms)
                bucket.num_within_slo += latency_ms <= slo
                bucket.num_correct += r.spec.draw < sim.p_correct(r.think, r.spec.natural_tokens)
                if controller is not None:
                    controller.observe(now, latency_ms)
        elif t_next == t_admit:
            queue.append((next_job, budget))
            next_job += 1
        else:
            next_tick += cfg.control_period_s
            if controller is not None:
                new = controller.update(now, len(queue) if use_lag else None).max_thinking_tokens
                if new != budget and sim.follow_live:
                    # Decode re-reads the budget at step boundaries: re-plan running jobs,
                    # never below what they have already thought.
                    for r in running.values():
                        thought = it - r.start_it
                        if thought < r.think:  # still thinking; an answering job goes on
                            r.think = min(r.spec.natural_tokens, max(new, math.ceil(thought)))
                            r.finish_it = r.start_it + r.think + sim.answer_tokens
                    heap[:] = [(r.finish_it, i) for i, r in running.items()]
                    heapq.heapify(heap)
                budget = new
            budgets.append((now, budget))
            bucket.budget_tokens = budget
        while queue and len(running) < sim.capacity:
            i, stamped = queue.popleft()
            # A queued job runs under the live budget when decode follows it, else its stamp.
            spec = jobs[i]
            think = min(spec.natural_tokens, budget if sim.follow_live else stamped)
            running[i] = _Running(spec, it, think, it + think + sim.answer_tokens)
            heapq.heappush(heap, (running[i].finish_it, i))
    return SimResult(buckets, budgets, slo, sim.bucket_s)


def run_fixed(
    sim: SimConfig,
    cfg: SloClassConfig,
    schedule: Schedule,
    duration_s: float,
    seed: int = 0,
    tokens: int | None = None,
) -> SimResult:
    """The same scenario under a constant budget (default: the class maximum)."""
    fixed = tokens if tokens is not None else cfg.max_thinking_tokens
    return simulate(sim, cfg, schedule, duration_s, seed, fixed_tokens=fixed)
