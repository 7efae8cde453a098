"""The engine interface the stages and the reasoning driver use, and how to get one.

Two engines implement it: the native `Engine` (pipeline/engine/engine.py) and `VLLMEngine`
(pipeline/vllm/backend.py, a vLLM OpenAI server behind the same calls). It is the
subset of the native API that the decode and prefill stages, the reasoning driver and the
eval runner call; sequences are the native `Sequence` either way.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.config import EngineConfig
from pipeline.engine.outputs import KVStorage, Request, RequestOutput, TokenOutput
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import StepBoundaryDetector, Tokenizer
from pipeline.formats import ReasoningFormat

ENGINES = ("native", "vllm")


class StepEngine(Protocol):
    """A continuous-batching engine driven one step at a time, with step-aware control."""

    config: EngineConfig
    tokenizer: Tokenizer
    step_detector: StepBoundaryDetector | None
    reasoning_format: ReasoningFormat  # how the model writes (docs/reasoning-formats.md)
    max_model_len: int
    can_export_kv: bool  # prefill hands KV over (native), or decode recomputes it (vLLM)

    def encode_prompt(self, prompt: str | list[dict[str, str]]) -> list[int]: ...
    def add(self, request: Request) -> Sequence: ...
    def step(self) -> list[TokenOutput]: ...
    @property
    def has_schedulable(self) -> bool: ...
    def has_unfinished(self) -> bool: ...
    def kv_usage(self) -> tuple[int, int]: ...
    def pause(self, request_id: str) -> None: ...
    def resume(self, request_id: str) -> None: ...
    def rollback(self, request_id: str, num_tokens: int, seed: int | None = None) -> None: ...
    def append_tokens(self, request_id: str, token_ids: list[int]) -> None: ...
    def finish(self, request_id: str, reason: str | None = None) -> Sequence: ...
    def finish_with(self, request_id: str, token_ids: list[int], reason: str) -> Sequence: ...
    def update_params(self, request_id: str, **changes: object) -> None: ...
    def abort(self, request_id: str) -> None: ...
    def close(self) -> None: ...
    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]: ...  # fmt: skip


def make_engine(
    config: EngineConfig,
    kind: str = "native",
    vllm_url: str = "",
    kv_storage: KVStorage | None = None,
) -> StepEngine:
    """The native engine, or the vLLM backend on the server at `vllm_url` (empty: start one).
    `kv_storage` places the native engine's KV pool (vLLM keeps its own)."""
    if kind == "native":
        from pipeline.engine.engine import Engine

        return Engine(config, kv_storage)
    if kind == "vllm":
        from pipeline.vllm.backend import VLLMEngine

        return VLLMEngine(config, url=vllm_url)
    raise ValueError(f"unknown engine {kind!r}; use one of {ENGINES}")
