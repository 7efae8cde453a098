"""The engine interface: a continuous-batching engine driven one step at a time, with step-aware
control (pause, resume, rollback, forced text), and what its two implementations share.

The native `Engine` (pipeline/engine/engine.py) and `VLLMEngine` (pipeline/vllm/engine.py, a vLLM
OpenAI server behind the same calls) subclass `StepEngine`: the stages, the reasoning loop and
the eval runner call nothing else. Both keep their live sequences in `self.seqs` and admit one
through `self.add`; the shared parts here work on that alone, so they touch neither torch nor a
server (vLLM's side stays torch-free). `pipeline/stage/engines.py` picks one (`make_engine`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace

from tqdm import tqdm

from pipeline.config import EngineConfig
from pipeline.engine.outputs import Request, RequestOutput, TokenOutput
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import StepBoundaryDetector, Tokenizer
from pipeline.errors import (
    InvalidRequestError,
    KVPoolExhaustedError,
    PromptTooLongError,
    UnknownRequestError,
)
from pipeline.formats import ReasoningFormat


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
    num_forwards: int = 0  # steps that ran the model (a speculative hand-out runs none)
    # Speculative decoding: tokens proposed and accepted, and the forwards that verified them.
    num_spec_proposed: int = 0
    num_spec_accepted: int = 0
    num_spec_forwards: int = 0

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}


class StepEngine(ABC):
    """A continuous-batching engine driven one step at a time, with step-aware control."""

    config: EngineConfig
    tokenizer: Tokenizer | None
    step_detector: StepBoundaryDetector | None
    reasoning_format: ReasoningFormat  # how the model writes (docs/reasoning-formats.md)
    can_export_kv: bool  # prefill hands KV over (native), or decode recomputes it (vLLM)
    supports_guided: bool = False  # structured output (SamplingParams.guided) is enforced
    seqs: dict[str, Sequence]
    max_model_len: int
    _arrivals: int
    _seed_rng: random.Random

    @abstractmethod
    def add(self, request: Request) -> Sequence:
        """Admit a request (each engine its own way: a scheduler, or a server's submission)."""

    @abstractmethod
    def step(self) -> list[TokenOutput]:
        """One engine step: a token for every running sequence (and prefill chunks)."""

    @property
    @abstractmethod
    def has_schedulable(self) -> bool:
        """Some sequence can run (not every live one is paused)."""

    @abstractmethod
    def kv_usage(self) -> tuple[int, int]:
        """(blocks in use, blocks in all) of the KV pool; (0, 0) where it is not ours."""

    @abstractmethod
    def pause(self, request_id: str) -> None:
        """Take a sequence out of the running batch; it keeps its KV."""

    @abstractmethod
    def resume(self, request_id: str) -> None:
        """Put a paused sequence back into the running batch."""

    @abstractmethod
    def rollback(self, request_id: str, num_tokens: int, seed: int | None = None) -> None:
        """Truncate a sequence to `num_tokens` tokens (its KV too) and sample on with `seed`."""

    @abstractmethod
    def append_tokens(self, request_id: str, token_ids: list[int]) -> None:
        """Put text in after the last token (forcing text); decoding continues after it."""

    @abstractmethod
    def abort(self, request_id: str) -> None:
        """Drop a sequence and everything it holds."""

    @abstractmethod
    def close(self) -> None:
        """Release the engine's resources (a server it started, its pools)."""

    def stalled(self) -> bool:
        """The last step scheduled nothing although sequences wait (the native engine's KV pool
        held by paused ones); `generate` fails rather than spins."""
        return False

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

    def generate(
        self,
        prompts: Seq[str] | Seq[list[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Run prompts (text or token ids) to completion; outputs in the prompts' order."""
        seqs = self.add_prompts(prompts, params)
        bar = tqdm(total=len(seqs), desc="generate", unit="req") if use_tqdm else None
        try:
            while any(not s.is_finished for s in seqs):
                if not self.has_schedulable:
                    raise InvalidRequestError("only paused sequences left: resume them first")
                outs = self.step()
                if self.stalled():
                    raise KVPoolExhaustedError(
                        "no sequence fits the KV pool (paused sequences hold the blocks)"
                    )
                if bar is not None:
                    bar.update(sum(o.finished for o in outs))
        finally:
            if bar is not None:
                bar.close()
        return [self.request_output(s) for s in seqs]

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
