"""Decode's live pace and load: each running job's budget at that pace, and what the budget
controller reads (pipeline/budget/signals.py).

Every engine step emits one token for each running sequence, so the time between steps is the
time a sequence waits for its next token: its pace is one over it. The step's time grows with
the batch, `t(B) = a + b * B`, and the controller needs that line to predict the pace a level
of load would settle at: `StepTimer` fits it on the steps it sees (per batch size, an
exponentially weighted mean), with a prior slope while the batch has not varied enough to tell.
`LoadTracker` keeps what else the report says: how long jobs waited before decode started
them, how long verdicts take to come back.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

from pipeline import schema
from pipeline.budget import Pace, deadline_of, job_budget
from pipeline.budget.signals import DecodeReport, RunningJob, quantile
from pipeline.config import PipelineConfig

# Until the batch has varied enough to fit the line: b = t(B) / (B + this), i.e. the fixed cost
# of a step is worth this many sequences. Measured for the r1-reasoner on this machine's CPU
# (70 ms + 5 ms a sequence, bench/RESULTS.md "SLO controller"); a GPU's is larger, and the fit
# replaces it once the batch has ranged over MIN_SPREAD sizes.
PRIOR_FIXED_SEQS = 14.0
MIN_SPREAD = 4
DECAY = 0.9  # weight of the past in each batch size's mean (about ten steps)


class StepTimer:
    """The engine's step time against its batch size, from the steps it is told of."""

    def __init__(self) -> None:
        self.bins: dict[int, tuple[float, float]] = {}  # batch -> (mean step s, weight)
        self.last: tuple[int, float] | None = None  # the latest (batch, step s)
        self.ewma_s: float | None = None

    def record(self, batch: int, step_s: float) -> None:
        if batch < 1 or step_s <= 0:
            return
        mean, weight = self.bins.get(batch, (step_s, 0.0))
        self.bins[batch] = (DECAY * mean + (1 - DECAY) * step_s if weight else step_s,
                            min(weight + 1.0, 50.0))  # fmt: skip
        self.last = (batch, step_s)
        self.ewma_s = step_s if self.ewma_s is None else 0.8 * self.ewma_s + 0.2 * step_s

    @property
    def pace_tok_s(self) -> float | None:
        """Tokens per second one running sequence gets now."""
        return None if not self.ewma_s else 1.0 / self.ewma_s

    def line(self) -> tuple[float, float] | None:
        """(a, b) of t(B) = a + b * B; None before any step."""
        if self.last is None:
            return None
        sizes = sorted(self.bins)
        if sizes[-1] - sizes[0] >= MIN_SPREAD:
            fit = _weighted_fit([(b, *self.bins[b]) for b in sizes])
            if fit is not None:
                return fit
        batch, _ = self.last
        step = self.ewma_s or self.last[1]
        b = step / (batch + PRIOR_FIXED_SEQS)
        return b * PRIOR_FIXED_SEQS, b


def _weighted_fit(points: list[tuple[int, float, float]]) -> tuple[float, float] | None:
    """Least squares of t = a + b * B over (B, t, weight); None when it is not a rising line
    (noise on a narrow range can tilt it): the prior then stands."""
    sw = sum(w for _, _, w in points)
    mx = sum(w * x for x, _, w in points) / sw
    my = sum(w * y for _, y, w in points) / sw
    sxx = sum(w * (x - mx) ** 2 for x, _, w in points)
    if sxx <= 0:
        return None
    b = sum(w * (x - mx) * (y - my) for x, y, w in points) / sxx
    a = my - b * mx
    if b <= 0 or a <= 0:
        return None
    return a, b


class LoadTracker:
    """Queueing times of jobs decode started lately, and verdicts' round trips."""

    def __init__(self, window_s: float = 10.0, clock=time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self.queued: deque[tuple[float, float]] = deque()  # (when started, ms it waited)
        self.sent: dict[str, float] = {}  # check key -> when sent
        self.waits: deque[float] = deque(maxlen=64)  # ms, the latest verdicts

    def started(self, waited_ms: float) -> None:
        self.queued.append((self.clock(), max(0.0, waited_ms)))

    def recent_queue_ms(self) -> list[float]:
        cutoff = self.clock() - self.window_s
        while self.queued and self.queued[0][0] < cutoff:
            self.queued.popleft()
        return [ms for _, ms in self.queued]

    def check_sent(self, key: str) -> None:
        self.sent[key] = self.clock()
        if len(self.sent) > 4096:  # verdicts of finished jobs never come: forget the oldest
            for old in list(self.sent)[:1024]:
                del self.sent[old]

    def verdict_in(self, key: str) -> None:
        if (at := self.sent.pop(key, None)) is not None:
            self.waits.append(1000.0 * (self.clock() - at))

    def verdict_wait_ms(self) -> float | None:
        return quantile(list(self.waits), 0.9)


MAX_REPORTED_JOBS = 256


def load_report(
    runs: Iterable,
    timer: StepTimer,
    tracker: LoadTracker,
    config: PipelineConfig,
    waiting: int,
    deadline_cuts: dict[str, int],
) -> DecodeReport:
    """What the budget controller reads of a decode worker (pipeline/budget/signals.py); the
    I/O side names the worker and publishes it. `runs`: the core's JobRuns."""
    now = int(time.time() * 1000)
    jobs = []
    for run in runs:
        if run.seq.is_finished or len(jobs) >= MAX_REPORTED_JOBS:
            continue
        h = run.handoff
        age = float(now - (h.created_ms or h.admitted_ms))
        thinking = run.driver.reasoner.phase == "think"
        jobs.append(RunningJob(h.slo.class_, age, run.driver.tokens_spent(), thinking))
    line = timer.line()
    pace = timer.pace_tok_s
    if not jobs and line is not None:  # idle: the pace the next job gets, not the last one's
        pace = 1.0 / (line[0] + line[1])
    return DecodeReport(
        worker="",
        ts_ms=now,
        pace_tok_s=pace,
        step_a_s=None if line is None else line[0],
        step_b_s=None if line is None else line[1],
        running=len(jobs),
        capacity=config.max_decode_seqs,
        waiting=waiting,
        queue_ms=tracker.recent_queue_ms(),
        verdict_wait_ms=tracker.verdict_wait_ms(),
        jobs=jobs,
        deadline_cuts=dict(deadline_cuts),
    )


def apply_budget(
    run, live: schema.Budget | None, pace: Pace | None, now_s: float, cuts: dict[str, int]
) -> None:
    """A running job's effective budget now (its own caps, the class's live limits, its
    deadline at the live pace: pipeline/budget/effective.py), into its reasoning. A cut is
    counted once per job when its deadline is what binds (`cuts`, per class), and a traced
    job gets a `budget_cut` event each time its cap falls by a tenth or its binding changes.
    `run`: a decode JobRun."""
    h, r = run.handoff, run.driver.reasoner
    deadline = deadline_of(h, live)
    now = int(time.time() * 1000)
    used = run.driver.tokens_spent()
    b = job_budget(h.params, h.budget, live, deadline=deadline, now_ms=now, pace=pace, used=used)
    if r.phase == "think":
        if (
            b.binding == "deadline"
            and not run.deadline_cut
            and b.max_thinking_tokens < (r.max_thinking_tokens or 1 << 30)
        ):
            run.deadline_cut = True
            cuts[h.slo.class_] = cuts.get(h.slo.class_, 0) + 1
        marked = run.marked_cap
        if run.driver.marks is not None and (
            b.binding != run.binding or (marked and b.max_thinking_tokens < 0.9 * marked)
        ):
            run.marked_cap = b.max_thinking_tokens
            attrs = {"binding": b.binding, "max_thinking_tokens": b.max_thinking_tokens}
            run.driver.marks.append(("budget_cut", {**attrs, "used": used}))
        run.binding = b.binding
    r.update_budget(b)
    if deadline is not None and pace is not None:
        # Pending verdicts must not hold the answer past the deadline.
        answer_s = pace.answer_tokens / pace.tokens_per_s
        r.verdicts_due_s = now_s + (deadline.at_ms - now) / 1000.0 - answer_s - 0.5
