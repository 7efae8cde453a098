"""What the two engines share: sequence lookups, text in and out, batch submission, counters.

The native `Engine` (pipeline/engine/engine.py) and the vLLM backend (pipeline/vllm/backend.py)
both keep their live sequences in `self.seqs` and admit one through `self.add`; everything here
works on that alone, so it touches neither torch nor a server (vLLM's side stays torch-free).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

from pipeline.engine.outputs import Request, RequestOutput
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import InvalidRequestError, UnknownRequestError


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


class EngineBase:
    """The engine API's parts that need only the live sequences and the tokenizer."""

    tokenizer: Tokenizer | None
    seqs: dict[str, Sequence]
    _arrivals: int

    def add(self, request: Request) -> Sequence:  # each engine admits its own way
        raise NotImplementedError

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
