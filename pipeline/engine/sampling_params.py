"""Per-request sampling parameters (vLLM's names and meanings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.engine.grammar import GuidedDecoding
from pipeline.errors import InvalidRequestError


@dataclass(slots=True)
class SamplingParams:
    """How to pick tokens and when to stop. temperature == 0 means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k
    min_p: float = 0.0
    seed: int | None = None  # None: the engine assigns one, so every run is reproducible
    max_tokens: int = 256
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    # Step-aware control: leave the running batch after each completed reasoning step, so the
    # caller can check the step before the sequence continues (verify mode "strict").
    pause_on_step_end: bool = False
    # Hold the finish (EOS, stop token or length): the sequence leaves the batch with its blocks
    # and the caller either commits it with `Engine.finish` or rolls it back and resumes it
    # (a late verdict may still reject the last step).
    pause_on_finish: bool = False
    # Tokens discarded by `rollback` count toward `max_tokens`: a reasoning budget pays for
    # every token generated, kept or not.
    charge_rollbacks: bool = False
    # Structured output: what follows the thinking is held to a grammar (guided.py).
    guided: GuidedDecoding | None = None
    # Whose earlier outputs `suffix` speculation may read and add to (decode: the tenant);
    # None: those of other requests without a scope on this engine.
    spec_scope: str | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise InvalidRequestError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidRequestError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be >= 1, got {self.max_tokens}")
        self.stop_token_ids = tuple(self.stop_token_ids)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0
