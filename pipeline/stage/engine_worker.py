"""The shell of the stages that own an engine (prefill, decode): a StageWorker whose engine
runs on a thread of its own. Kept apart from pipeline/stage/worker.py so that importing the shared
shell never loads torch."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from pipeline.config import EngineConfig, PipelineConfig, SpeculativeConfig
from pipeline.engine.base import StepEngine
from pipeline.engine.outputs import KVStorage
from pipeline.models.resolve import resolve_model
from pipeline.stage.engines import make_engine
from pipeline.stage.worker import StageWorker

log = logging.getLogger(__name__)


class EngineStageWorker(StageWorker):
    """A stage that owns an Engine (prefill, decode). The engine lives on one thread of its
    own, so steps never block the event loop (and its group heartbeats); every engine call goes
    through `in_engine`."""

    async def start_engine(
        self, max_num_seqs: int, kv_storage: KVStorage | None = None, extra_kv_gb: float = 0.0
    ) -> StepEngine:
        """The native engine, or the vLLM backend (`config.engine`) on `config.vllm_url`.

        `kv_storage` / `extra_kv_gb`: where the native engine's KV pool lives, and how much
        bigger than the default it is (prefill's lent blocks take that part)."""
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.stage}-engine")
        config = engine_config(self.config, max_num_seqs, extra_kv_gb)
        c = self.config
        self.engine: StepEngine = await self.in_engine(
            make_engine, config, c.engine, c.vllm_url, kv_storage
        )
        return self.engine

    async def in_engine(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def teardown(self) -> None:
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.shutdown(wait=True)
        if (engine := getattr(self, "engine", None)) is not None:
            log_engine_stats(self.worker_id, engine)
            engine.close()  # the vLLM backend stops a server it started


def engine_config(
    config: PipelineConfig, max_num_seqs: int, extra_kv_gb: float = 0.0
) -> EngineConfig:
    """The engine a stage worker runs: its model (resolved to a path), dtype and batch size."""
    path = resolve_model(config.model)
    engine = EngineConfig(
        model=str(path),
        dtype=config.dtype,
        max_num_seqs=max_num_seqs,
        reasoning_format=config.reasoning_format or None,
        speculative=SpeculativeConfig.from_json(config.speculative_config),
    )
    engine.kv_cache_memory_gb += extra_kv_gb
    return engine


def log_engine_stats(worker_id: str, engine: StepEngine) -> None:
    """Where the engine's time went over the worker's life (the native engine keeps stats)."""
    if (stats := getattr(engine, "stats", None)) is not None:
        log.info("%s engine: %s", worker_id, stats.as_dict())
