"""Which engine a worker (or `stepwise eval`, `stepwise generate`) runs: the native one, or vLLM
behind the same interface (pipeline/engine/base.py: `StepEngine`). It sits above both engines,
so neither imports the other."""

from __future__ import annotations

from pipeline.config import EngineConfig
from pipeline.engine.base import StepEngine
from pipeline.engine.engine import Engine
from pipeline.engine.outputs import KVStorage
from pipeline.vllm.engine import VLLMEngine

ENGINES = ("native", "vllm")


def make_engine(
    config: EngineConfig,
    kind: str = "native",
    vllm_url: str = "",
    kv_storage: KVStorage | None = None,
) -> StepEngine:
    """The native engine, or the vLLM engine on the server at `vllm_url` (empty: start one).
    `kv_storage` places the native engine's KV pool (vLLM keeps its own)."""
    if kind == "native":
        return Engine(config, kv_storage)
    if kind == "vllm":
        return VLLMEngine(config, url=vllm_url)
    raise ValueError(f"unknown engine {kind!r}; use one of {ENGINES}")
