"""The reasoning machine's vocabulary: its configuration, its steps, and the commands it answers
with (check, roll back, resume, finish, pause, force the answer, probe, exit with an answer; and
the notes that become events). The machine itself is reasoning.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline import schema
from pipeline.formats import ReasoningFormat, get_format
from pipeline.toolcalls import before_calls

VERIFY_MODES = schema.VERIFY_MODES
CONTRADICTED = "contradicted"
VERIFIED = ("entailed", "consistent")  # a step whose claims the verifier read and did not refute
UNVERIFIED = "unverified"


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    verify: str = "async"
    max_retries: int = 8  # resamples of one step before the step before it is dropped too
    max_backtracks: int = 32  # per job; then it finishes as unverified
    # Times one claim may be refuted at a step, once the step before was dropped for it, and
    # still be resampled; the next time the job finishes as unverified (the claim follows
    # from further back: more resamples only write it again).
    max_repeats: int = 1
    verdict_timeout_s: float = 10.0
    max_repairs: int = 64  # verify mode `repair`: values replaced per job, then checks only
    # What a contradiction rolls back: from its first contradicted claim (the step's text before
    # it kept), or the whole step (the rule before claims were the unit; for comparisons).
    rollback: str = "claim"
    # A false claim with no unknowns contradicts its step in decode, with no round trip to the
    # checker (pipeline/verify/fast.py); off: every verdict comes from the checker.
    fast_verdicts: bool = True
    # Budget (None: unlimited). Live limits may tighten them while the job runs.
    max_thinking_tokens: int | None = None
    max_steps: int | None = None
    # How the model writes (markers, answers, the forcing text, the probe): the engine's.
    format: ReasoningFormat = field(default_factory=lambda: get_format("tiny"))
    answer_tokens: int = 24  # greedy tokens for a forced or probed answer
    # Early exit.
    early_exit: bool = False
    # A grammar writes the answer (structured output): an early exit closes the thinking and
    # hands over to it, as budget forcing does, instead of writing the probed value.
    answer_by_grammar: bool = False
    probe_every: int = 1  # probe after every n-th step (the budget's "probe effort"; 0: never)
    probe_agree: int = 2  # exit when this many consecutive probes give the same answer
    # ... or when one probe's mean token probability reaches this (None: off). Off by default:
    # the tiny reasoner answers its first step's value with p > 0.99, right or wrong, and this
    # criterion cost 50-67 accuracy points (bench/early_exit.py, bench/RESULTS.md).
    probe_confidence: float | None = None

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify mode must be one of {VERIFY_MODES}, got {self.verify!r}")
        if min(self.max_retries, self.max_backtracks, self.max_repeats) < 0:
            raise ValueError("max_retries, max_backtracks and max_repeats must be >= 0")
        if self.verdict_timeout_s <= 0:
            raise ValueError("verdict_timeout_s must be > 0")
        if (self.max_thinking_tokens or 1) < 1 or (self.max_steps or 1) < 1:
            raise ValueError("budgets must be positive")
        if self.rollback not in ("claim", "step"):
            raise ValueError(f"rollback must be claim or step, got {self.rollback!r}")
        if self.probe_every < 0 or self.probe_agree < 1 or self.answer_tokens < 1:
            raise ValueError("probe_every >= 0, probe_agree >= 1 and answer_tokens >= 1")


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
    claims: Sequence[Any] = ()  # the verifier's per-claim verdicts (.verdict, .reason, spans)
    # The text up to a tool call's opener (all of it without one): what verification may read.
    # Read once here; the machine asks of every step whether a call has begun.
    checked: str = field(init=False)

    def __post_init__(self) -> None:
        self.checked = before_calls(self.text)

    @property
    def opens_call(self) -> bool:
        return len(self.checked) != len(self.text)


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
    """Truncate the sequence to `position` tokens and continue sampling with `seed`; with
    `claim_char`, to where that character of the step starting at `position` begins (the
    contradicted claim's start: the step's text before it is kept)."""

    position: int
    seed: int
    claim_char: int | None = None


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
    claims: Sequence[Any] = ()


@dataclass(frozen=True, slots=True)
class Pause:
    """Take the sequence out of the running batch (it keeps its KV)."""


@dataclass(frozen=True, slots=True)
class ForceAnswer:
    """Cut the sequence to `position` (None: nothing cut, the thinking closes where it stands),
    append the forcing text, decode the answer greedily."""

    position: int | None


@dataclass(frozen=True, slots=True)
class Probe:
    """Start an answer probe on the sequence's first `position` tokens."""

    key: str
    position: int


@dataclass(frozen=True, slots=True)
class ExitWith:
    """Cut the sequence to `position`, append the cue and probe `key`'s answer, finish."""

    position: int
    key: str


Action = Check | Rollback | Resume | Finish | Note | Pause | ForceAnswer | Probe | ExitWith


# -- helpers -------------------------------------------------------------------------------

_MASK63 = (1 << 63) - 1


def normalize_answer(text: str) -> str:
    return " ".join(text.split()).lower().rstrip(".")


def reseed(seed: int, n: int) -> int:
    """The sampling seed of the n-th backtrack: different for every n, reproducible."""
    x = (seed + 0x9E3779B97F4A7C15 * (n + 1)) & ((1 << 64) - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (x ^ (x >> 31)) & _MASK63
