"""A request's token sequence and its bookkeeping. No torch here."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from enum import Enum, auto
from typing import TYPE_CHECKING

from pipeline.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from pipeline.engine.tokenizer import StepBoundaryDetector


class SequenceStatus(Enum):
    WAITING = auto()  # needs (re)prefill or has not been admitted yet
    RUNNING = auto()  # in the running batch
    PAUSED = auto()  # out of the batch, keeps its blocks
    FINISHED = auto()


class Sequence:
    """Token ids plus how many of them have KV in the cache (`num_computed_tokens`)."""

    __slots__ = (
        "request_id",
        "token_ids",
        "num_prompt_tokens",
        "num_computed_tokens",
        "num_cached_tokens",
        "block_table",
        "status",
        "params",
        "seed",
        "step_ends",
        "step_tail",
        "finish_reason",
        "pending_finish",
        "num_discarded_tokens",
        "cumulative_logprob",
        "arrival",
        "priority",
        "guide",
        "spec_buffer",
        "num_draft",
        "spec_acceptance",
        "spec_tree",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        seed: int,
        arrival: int,
        priority: int = 0,
    ) -> None:
        self.request_id = request_id
        self.priority = priority
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prefix-cache hits at admission
        self.block_table: list[int] = []
        self.status = SequenceStatus.WAITING
        self.params = params
        self.seed = seed
        # Token counts at which completed reasoning steps ended (exclusive end indices).
        self.step_ends: list[int] = []
        self.step_tail = ""  # text tail for delimiters that straddle tokens
        self.finish_reason: str | None = None
        self.pending_finish: str | None = None  # a held finish (SamplingParams.pause_on_finish)
        self.num_discarded_tokens = 0  # generated tokens that rollbacks threw away
        self.cumulative_logprob = 0.0  # of the sampled tokens (rollbacks do not undo it)
        self.arrival = arrival
        self.guide = None  # structured output's state (guided.Guide), made on first sample
        # Speculative decoding (engine.py): tokens verified in one forward pass, handed out one
        # per step as if sampled then; and how many proposed tokens sit after the last token
        # while a step computes them.
        self.spec_buffer: list[tuple[int, float, float]] = []
        self.num_draft = 0
        self.spec_acceptance = None  # speculative.Acceptance, made on the first proposal
        self.spec_tree = None  # suffix.RequestTree of `suffix` speculation, made likewise

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_steps(self) -> int:
        return len(self.step_ends)

    @property
    def step_start(self) -> int:
        """Token index where the current (unfinished) step began."""
        return self.step_ends[-1] if self.step_ends else self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_sampled(
        self,
        token: int,
        logprob: float,
        step_detector: StepBoundaryDetector | None,
        eos_token_ids: Collection[int],
    ) -> tuple[bool, bool]:
        """Record a sampled token; (whether it completes a step, whether it stops the sequence:
        an end-of-sequence token unless ignored, or one of the request's stop tokens)."""
        self.token_ids.append(token)
        self.cumulative_logprob += logprob
        ends_step = self.feed_step(step_detector, token, self.num_tokens)
        p = self.params
        stops = (not p.ignore_eos and token in eos_token_ids) or token in p.stop_token_ids
        return ends_step, stops

    def feed_step(self, detector: StepBoundaryDetector | None, token: int, end: int) -> bool:
        """The one step-boundary feed: `token` (which ends at position `end`) goes through the
        detector; a step it completes is recorded. Whether it completed one."""
        if detector is None:
            return False
        ends, self.step_tail = detector.feed(self.step_tail, token)
        if ends:
            self.step_ends.append(end)
        return ends

    def extend(self, token_ids: Iterable[int], detector: StepBoundaryDetector | None) -> None:
        """Put tokens the caller chose after the last one, their step boundaries recorded."""
        for t in token_ids:
            self.token_ids.append(t)
            self.feed_step(detector, t, self.num_tokens)

    def fail(self) -> None:
        """End a sequence its engine no longer holds, as an error (decode's last resort)."""
        self.status = SequenceStatus.FINISHED
        self.finish_reason = "error"

    def truncate(self, num_tokens: int) -> None:
        """Keep the first `num_tokens` tokens; KV past them is no longer valid."""
        self.token_ids = self.token_ids[:num_tokens]
        # The last kept token is re-fed so its logits can be sampled from.
        self.num_computed_tokens = min(self.num_computed_tokens, num_tokens - 1)
        while self.step_ends and self.step_ends[-1] > num_tokens:
            self.step_ends.pop()
        self.step_tail = ""

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, status={self.status.name})"
        )
