"""What the budget law reads: leading signals that exist at the rates a slow model serves.

A model that takes 10-60 s a job completes a handful of jobs a minute, so a law that waits for
completed jobs' p95 acts minutes late (bench/RESULTS.md: at 0.1-0.6 jobs/s the old law's
window never held its 20 samples). Here every period sees, per SLO class:
* the live pace: tokens/s a running sequence gets now (decode measures it every engine step);
  with the batch occupancy it falls as load rises, before any job finishes late;
* each running job's predicted finish: its age plus what it still has to think at the class
  limits, at that pace;
* the queueing time: how long admitted jobs wait before decode starts them (measured on the
  jobs decode started recently, and the consumer lag over the completion rate);
* a job admitted now: queue + the work jobs of this class want (p90, at the class limits) at
  the pace, plus what follows the thinking;
* completed jobs' latencies, in a window counted in jobs and in seconds (whichever holds
  fewer), weighted by how many there are.
`predicted_ratio` folds them into one number, the predicted latency over the SLO, which the
law holds inside its band.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from pipeline.budget.ladder import ClassLimits

# -- what decode reports ----------------------------------------------------------------------


class RunningJob(msgspec.Struct, array_like=True, frozen=True):
    """One running job in a decode worker's report."""

    slo_class: str
    age_ms: float  # since the job was created (its latency so far)
    used: int  # tokens spent: kept, discarded, probes
    thinking: bool  # still thinking (False: answering, or waiting for its last verdicts)


class DecodeReport(msgspec.Struct, kw_only=True, frozen=True):
    """A decode worker's load, about once a second, under an expiring Redis key."""

    worker: str
    ts_ms: int
    pace_tok_s: float | None = None  # tokens/s one running sequence gets now
    # Its engine step's time against the batch, t(B) = a + b * B (decode/pace.py fits it)
    step_a_s: float | None = None
    step_b_s: float | None = None
    running: int = 0  # jobs in its engine
    capacity: int = 1  # its max_decode_seqs
    waiting: int = 0  # handoffs it holds that are not running yet
    queue_ms: list[float] = []  # ingest -> decode start of the jobs started lately
    verdict_wait_ms: float | None = None  # p90: a step's check to its verdict, lately
    jobs: list[RunningJob] = []
    deadline_cuts: dict[str, int] = {}  # per class, since the worker started


def merge_reports(reports: list[DecodeReport]) -> DecodeReport:
    """Several decode workers as one: paces weighted by their running sequences."""
    if len(reports) == 1:
        return reports[0]
    paced = [(r.pace_tok_s, max(1, r.running)) for r in reports if r.pace_tok_s]
    weight = sum(w for _, w in paced)
    cuts: dict[str, int] = {}
    for r in reports:
        for k, v in r.deadline_cuts.items():
            cuts[k] = cuts.get(k, 0) + v
    waits = [r.verdict_wait_ms for r in reports if r.verdict_wait_ms is not None]
    lines = [(r.step_a_s, r.step_b_s) for r in reports if r.step_a_s and r.step_b_s]
    return DecodeReport(
        worker="*",
        ts_ms=max((r.ts_ms for r in reports), default=0),
        pace_tok_s=sum(p * w for p, w in paced) / weight if weight else None,
        # Work spread over n workers: each sees 1/n of the batch (the same engine on each).
        step_a_s=max(a for a, _ in lines) if lines else None,
        step_b_s=max(b for _, b in lines) / len(lines) if lines else None,
        running=sum(r.running for r in reports),
        capacity=sum(r.capacity for r in reports),
        waiting=sum(r.waiting for r in reports),
        queue_ms=[q for r in reports for q in r.queue_ms],
        verdict_wait_ms=max(waits) if waits else None,
        jobs=[j for r in reports for j in r.jobs],
        deadline_cuts=cuts,
    )


# -- completed jobs -----------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class Demand(NamedTuple):
    """The work a completed job wanted, in a form that predicts it at any level of pressure:
    its own thinking (without early exit) and the contradicted steps verification found in it
    (each a backtrack where resampling is allowed). A job whose thinking was `cut` (a budget
    or a deadline forced its answer) wanted more than `natural`: how much more is read off the
    jobs that were not cut (signals.Signals.works)."""

    natural: float
    contradictions: int
    cut: bool = False


@dataclass(slots=True)
class Completed:
    """Completed jobs of one class. Latencies: the last `max_jobs` within `window_s`, whichever
    holds fewer (they go stale with the load). Demand: the last `max_jobs` whatever their age
    (what jobs want is the job mix's, not the load's, and an idle stack must still predict)."""

    max_jobs: int
    window_s: float
    items: deque[tuple[float, float]] = field(default_factory=deque)  # (t, latency ms)
    wanted: deque[Demand] = field(default_factory=deque)

    def add(self, now_s: float, latency_ms: float, demand: Demand) -> None:
        self.items.append((now_s, latency_ms))
        self.wanted.append(demand)
        while len(self.items) > self.max_jobs:
            self.items.popleft()
        while len(self.wanted) > self.max_jobs:
            self.wanted.popleft()

    def prune(self, now_s: float) -> None:
        while self.items and self.items[0][0] < now_s - self.window_s:
            self.items.popleft()

    def count(self, now_s: float) -> int:
        self.prune(now_s)
        return len(self.items)

    def latency_quantile(self, now_s: float, q: float) -> float | None:
        self.prune(now_s)
        return quantile([ms for _, ms in self.items], q)

    def demands(self) -> tuple[Demand, ...]:
        return tuple(self.wanted)

    def rate(self, now_s: float) -> float:
        """Completions per second over the time the window covers."""
        self.prune(now_s)
        if len(self.items) < 2:
            return len(self.items) / self.window_s
        span = max(now_s - self.items[0][0], 1e-3)
        return len(self.items) / max(span, min(self.window_s, 10.0))


# -- one period's view ---------------------------------------------------------------------------


# Early exit saves about this share of a job's thinking (the r1-reasoner's agree3 probes saved
# 9%, bench/RESULTS.md): what the early-exit rung is predicted to remove, and to give back.
EARLY_EXIT_SAVING = 0.1
WASTE_PER_BACKTRACK = 128.0  # tokens a backtrack discards, until the class's own are measured


@dataclass(slots=True, frozen=True)
class Signals:
    """What one period of one class's law sees (all times in seconds)."""

    slo_s: float
    pace_tok_s: float | None = None  # per running sequence, now
    running_now: int = 0  # sequences decoding now, every class
    occupancy: float = 0.0  # running sequences over the batch capacity, all decode workers
    # The engine step's time against the batch: t(B) = step_a_s + step_b_s * B (decode fits it
    # on its own steps), for the pace a level of pressure would settle at.
    step_a_s: float | None = None
    step_b_s: float | None = None
    arrivals_per_s: float = 0.0  # this class's jobs arriving (refused ones included)
    queue_s: float = 0.0  # expected wait from admission to the decode start
    overhead_s: float = 0.0  # after the thinking besides the answer: verdict waits, publishing
    answer_tokens: int = 24
    demand: tuple[Demand, ...] = ()  # what the class's recent jobs wanted
    waste_per_backtrack: float = WASTE_PER_BACKTRACK
    running: tuple[tuple[float, int, bool], ...] = ()  # this class's jobs: (age s, used, thinking)
    done_p90_s: float | None = None  # completed jobs' p90 latency
    done_count: int = 0
    full_say: int = 5  # completed jobs that carry full weight

    def works(self, limits: ClassLimits) -> list[float]:
        """The tokens each recent job would spend under `limits`: its thinking (less what early
        exit saves where it is on), the backtracks the resample cap allows, within the cap. A
        job cut at c tokens wanted the median of what uncut jobs longer than c wanted (twice
        c when there is none): an estimate that neither forgets a cut job nor presumes it
        wanted the ceiling (which kept a law that had cut every job from ever loosening)."""
        cap = limits.resample_cap
        keep = 1.0 - EARLY_EXIT_SAVING if limits.early_exit else 1.0
        uncut = sorted(d.natural for d in self.demand if not d.cut)
        out = []
        for d in self.demand:
            natural = d.natural
            if d.cut:
                longer = [n for n in uncut if n > natural]
                natural = longer[len(longer) // 2] if longer else 2.0 * natural
            backtracks = d.contradictions if cap is None else min(cap, d.contradictions)
            work = natural * keep + backtracks * self.waste_per_backtrack
            out.append(min(work, limits.max_thinking_tokens))
        return out

    def step_s(self, limits: ClassLimits) -> float | None:
        """The engine step's time a job admitted now will see: the present one, or the one
        the batch settles at with this class's arrivals under `limits` (Little: B = admitted
        rate x job time, job time = work x t(B)), whichever is slower. None without a pace;
        infinite when that load cannot settle."""
        if not self.pace_tok_s:
            return None
        now = 1.0 / self.pace_tok_s
        works = self.works(limits)
        if self.step_a_s is None or self.step_b_s is None or not works:
            return now
        mean = sum(works) / len(works) + self.answer_tokens
        load = self.arrivals_per_s * (1.0 - limits.shed) * mean
        denominator = 1.0 - load * self.step_b_s
        if denominator <= 0:
            return math.inf
        settled = self.step_a_s + self.step_b_s * (load * self.step_a_s / denominator)
        return max(now, settled)

    def new_job_s(self, limits: ClassLimits) -> float | None:
        """A job admitted now under `limits`: queue, its work (p90) at the pace the batch will
        have, the answer, what follows. None before there is a pace and a work estimate."""
        step = self.step_s(limits)
        work = quantile(self.works(limits), 0.9)
        if step is None or work is None:
            return None
        return self.queue_s + (work + self.answer_tokens) * step + self.overhead_s

    def running_s(self, limits: ClassLimits) -> list[float]:
        """Each running job's predicted latency under `limits` at the live pace."""
        if not self.pace_tok_s:
            return []
        work = quantile(self.works(limits), 0.9)
        out = []
        for age_s, used, thinking in self.running:
            # Before any job has finished the work is unknown: a running job counts by its
            # age alone (a cold stack is not presumed to be late).
            left = max(0.0, work - used) if thinking and work is not None else 0.0
            out.append(age_s + (left + self.answer_tokens) / self.pace_tok_s + self.overhead_s)
        return out


UNSETTLED = 10.0  # the ratio of a load the batch cannot settle under (an infinite latency)

# Running jobs' predictions count through their 90th percentile over at least this many jobs
# (the missing ones count as on time): one long job among three does not move the class, one
# in ten does.
RUNNING_FLOOR = 10


@dataclass(slots=True, frozen=True)
class Prediction:
    """The predicted latency over the SLO, and the part of it that set it."""

    ratio: float | None
    new_job: float | None
    running: float | None
    done: float | None

    @property
    def source(self) -> str:
        parts = {"new_job": self.new_job, "running": self.running, "done": self.done}
        known = {k: v for k, v in parts.items() if v is not None}
        return max(known, key=known.__getitem__) if known else "none"


def predicted_ratio(sig: Signals, limits: ClassLimits) -> Prediction:
    """The class's predicted latency over its SLO under `limits`: the largest of a job
    admitted now, the running jobs' p90, and the completed jobs' p90 (its weight grows with
    their count). None when nothing is known yet (a cold stack)."""
    slo = sig.slo_s
    new = sig.new_job_s(limits)
    new_r = None if new is None else min(new / slo, UNSETTLED)
    preds = sig.running_s(limits)
    run_r = None
    if preds:
        padded = preds + [0.0] * max(0, RUNNING_FLOOR - len(preds))
        run_r = (quantile(padded, 0.9) or 0.0) / slo
    done_r = None
    if sig.done_p90_s is not None and sig.done_count:
        done_r = min(1.0, sig.done_count / sig.full_say) * sig.done_p90_s / slo
    known = [r for r in (new_r, run_r, done_r) if r is not None]
    if not known and not sig.running and sig.queue_s == 0 and sig.running_now == 0:
        return Prediction(0.0, None, None, None)  # nothing to do: under no pressure at all
    return Prediction(max(known) if known else None, new_r, run_r, done_r)
