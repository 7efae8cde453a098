"""The one reasoning loop: jobs on one engine, stepped, budgeted, checked and forced alike
whoever drives them. Serving's decode core (pipeline/decode/core.py) and `stepwise eval`
(pipeline/evals/verified.py) both run it, so what is measured is what is served.

Each engine step (`step`, timed: the pace), every job gets, in this order: its effective budget
(pipeline/budget/effective.py: its own caps, the class limits stamped on it and the live ones,
its deadline at the pace), then its reasoning (the driver reports the step's new steps, tokens,
finishes and probes to the reasoning machine and applies what it asks: rollbacks, forced
answers, early exits). Verdicts are applied as they come (`verdict`). What the jobs ask of the
outside world — checks to send, notes to stream — goes back to the caller, who owns the
verifier (Celery, or a local process pool) and the event stream.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline import schema
from pipeline.budget import Deadline, JobBudget, Pace, job_budget
from pipeline.engine.base import StepEngine
from pipeline.engine.sequence import Sequence
from pipeline.formats import ReasoningFormat
from pipeline.reasoning.driver import Outward, ReasoningDriver
from pipeline.reasoning.pace import StepTimer
from pipeline.reasoning.types import ReasoningConfig

# Room after the thinking for the forcing text, besides the answer's own tokens.
FORCING_ROOM = 32


@dataclass(slots=True)
class ReasoningJob:
    """One job in the loop: its reasoning driver, what its budget is computed from, and what
    its budget did (for its Result, its trace and the controller's counters)."""

    job_id: str
    driver: ReasoningDriver
    params: schema.JobParams
    stamped: schema.Budget  # the class's limits when it was admitted (or the defaults)
    slo_class: str = "interactive"
    start_ms: int = 0  # created (else admitted), wall clock: its deadline counts from here
    e2e_ms: int | None = None  # its own SLO; None: the class's, while a controller publishes
    binding: str = "default"  # what set its thinking cap last (job, class, deadline, default)
    deadline_cut: bool = False  # its deadline has tightened its budget
    marked_cap: int = 0  # the thinking cap its trace last reported (budget_cut events)

    @property
    def seq(self) -> Sequence:
        return self.driver.seq

    def deadline(self, live: schema.Budget | None) -> Deadline | None:
        """When it must be done, or None when no deadline is enforced (no controller)."""
        enforced = live if live is not None else self.stamped
        if enforced.slo_ms <= 0:
            return None
        slo = float(self.e2e_ms or enforced.slo_ms)
        return Deadline(int(self.start_ms + slo), slo)


def starting_config(
    params: schema.JobParams,
    stamped: schema.Budget,
    live: schema.Budget | None,
    fmt: ReasoningFormat,
    *,
    max_retries: int = 8,
    max_backtracks: int = 32,
    verdict_timeout_s: float = 10.0,
    fast_verdicts: bool = True,
) -> tuple[ReasoningConfig, JobBudget]:
    """A job's reasoning configuration as it starts, from its effective budget then (its own
    caps, the stamped and live class limits; its deadline follows at every step)."""
    start = job_budget(params, stamped, live)
    config = ReasoningConfig(
        verify=params.verify,
        max_retries=max_retries,
        max_backtracks=max_backtracks,
        verdict_timeout_s=verdict_timeout_s,
        fast_verdicts=fast_verdicts,
        max_thinking_tokens=start.max_thinking_tokens,
        max_steps=start.max_steps,
        early_exit=start.early_exit,
        probe_every=start.probe_every,
        format=fmt,
    )
    return config, start


def token_limit(config: ReasoningConfig, prompt_len: int, max_model_len: int) -> int:
    """The engine's own limit on a job's tokens: above its thinking budget, with room for the
    forcing text and the answer (running out of the budget forces the answer first)."""
    limit = (config.max_thinking_tokens or max_model_len) + config.answer_tokens + FORCING_ROOM
    return max(1, min(limit, max_model_len - prompt_len))


class ReasoningLoop:
    """Reasoning jobs on one engine: the engine's steps (timed), every job's budget and
    reasoning after each, the verdicts as they come."""

    def __init__(self, engine: StepEngine) -> None:
        self.engine = engine
        self.timer = StepTimer()
        self._stepped_at: float | None = None
        self.deadline_cuts: dict[str, int] = {}  # jobs a deadline cut, per SLO class

    def start(
        self,
        job_id: str,
        seq: Sequence,
        config: ReasoningConfig,
        problem: str = "",
        premises: Iterable[str] = (),
        **job,
    ) -> ReasoningJob:
        """A job whose sequence is in the engine, reasoning under `config`; `problem`,
        `premises`: its question as the verifier reads it; `job`: the other fields of its
        ReasoningJob (params, stamped, ...)."""
        driver = ReasoningDriver(self.engine, seq, config, problem, premises)
        return ReasoningJob(job_id, driver, **job)

    def step(self) -> int:
        """One engine step if anything can run; the batch it stepped (0: none)."""
        if not self.engine.has_schedulable:
            self._stepped_at = None
            return 0
        began = time.monotonic()
        batch = len(self.engine.step())
        # A sequence's time per token: from one engine step to the next while the batch runs
        # back to back (a gap with nothing to step is not its pace).
        if self._stepped_at is not None and batch:
            self.timer.record(batch, began - self._stepped_at)
        self._stepped_at = began
        return batch

    def pace(self, verdict_wait_s: float = 0.0) -> Pace | None:
        """The live pace a running sequence gets, and what its answer needs after it."""
        tok_s = self.timer.pace_tok_s
        return None if tok_s is None else Pace(tok_s, verdict_wait_s=verdict_wait_s)

    def advance(
        self, job: ReasoningJob, now_s: float, live: schema.Budget | None, pace: Pace | None
    ) -> list[Outward]:
        """After a step: the job's effective budget now, then its reasoning."""
        self.apply_budget(job, live, pace, now_s)
        return job.driver.advance(now_s)

    def verdict(
        self, job: ReasoningJob, key: str, verdict: str, detail: str, now_s: float, claims=()
    ) -> list[Outward]:
        return job.driver.verdict(key, verdict, detail, now_s, claims)

    def apply_budget(
        self, job: ReasoningJob, live: schema.Budget | None, pace: Pace | None, now_s: float
    ) -> JobBudget:
        """The job's effective budget now into its reasoning. A deadline cut is counted once
        per job (`deadline_cuts`, per class); a traced job gets a `budget_cut` mark each time
        its cap falls by a tenth or what binds it changes."""
        r = job.driver.reasoner
        deadline = job.deadline(live)
        now = int(time.time() * 1000)
        used = job.driver.tokens_spent()
        b = job_budget(job.params, job.stamped, live, deadline=deadline, now_ms=now, pace=pace,
                       used=used)  # fmt: skip
        if r.phase == "think":
            cap = r.max_thinking_tokens or 1 << 30
            if b.binding == "deadline" and not job.deadline_cut and b.max_thinking_tokens < cap:
                job.deadline_cut = True
                self.deadline_cuts[job.slo_class] = self.deadline_cuts.get(job.slo_class, 0) + 1
            marked = job.marked_cap
            changed = b.binding != job.binding or (marked and b.max_thinking_tokens < 0.9 * marked)
            if job.driver.marks is not None and changed:
                job.marked_cap = b.max_thinking_tokens
                attrs = {"binding": b.binding, "max_thinking_tokens": b.max_thinking_tokens}
                job.driver.marks.append(("budget_cut", {**attrs, "used": used}))
            job.binding = b.binding
        r.update_budget(b)
        if deadline is not None and pace is not None:
            # Pending verdicts must not hold the answer past the deadline.
            answer_s = pace.answer_tokens / pace.tokens_per_s
            r.verdicts_due_s = now_s + (deadline.at_ms - now) / 1000.0 - answer_s - 0.5
        return b
