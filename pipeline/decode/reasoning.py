"""The reasoning state machine of one sequence: steps, verdicts, backtracking (plain logic).

The machine sees what the engine did (a step completed, the sequence wants to finish) and what
the verifier said (a verdict for one attempt of one step), and answers with commands: check
this step, roll back to this token with this seed, resume, finish; plus the notes that become
the job's events. The decode worker (verdicts from Celery) and `stepwise eval --mode verify-*`
(verdicts from a local process) drive the same machine, so what is measured is what is served.

Verify modes (shared/DESIGN.md §7):
* `off`: steps are kept unchecked (verdict `unverified`).
* `async`: each step is sent for checking and decoding goes on; a contradiction rolls the
  sequence back to the start of the contradicted step, whatever came after it.
* `strict`: the engine pauses the sequence at every step end (`pause_on_step_end`); it resumes
  when the verdict is in.
A finish (EOS, length) is held by the engine (`pause_on_finish`) until every verdict is in, so
a late contradiction of the last step can still be undone.

Backtracking: a contradicted step is resampled from its start with a new seed, up to
`max_retries` times; then the step before it is dropped too (once per step); then, or after
`max_backtracks` in all, the job gives up: it is rolled back to the start of the failing step
and finishes honestly as `unverified`, with no contradicted step in its chain. A verdict that
does not arrive within `verdict_timeout_s` counts as `unknown` (reason timeout), so a lost task
never stalls a job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERIFY_MODES = ("off", "async", "strict")
CONTRADICTED = "contradicted"
UNVERIFIED = "unverified"
_MASK63 = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    verify: str = "async"
    max_retries: int = 8  # resamples of one step before the step before it is dropped too
    max_backtracks: int = 32  # per job; then it finishes as unverified
    verdict_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify mode must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.max_retries < 0 or self.max_backtracks < 0 or self.verdict_timeout_s <= 0:
            raise ValueError("max_retries, max_backtracks >= 0 and verdict_timeout_s > 0")


@dataclass(slots=True)
class Step:
    """One attempt at one step of the chain."""

    index: int
    start: int  # token position where the step begins
    end: int  # token position just after it (delimiter included)
    text: str
    key: str  # names this attempt; a verdict for another key is stale
    sent_s: float = 0.0
    verdict: str | None = None  # None: the verdict is pending
    detail: str = ""


# -- what the machine asks for -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """Send this step to the verifier, with the chain it follows."""

    key: str
    step: int
    text: str
    accepted: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rollback:
    """Truncate the sequence to `position` tokens and continue sampling with `seed`."""

    position: int
    seed: int


@dataclass(frozen=True, slots=True)
class Resume:
    """Put the sequence back into the running batch (no-op if it is running)."""


@dataclass(frozen=True, slots=True)
class Finish:
    """End the sequence now; `reason` is the held finish's, or `unverified` on giving up."""

    reason: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something the job's stream should say: a step, a verdict, a backtrack."""

    kind: str  # "step" | "verdict" | "backtrack"
    step: int
    text: str = ""
    verdict: str | None = None
    detail: str = ""


Action = Check | Rollback | Resume | Finish | Note


def reseed(seed: int, n: int) -> int:
    """The sampling seed of the n-th backtrack: different for every n, reproducible."""
    x = (seed + 0x9E3779B97F4A7C15 * (n + 1)) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (x ^ (x >> 31)) & _MASK63


@dataclass(slots=True)
class Reasoner:
    config: ReasoningConfig
    seed: int
    chain: list[Step] = field(default_factory=list)
    retries: dict[int, int] = field(default_factory=dict)  # step index -> resamples so far
    escalated: set[int] = field(default_factory=set)  # steps already dropped for their successor
    num_backtracks: int = 0
    num_checks: int = 0
    held_finish: str | None = None  # the engine is holding this finish until verdicts are in
    gave_up: bool = False
    finished: bool = False
    _attempts: int = 0

    @property
    def verifying(self) -> bool:
        return self.config.verify != "off"

    @property
    def pending(self) -> list[Step]:
        return [s for s in self.chain if s.verdict is None]

    # -- inputs ---------------------------------------------------------------------------

    def on_step(self, start: int, end: int, text: str, now_s: float) -> list[Action]:
        """The sequence completed a step spanning tokens [start, end)."""
        self._attempts += 1
        step = Step(len(self.chain), start, end, text, f"{len(self.chain)}.{self._attempts}")
        self.chain.append(step)
        actions: list[Action] = [Note("step", step.index, text)]
        if not self.verifying:
            step.verdict = UNVERIFIED
            return actions
        step.sent_s = now_s
        self.num_checks += 1
        accepted = tuple(s.text for s in self.chain[:-1])
        actions.append(Check(step.key, step.index, text, accepted))
        return actions

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
        if tail is not None and tail[2].strip():
            actions += self.on_step(*tail, now_s)
        self.held_finish = reason
        return actions + self._maybe_finish()

    def on_verdict(self, key: str, verdict: str, detail: str, now_s: float) -> list[Action]:
        """A verdict for the attempt `key`; one for a step no longer in the chain is ignored."""
        step = next((s for s in self.chain if s.key == key), None)
        if step is None or step.verdict is not None or self.finished:
            return []
        step.verdict, step.detail = verdict, detail
        actions: list[Action] = [Note("verdict", step.index, step.text, verdict, detail)]
        if verdict == CONTRADICTED:
            return actions + self._backtrack(step)
        if self.config.verify == "strict" and step is self.chain[-1]:
            actions.append(Resume())
        return actions + self._maybe_finish()

    def on_tick(self, now_s: float) -> list[Action]:
        """Time passes: verdicts overdue by `verdict_timeout_s` count as unknown."""
        actions: list[Action] = []
        deadline = now_s - self.config.verdict_timeout_s
        for step in self.pending:
            if step.sent_s <= deadline:
                actions += self.on_verdict(step.key, "unknown", "timeout: no verdict", now_s)
        return actions

    # -- outputs --------------------------------------------------------------------------

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
        if self.retries[i] > self.config.max_retries:
            if i == 0 or (i - 1) in self.escalated:
                return self._give_up(bad, f"step {i} failed {self.retries[i]} times")
            self.escalated.add(i - 1)
            self.retries[i] = 0
            target = i - 1
        position = self.chain[target].start
        del self.chain[target:]
        self.held_finish = None
        seed = reseed(self.seed, self.num_backtracks)
        detail = (
            f"step {i} contradicted ({bad.detail or 'no detail'}); resampling from step {target}"
        )
        return [
            Note("backtrack", target, bad.text, CONTRADICTED, detail),
            Rollback(position, seed),
            Resume(),
        ]

    def _give_up(self, bad: Step, why: str) -> list[Action]:
        self.gave_up = self.finished = True
        position = bad.start
        del self.chain[bad.index :]
        self.held_finish = None
        detail = f"giving up: {why}; finishing unverified at step {bad.index}"
        return [
            Note("backtrack", bad.index, bad.text, CONTRADICTED, detail),
            Rollback(position, self.seed),
            Finish(UNVERIFIED),
        ]
