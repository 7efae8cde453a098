"""What a decode worker reports of its load to the budget controller (pipeline/budget/signals.py):
the pace and the step line (pipeline/reasoning/pace.py), its running jobs, how long jobs waited
before decode started them and how long verdicts take to come back (`LoadTracker`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

from pipeline.budget.signals import DecodeReport, RunningJob, quantile
from pipeline.config import PipelineConfig
from pipeline.reasoning.pace import StepTimer


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
