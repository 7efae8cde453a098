"""A job's effective budget, computed in one place (docs/budget.md: "one place for a budget").

A job's thinking is capped by four things, and this module is the only one that combines them:
* the job's own caps: `params.max_thinking_tokens` (vLLM's `thinking_token_budget` at the HTTP
  edge; `thinking_budget` from older producers), `params.max_tokens`, `params.max_steps`;
* the class's limits stamped at admission (`Handoff.budget`: the controller's, or the
  pipeline's defaults when none runs);
* the class's live limits, re-read while the job runs (they only ever tighten it);
* its deadline (`created_ms` + its `slo.e2e_ms`, else the class SLO): at the live per-sequence
  pace, the thinking that still fits before it, less what the answer needs. Deadlines are
  enforced only while a controller publishes (`Budget.slo_ms` > 0), so a pipeline without one
  behaves as it always did.
The same function serves decode (at the start and at every engine tick) and `stepwise eval`
(own caps and defaults only), so what is measured is what is served.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import schema

# What a running job keeps of its SLO for what follows its thinking besides the answer's own
# tokens (publishing, the client's read): a deadline met by a hair is missed on the wire.
DEADLINE_RESERVE = 0.04


@dataclass(slots=True, frozen=True)
class JobBudget:
    """The limits a job runs under now, and what set the thinking cap."""

    max_thinking_tokens: int
    max_steps: int
    probe_every: int  # steps between early-exit probes (0: never)
    early_exit: bool
    resample_cap: int | None  # backtracks before resampling stops; None: no cap
    binding: str  # job | class | deadline | default


@dataclass(slots=True, frozen=True)
class Pace:
    """How fast a running sequence goes now, and what must fit after its thinking."""

    tokens_per_s: float  # per running sequence (the engine emits one token per step each)
    answer_tokens: int = 24  # forcing text and a greedy answer
    verdict_wait_s: float = 0.0  # pending verdicts a forced answer waits for (live p90)


@dataclass(slots=True, frozen=True)
class Deadline:
    """When a job must be done (wall clock, ms) and the SLO that set it."""

    at_ms: int
    slo_ms: float

    def reserve_s(self, pace: Pace) -> float:
        """The time kept after the thinking: the answer at the pace, its verdicts, a margin."""
        answer_s = pace.answer_tokens / pace.tokens_per_s
        return answer_s + pace.verdict_wait_s + DEADLINE_RESERVE * self.slo_ms / 1000.0

    def allowance(self, now_ms: int, pace: Pace, used: int) -> int:
        """The thinking tokens (spent ones included) that still fit before the deadline."""
        left_s = (self.at_ms - now_ms) / 1000.0 - self.reserve_s(pace)
        return used + int(max(0.0, left_s) * pace.tokens_per_s)


def deadline_of(job: schema.PrefillTask, live: schema.Budget | None) -> Deadline | None:
    """The job's deadline, or None when no deadline is enforced (no controller publishes)."""
    enforced = live if live is not None else job.budget
    if enforced.slo_ms <= 0:
        return None
    slo = float(job.slo.e2e_ms or enforced.slo_ms)
    return Deadline(int((job.created_ms or job.admitted_ms) + slo), slo)


def own_thinking_cap(params: schema.JobParams) -> int | None:
    """The tightest of the job's own caps on its thinking (None: it set none)."""
    caps = [c for c in (params.max_thinking_tokens, params.thinking_budget, params.max_tokens) if c]
    return min(caps) if caps else None


def _tighter(a: int | None, b: int | None) -> int | None:
    """The tighter of two caps where None means none."""
    return b if a is None else a if b is None else min(a, b)


def job_budget(
    params: schema.JobParams,
    stamped: schema.Budget,
    live: schema.Budget | None = None,
    *,
    deadline: Deadline | None = None,
    now_ms: int = 0,
    pace: Pace | None = None,
    used: int = 0,
) -> JobBudget:
    """The job's limits now: the tightest of its own caps, the stamped and the live class
    limits and, with a `deadline` and a `pace`, what still fits before it."""
    classes = [stamped] if live is None else [stamped, live]
    controlled = any(b.version > 0 for b in classes)
    kind = "class" if controlled else "default"
    candidates = [(b.max_thinking_tokens, kind) for b in classes]
    if (own := own_thinking_cap(params)) is not None:
        candidates.append((own, "job"))
    if deadline is not None and pace is not None and pace.tokens_per_s > 0:
        candidates.append((max(1, deadline.allowance(now_ms, pace, used)), "deadline"))
    tokens, binding = min(candidates, key=lambda c: c[0])
    steps = min([b.max_steps for b in classes] + ([params.max_steps] if params.max_steps else []))
    cap = None
    for b in classes:
        cap = _tighter(cap, b.resample_cap)
    probes = [b.probe_effort for b in classes if b.probe_effort > 0]
    return JobBudget(
        max_thinking_tokens=max(1, tokens),
        max_steps=max(1, steps),
        probe_every=min(probes) if probes else 0,
        early_exit=params.early_exit or any(b.early_exit for b in classes),
        resample_cap=cap,
        binding=binding,
    )
