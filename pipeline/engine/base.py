"""What the two engines share: sequence lookups, text in and out, batch submission, counters.

The native `Engine` (pipeline/engine/engine.py) and the vLLM backend (pipeline/vllm/backend.py)
both keep their live sequences in `self.seqs` and admit one through `self.add`; everything here
works on that alone, so it touches neither torch nor a server (vLLM's side stays torch-free).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace

from pipeline.engine.outputs import Request, RequestOutput
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import InvalidRequestError, PromptTooLongError, UnknownRequestError


@dataclass(slots=True)
class EngineStats:
    num_steps: int = 0
    step_s: float = 0.0  # wall time inside step(), cumulative
    forward_s: float = 0.0  # of which: model forward + logits + sampling
    # CPU time of the calling thread in those forwards: well below forward_s means the forward
    # waited (for the GIL, or for a core other processes hold), not that it computed.
    forward_cpu_s: float = 0.0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_generated_tokens: int = 0

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}


class EngineBase(ABC):
    """The engine API's parts that need only the live sequences and the tokenizer."""

    tokenizer: Tokenizer | None
    seqs: dict[str, Sequence]
    max_model_len: int
    _arrivals: int
    _seed_rng: random.Random

    @abstractmethod
    def add(self, request: Request) -> Sequence:
        """Admit a request (each engine its own way: a scheduler, or a server's submission)."""

    def _check_prompt(self, request: Request, vocab_size: int) -> None:
        """A new id, a prompt not empty, its ids in the vocabulary, room for one more token."""
        if request.request_id in self.seqs:
            raise InvalidRequestError(f"request {request.request_id!r} is already in the engine")
        ids = request.prompt_token_ids
        if not ids:
            raise InvalidRequestError("the prompt is empty")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise InvalidRequestError(f"prompt token ids must lie in [0, {vocab_size})")
        if len(ids) >= self.max_model_len:
            raise PromptTooLongError(
                f"prompt has {len(ids)} tokens; this model's context is {self.max_model_len} "
                "and at least one token must be generated"
            )

    def _make_sequence(self, request: Request) -> Sequence:
        """The request's Sequence, with a seed of its own when it brings none."""
        p, ids = request.params, request.prompt_token_ids
        seed = p.seed if p.seed is not None else self._seed_rng.getrandbits(63)
        self._arrivals += 1
        return Sequence(request.request_id, list(ids), p, seed, self._arrivals, request.priority)

    def encode_prompt(self, prompt: str | list[dict[str, str]]) -> list[int]:
        """Text -> token ids; a list of chat messages goes through the chat template."""
        if self.tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer: send token ids")
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        return self.tokenizer.apply_chat_template(prompt)

    def _get(self, request_id: str) -> Sequence:
        seq = self.seqs.get(request_id)
        if seq is None:
            raise UnknownRequestError(f"no unfinished request {request_id!r} in this engine")
        return seq

    @property
    def num_unfinished(self) -> int:
        return len(self.seqs)

    def has_unfinished(self) -> bool:
        return bool(self.seqs)

    @abstractmethod
    def finish(self, request_id: str, reason: str | None = None) -> Sequence:
        """End a sequence now, its tokens kept."""

    def update_params(self, request_id: str, **changes: object) -> None:
        """Change a live sequence's sampling params (forcing the answer: greedy, a new limit);
        they apply from its next sampled token."""
        seq = self._get(request_id)
        seq.params = replace(seq.params, **changes)

    def finish_with(self, request_id: str, token_ids: list[int], reason: str) -> Sequence:
        """Put `token_ids` after the last token and end the sequence: text that no forward pass
        needs (an early exit's answer), so no KV is computed for it and nothing samples after."""
        self._get(request_id).token_ids.extend(token_ids)
        return self.finish(request_id, reason)

    def add_prompts(
        self,
        prompts: Seq[str] | Seq[list[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
    ) -> list[Sequence]:
        """Queue prompts (text or token ids), one set of params for all or one each."""
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise InvalidRequestError("prompts and params differ in length")
        seqs = []
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
            ids = self.encode_prompt(prompt) if isinstance(prompt, str) else list(prompt)
            seqs.append(self.add(Request(f"generate-{self._arrivals}-{i}", ids, p)))
        return seqs

    def request_output(self, seq: Sequence) -> RequestOutput:
        out_ids = seq.output_token_ids
        text = self.tokenizer.decode(out_ids) if self.tokenizer is not None else ""
        return RequestOutput(
            seq.request_id,
            seq.token_ids[: seq.num_prompt_tokens],
            out_ids,
            text,
            seq.finish_reason,
            [e - seq.num_prompt_tokens for e in seq.step_ends],
        )
