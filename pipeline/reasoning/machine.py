"""The reasoning state machine of one sequence: steps, verdicts, backtracking (plain logic).

The machine sees what the engine did (a step completed, the sequence wants to finish) and what
the verifier said (a verdict for one attempt of one step), and answers with commands: check
this step, roll back to this token with this seed, resume, finish; plus the notes that become
the job's events. The decode worker (verdicts from Celery) and `stepwise eval --mode verify-*`
(verdicts from a local process) drive the same machine, so what is measured is what is served.

Verify modes (docs/verification.md):
* `off`: steps are kept unchecked (verdict `unverified`).
* `async`: each step is sent for checking and decoding goes on; a contradiction rolls the
  sequence back to the contradicted claim (a false arithmetic claim to its wrong value) or,
  when the error is not the claim's own, to the start of its step, whatever came after it.
* `strict`: the engine pauses the sequence at every step end (`pause_on_step_end`); it resumes
  when the verdict is in.
A finish (EOS, length) is held by the engine (`pause_on_finish`) until every verdict is in, so
a late contradiction of the last step can still be undone.

Backtracking: a contradicted step is resampled (from its contradicted claim's wrong value,
the claim, or the step's start)
with a new seed, up to `max_retries` times, or until it states a claim already refuted again;
then the step before it is dropped too (once per step); then, or after `max_backtracks` in
all, or when the same claim is refuted more than `max_repeats` times after that, the job
gives up: rolled back to the failing step, its answer forced from the chain
before it, finished honestly as `unverified`. Under load the controller caps
the backtracks (`resample_cap`): past the cap a contradicted step is kept, checked and
reported. A verdict later than `verdict_timeout_s` (or than its deadline allows) counts as
`unknown`, so a lost task never stalls a job.

Budget (docs/budget.md; `update_budget` takes the job's effective budget, recomputed at every
tick): when it runs out (tokens kept, discarded and probed, or steps), the sequence waits for
its pending verdicts, is cut back to its last accepted step (verifying: the unfinished step was
never checked) or, unverified, has its thinking closed where it stands, as vLLM's
`thinking_token_budget` closes it (the driver still cuts a tool call being written: the
forcing text cannot go into its arguments), gets the format's forcing text and decodes the answer
greedily (`stop_reason` budget): never just truncated. Early exit: after
every `probe_every`-th step a probe (the format's probe text and a few greedy tokens, a side
sequence sharing the KV prefix) reads the answer the model would give now; when the last
`probe_agree` probes agree (or one reaches `probe_confidence`) and every step so far is
verified, the job ends with that answer (`stop_reason` early_exit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.budget.effective import JobBudget
from pipeline.reasoning.types import (
    CONTRADICTED,
    UNVERIFIED,
    VERIFIED,
    Action,
    Check,
    ExitWith,
    Finish,
    ForceAnswer,
    Note,
    Pause,
    Probe,
    ReasoningConfig,
    Resume,
    Rollback,
    Step,
    normalize_answer,
    reseed,
)
from pipeline.verify.coverage import Tally
from pipeline.verify.repair import wrong_value_start
from pipeline.verify.unknowns import ARITHMETIC, IDENTITY


@dataclass(slots=True)
class Reasoner:
    config: ReasoningConfig
    seed: int
    prompt_len: int = 0  # where the first step begins
    chain: list[Step] = field(default_factory=list)
    retries: dict[int, int] = field(default_factory=dict)  # step index -> resamples so far
    escalated: set[int] = field(default_factory=set)  # steps already dropped for their successor
    # step index -> claims refuted there (how many times each)
    refuted: dict[int, dict[str, int]] = field(default_factory=dict)
    num_backtracks: int = 0
    num_checks: int = 0
    held_finish: str | None = None  # the engine is holding this finish until verdicts are in
    gave_up: bool = False
    finished: bool = False
    phase: str = "think"  # think | wait_answer (budget spent, verdicts pending) | answer
    stop_reason: str | None = None  # budget | early_exit | unverified; None: the model's own
    # The model ended with its thinking open while a grammar waited for it to close: the
    # answer it is then given (under the grammar) is its own, not a spent budget's.
    ended_unclosed: bool = False
    max_thinking_tokens: int | None = None  # live budget (update_budget): the config's at first
    max_steps: int | None = None
    # Backtracks allowed before resampling stops (the controller's cap under pressure; None:
    # none beyond max_backtracks). Past it a contradicted step is kept, checked and reported.
    resample_cap: int | None = None
    early_exit: bool = False  # probing for an early answer (the job's wish, or the controller's)
    probe_every: int = 1
    num_unresampled: int = 0  # contradicted steps kept because resampling was capped
    num_repairs: int = 0  # verify mode `repair`: wrong values replaced in place
    num_fast_verdicts: int = 0  # steps contradicted in decode, with no round trip
    # When its deadline needs the answer started (monotonic s): pending verdicts then count
    verdicts_due_s: float | None = None  # as unknown rather than hold the answer past it
    num_probe_tokens: int = 0
    probes: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (step key, pos)
    answers: list[tuple[str, str]] = field(default_factory=list)  # (step key, probed answer)
    # An exit the probes agreed on, waiting for verdicts: (probe key, step key, position,
    # answer, why).
    exit_candidate: tuple[str, str, int, str, str] | None = None
    tally: Tally = field(default_factory=Tally)  # every check's claims, for the coverage report
    # Whether the thinking block is closed where the step being judged begins (the driver
    # keeps it current; formats without markers ignore it).
    after_thinking: bool = False
    _attempts: int = 0

    def __post_init__(self) -> None:
        self.max_thinking_tokens = self.config.max_thinking_tokens
        self.max_steps = self.config.max_steps
        self.early_exit = self.config.early_exit
        self.probe_every = self.config.probe_every

    @property
    def verifying(self) -> bool:
        return self.config.verify != "off"

    @property
    def pending(self) -> list[Step]:
        return [s for s in self.chain if s.verdict is None]

    # -- inputs ---------------------------------------------------------------------------

    def result_stop_reason(self, finish_reason: str | None) -> str:
        """The Result's stop_reason: the machine's own (budget, early_exit, unverified), else
        the engine's finish ("stop": the model ended its answer; else it ran out of tokens)."""
        if self.stop_reason:
            return self.stop_reason
        return "answer" if finish_reason == "stop" else "max_tokens"

    def calls_begun(self, upto: int | None = None) -> bool:
        """Has a tool call opened in the chain's steps (before step `upto`)? From there on the
        text is tool calls, not claims: verification reads none of it."""
        return any(s.opens_call for s in self.chain[:upto])

    def is_answer(self, text: str) -> bool:
        """Does this step state the final answer (in the model's format)?"""
        return self.config.format.is_answer_step(text, self.after_thinking)

    def on_step(self, start: int, end: int, text: str, now_s: float) -> list[Action]:
        """The sequence completed a step spanning tokens [start, end)."""
        if self.phase == "answer":  # the forced answer line: kept as written, then done
            actions = self.on_unchecked_step(start, end, text)
            self.finished = True
            return [*actions, Finish(self.stop_reason or "budget")]
        self._attempts += 1
        step = Step(len(self.chain), start, end, text, f"{len(self.chain)}.{self._attempts}")
        self.chain.append(step)
        actions: list[Action] = [Note("step", step.index, text)]
        if not self.verifying:
            step.verdict = UNVERIFIED
        else:
            step.sent_s = now_s
            self.num_checks += 1
            accepted = tuple(s.checked for s in self.chain[:-1])
            checked = "" if self.calls_begun(len(self.chain) - 1) else step.checked
            actions.append(Check(step.key, step.index, checked, accepted))
        if self.is_answer(text) or self.phase != "think":
            return actions
        if self.max_steps is not None and len(self.chain) >= self.max_steps:
            return actions + self._out_of_budget()
        if self.early_exit and self.probe_every and (step.index + 1) % self.probe_every == 0:
            probe = f"p{step.key}"
            self.probes[probe] = (step.key, end)
            actions.append(Probe(probe, end))
        return actions

    def on_tokens(
        self, used: int, answering: Callable[[], bool] = bool, out_of_room: bool = False
    ) -> list[Action]:
        """Tokens spent so far (kept, discarded, probes); past the budget, or with no more room
        in the context than an answer needs (`out_of_room`), answer now.

        `answering()` says whether the unfinished step being written states the answer (asked
        only once the budget is spent: this runs every engine step). A model that has written
        its answer, or is writing it (within `answer_tokens` over the budget), is not cut:
        forcing then would put a second, greedy answer after its own."""
        limit = self.max_thinking_tokens
        over = limit is not None and used >= limit
        if self.phase != "think" or self.finished or not (over or out_of_room):
            return []
        if self.held_finish is not None or self._answered():
            return []
        if answering() and (out_of_room or used < (limit or 0) + self.config.answer_tokens):
            return []
        return self._out_of_budget()

    def _answered(self) -> bool:
        return bool(self.chain) and self.is_answer(self.chain[-1].text)

    def update_budget(self, budget: JobBudget) -> None:
        """The job's effective budget now (pipeline/budget/effective.py), while it thinks."""
        if self.phase != "think" or self.finished:
            return
        self.max_thinking_tokens = budget.max_thinking_tokens
        self.max_steps = budget.max_steps
        self.resample_cap = budget.resample_cap
        self.early_exit = budget.early_exit
        self.probe_every = budget.probe_every

    def on_probe(self, key: str, answer: str, mean_p: float, num_tokens: int) -> list[Action]:
        """A probe finished: `answer` is what the model would say now."""
        self.num_probe_tokens += num_tokens
        step_key, position = self.probes.pop(key, ("", 0))
        index = next((i for i, s in enumerate(self.chain) if s.key == step_key), None)
        if index is None or self.phase != "think" or self.finished or not answer.strip():
            return []  # its step was rolled back, or the job is past thinking
        self.answers = [a for a in self.answers if any(s.key == a[0] for s in self.chain)]
        self.answers.append((step_key, normalize_answer(answer)))
        last = [a for _, a in self.answers[-self.config.probe_agree :]]
        agree = len(last) == self.config.probe_agree and len(set(last)) == 1
        sure = self.config.probe_confidence is not None and mean_p >= self.config.probe_confidence
        if not (agree or sure):
            return []
        why = f"{len(last)} probes agree" if agree else f"probe confidence {mean_p:.2f}"
        # Exits once every step up to the probe's is verified: now, or when the verdicts come.
        self.exit_candidate = (key, step_key, position, answer.strip(), why)
        return self._maybe_exit()

    def _maybe_exit(self) -> list[Action]:
        if self.exit_candidate is None or self.phase != "think" or self.finished:
            return []
        if self.held_finish is not None:  # the model has answered by itself meanwhile
            return []
        key, step_key, position, answer, why = self.exit_candidate
        index = next((i for i, s in enumerate(self.chain) if s.key == step_key), None)
        if index is None:  # its step was rolled back
            self.exit_candidate = None
            return []
        if not self._verified_up_to(index):
            return []
        self.exit_candidate = None
        dropped = len(self.chain) > index + 1  # steps decoded while the probe ran
        del self.chain[index + 1 :]
        text = answer
        notes = [Note("backtrack", index + 1, text, None, f"early exit: {why}")] if dropped else []
        if self.config.answer_by_grammar:
            self.phase, self.stop_reason, self.held_finish = "answer", "early_exit", None
            return [*notes, ForceAnswer(position), Resume()]
        self.stop_reason, self.finished = "early_exit", True
        return [*notes, ExitWith(position, key)]

    def _verified_up_to(self, index: int) -> bool:
        """Every step up to `index` has its verdict, none refuted, none unknown (its claims
        were not checked); with verification on, at least one was actually verified. Steps
        with nothing to check (no_claim) pass, but cannot verify an exit on their own."""
        verdicts = [s.verdict for s in self.chain[: index + 1]]
        if any(v in (None, CONTRADICTED) for v in verdicts):
            return False
        if not self.verifying:
            return True
        return "unknown" not in verdicts and any(v in VERIFIED for v in verdicts)

    def coverage(self) -> dict:
        """What verification covered: the tally of every check, the kept chain's steps."""
        chain = [(s.verdict or "unknown", [(c.verdict, c.reason) for c in s.claims])
                 for s in self.chain]  # fmt: skip
        return self.tally.report(chain, "on" if self.verifying else "off")

    def on_cached_step(self, start: int, end: int, text: str, verdict: str) -> list[Action]:
        """A step spliced in from the step cache: verified before, so it is not checked again."""
        self._attempts += 1
        index = len(self.chain)
        step = Step(index, start, end, text, f"{index}.{self._attempts}", verdict=verdict)
        step.detail = "cached"
        self.chain.append(step)
        return [Note("step", index, text), Note("verdict", index, text, verdict, "cached")]

    def on_unchecked_step(self, start: int, end: int, text: str) -> list[Action]:
        """A step of an already finished sequence (verify off): kept as unverified."""
        self._attempts += 1
        index = len(self.chain)
        step = Step(index, start, end, text, f"{index}.{self._attempts}", verdict=UNVERIFIED)
        self.chain.append(step)
        return [Note("step", index, text)]

    def on_finish(
        self, reason: str, tail: tuple[int, int, str] | None, now_s: float
    ) -> list[Action]:
        """The engine holds a finish; `tail` is an unterminated last step (start, end, text)."""
        actions: list[Action] = []
        if self.phase == "answer":
            if tail is not None and tail[2].strip():
                actions += self.on_unchecked_step(*tail)
            self.finished = True
            return [*actions, Finish(self.stop_reason or "budget")]
        answering = tail is not None and self.is_answer(tail[2].strip())
        if reason == "length" and not self._answered() and not answering:
            # Out of tokens before an answer: that is a spent budget too, so the answer is
            # forced (as above) rather than the text cut off.
            if self.phase == "wait_answer":
                return []  # the forced answer comes once the pending verdicts are in
            return self._out_of_budget()
        if self.phase == "wait_answer":  # it ended by itself before the budget cut it:
            self.phase = "think"  # its finish is held like any other (resuming would sample
            # past the end of sequence), and the verdicts still pending decide
        if tail is not None and tail[2].strip():
            actions += self.on_step(*tail, now_s)
        self.held_finish = reason
        return actions + self._maybe_finish()

    def on_unclosed_end(self, tail: tuple[int, int, str] | None, now_s: float) -> list[Action]:
        """The model ended (its end cut off by the driver) with its thinking still open, while
        the answer is a grammar's to write once the thinking closes (a structured output, a
        forced tool call): its last step is read, and once the verdicts are in the answer is
        forced as after a spent budget, which closes the thinking and hands over."""
        actions: list[Action] = []
        if tail is not None and tail[2].strip():
            actions += self.on_step(*tail, now_s)
        if self.phase != "think" or self.finished:  # out of steps: already on its way
            return actions
        self.ended_unclosed = True
        return actions + self._out_of_budget()

    def on_verdict(
        self, key: str, verdict: str, detail: str, now_s: float, claims: Sequence[Any] = ()
    ) -> list[Action]:
        """A verdict for the attempt `key`; one for a step no longer in the chain is ignored."""
        step = next((s for s in self.chain if s.key == key), None)
        if step is None or step.verdict is not None or self.finished:
            return []
        step.verdict, step.detail, step.claims = verdict, detail, tuple(claims)
        self.tally.add_check((c.verdict, c.reason) for c in step.claims)
        note = Note("verdict", step.index, step.text, verdict, detail, step.claims)
        actions: list[Action] = [note]
        if verdict == CONTRADICTED and self.phase == "wait_answer":
            # No budget left to resample: the answer comes from the chain before this step.
            self.num_backtracks += 1  # one backtrack event, one backtrack
            del self.chain[step.index :]
            why = f"step {step.index} contradicted ({detail or 'no detail'}); budget spent"
            actions.append(Note("backtrack", step.index, step.text, CONTRADICTED, why))
            # Cut it out of the sequence now: left in, it would be read back as a new step.
            actions.append(Rollback(step.start, self.seed))
            return actions + self._maybe_answer()
        capped = self.resample_cap is not None and self.num_backtracks >= self.resample_cap
        if verdict == CONTRADICTED and capped:
            # Resampling is capped: the step stays, reported as contradicted; decoding goes on.
            self.num_unresampled += 1
            kept = f"{detail or 'contradicted'}; kept: resampling is capped under load"
            actions[0] = Note("verdict", step.index, step.text, verdict, kept, step.claims)
        elif verdict == CONTRADICTED:
            return actions + self._backtrack(step)
        if self.phase == "wait_answer":
            return actions + self._maybe_answer()
        if exit_now := self._maybe_exit():
            return actions + exit_now
        if self.config.verify == "strict" and step is self.chain[-1]:
            actions.append(Resume())
        return actions + self._maybe_finish()

    def on_false_claim(
        self, start: int, end: int, text: str, detail: str, claims: Sequence[Any], now_s: float
    ) -> list[Action]:
        """The step being written (tokens [start, end), not yet in the chain) states a false
        claim: it is backtracked now, as a contradicted step would be, from the claim's start."""
        if self.finished or self.phase != "think":
            return []
        self._attempts += 1
        key = f"{len(self.chain)}.{self._attempts}"
        bad = Step(len(self.chain), start, end, text, key, now_s, CONTRADICTED, detail)
        bad.claims = tuple(claims)
        # Not a check of the coverage report: no step, no verdict event (the backtrack event
        # names the claim); every reported check has its verdict event.
        if self.resample_cap is not None and self.num_backtracks >= self.resample_cap:
            return []  # resampling capped: the step goes on, and its verdict says the rest
        return self._backtrack(bad)

    def on_tick(self, now_s: float) -> list[Action]:
        """Time passes: verdicts overdue by `verdict_timeout_s` count as unknown, and so do all
        pending ones once the job's deadline needs its answer started (`verdicts_due_s`)."""
        actions: list[Action] = []
        deadline = now_s - self.config.verdict_timeout_s
        due = self.verdicts_due_s is not None and now_s >= self.verdicts_due_s
        for step in self.pending:
            if due:
                why = "deadline: no verdict before the answer was due"
                actions += self.on_verdict(step.key, "unknown", why, now_s)
            elif step.sent_s <= deadline:
                actions += self.on_verdict(step.key, "unknown", "timeout: no verdict", now_s)
        return actions

    # -- outputs --------------------------------------------------------------------------

    def _out_of_budget(self) -> list[Action]:
        self.phase = "wait_answer"
        return [Pause(), *self._maybe_answer()]

    def _maybe_answer(self) -> list[Action]:
        """Budget spent: once no verdict is pending, answer from the chain as it stands."""
        if self.phase != "wait_answer" or self.pending:
            return []
        reason = UNVERIFIED if self.gave_up else "answer" if self.ended_unclosed else "budget"
        self.phase, self.stop_reason, self.held_finish = "answer", reason, None
        if not self.verifying:
            # Nothing is checked, so nothing is cut: the thinking closes where it stands (as
            # vLLM's `thinking_token_budget` closes it), and what was streamed is the response.
            return [ForceAnswer(None), Resume()]
        # The answer follows the checked chain: the unfinished step, never checked, is cut.
        position = self.chain[-1].end if self.chain else self.prompt_len
        return [ForceAnswer(position), Resume()]

    def _maybe_finish(self) -> list[Action]:
        if self.held_finish is None or self.pending or self.finished:
            return []
        self.finished = True
        return [Finish(self.held_finish)]

    def _backtrack(self, bad: Step) -> list[Action]:
        i = bad.index
        self.num_backtracks += 1
        self.retries[i] = self.retries.get(i, 0) + 1
        if self.num_backtracks > self.config.max_backtracks:
            return self._give_up(bad, f"{self.config.max_backtracks} backtracks spent")
        target = i
        # The same claim refuted again after a resample (`The answer is \boxed{15}`, written
        # each time) was decided by the steps before it: the step before is dropped now rather
        # than after every retry is spent on the same text.
        refuted = self.refuted.setdefault(i, {})
        claim = _refuted_claim(bad)
        again = claim in refuted
        refuted[claim] = refuted.get(claim, 0) + 1
        can_escalate = i > 0 and (i - 1) not in self.escalated
        # ... and once the step before was dropped for it and the same claim still comes back,
        # a claim wrong by what came before (not by its own computation) is only written
        # again by more resamples of this step (measured: answers refuted 10-12 times in a
        # row, every one of them a give-up in the end): the job gives up now.
        stuck = (
            i > 0
            and not can_escalate
            and refuted[claim] > self.config.max_repeats
            and not _wrong_in_itself(bad)
        )
        if stuck:
            return self._give_up(bad, f"step {i} stated {claim!r} {refuted[claim]} times")
        if self.retries[i] > self.config.max_retries or (again and can_escalate):
            if not can_escalate:
                return self._give_up(bad, f"step {i} failed {self.retries[i]} times")
            self.escalated.add(i - 1)
            self.retries[i] = 0
            for k in [k for k in self.refuted if k >= i - 1]:
                del self.refuted[k]
            target = i - 1
        # The step being written (a false claim rolled back mid-step) is not in the chain yet.
        position = self.chain[target].start if target < len(self.chain) else bad.start
        del self.chain[target:]
        self.held_finish = None
        seed = reseed(self.seed, self.num_backtracks)
        # Claims are the unit of rollback: the step's text before its first contradicted claim
        # is kept, and only the claim on is resampled (the whole step when it was dropped for
        # its successor, or when the verdict names no claim).
        by_claim = target == i and self.config.rollback == "claim"
        char = _first_contradicted(bad) if by_claim else None
        where = f"step {target}" if char is None else f"its claim at character {char}"
        detail = f"step {i} contradicted ({bad.detail or 'no detail'}); resampling from {where}"
        return [
            Note("backtrack", target, bad.text, CONTRADICTED, detail),
            Rollback(position, seed, char),
            Resume(),
        ]

    def _give_up(self, bad: Step, why: str) -> list[Action]:
        """No more resampling: the bad step is cut, and the answer is forced from the chain
        before it (as when the budget is spent), so the job still ends with an answer in the
        model's format; `stop_reason` unverified says it was not verified through."""
        self.gave_up = True
        self.stop_reason = UNVERIFIED
        del self.chain[bad.index :]
        self.held_finish = None
        self.phase = "wait_answer"
        detail = f"giving up: {why}; answering unverified from step {bad.index}"
        return [
            Note("backtrack", bad.index, bad.text, CONTRADICTED, detail),
            Rollback(bad.start, self.seed),
            Pause(),
            *self._maybe_answer(),
        ]


# Claims whose error is inside the claim itself (its computation, its rewrite): resampling
# from the claim's start can put it right. A wrong answer, a value an earlier step fixed, an
# equation the problem refutes come from the reasoning before the claim: resampling only the
# claim would guess values (the tiny reasoner rewrote `Answer: 26`'s 26 until it gave up), so
# those roll the whole step back, as before claims were the unit.
CLAIM_ROLLBACK_KINDS = (ARITHMETIC, IDENTITY)


def _refuted_claim(step: Step) -> str:
    """What a contradiction refuted: its first contradicted claim's text, else the step's."""
    first = _first_bad(step)
    return step.text if first is None else first.text


def _first_bad(step: Step) -> Any | None:
    """The step's first contradicted claim, in text order (None when the verdict names none)."""
    bad = [c for c in step.claims if getattr(c, "verdict", None) == CONTRADICTED]
    return min(bad, key=lambda c: c.span[0], default=None)


def _wrong_in_itself(step: Step) -> bool:
    """Is the step's first contradicted claim wrong by its own computation (a resample of it
    alone can put it right)?"""
    first = _first_bad(step)
    return first is not None and getattr(first, "kind", "") in CLAIM_ROLLBACK_KINDS


def _first_contradicted(step: Step) -> int | None:
    """Where the step's first contradicted claim begins (a character of its text) when that
    claim's own computation is wrong; None for a step-level rollback. A false arithmetic claim
    keeps its expression and resamples from its wrong value (`58 - 16 = 44`: from `44`): the
    expression is not what is wrong, and writing it again was most of what a claim's rollback
    discarded (measured: 46 of async's 82 discarded tokens per problem)."""
    if not _wrong_in_itself(step):
        return None
    first = _first_bad(step)
    a, b = first.span
    if getattr(first, "kind", "") == ARITHMETIC:
        a += wrong_value_start(step.text[a:b]) or 0
    return a or None
