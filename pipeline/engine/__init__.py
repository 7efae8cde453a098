"""The native inference engine: paged KV, continuous batching, step-wise control.

Nothing here knows about Kafka, Redis or Celery. The names below load on first use (PEP 562),
so the light modules of this package (model_config, tokenizer, prepare) can be imported by
the control plane without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    "EngineConfig": "pipeline.config",
    "Engine": "pipeline.engine.engine",
    "EngineStats": "pipeline.engine.base",
    "ModelConfig": "pipeline.engine.model_config",
    "KVBlocks": "pipeline.engine.outputs",
    "KVExport": "pipeline.engine.outputs",
    "Request": "pipeline.engine.outputs",
    "RequestOutput": "pipeline.engine.outputs",
    "TokenOutput": "pipeline.engine.outputs",
    "SamplingParams": "pipeline.engine.sampling_params",
}

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineStats",
    "KVBlocks",
    "KVExport",
    "ModelConfig",
    "Request",
    "RequestOutput",
    "SamplingParams",
    "TokenOutput",
]

if TYPE_CHECKING:
    from pipeline.config import EngineConfig
    from pipeline.engine.engine import Engine, EngineStats
    from pipeline.engine.model_config import ModelConfig
    from pipeline.engine.outputs import KVBlocks, KVExport, Request, RequestOutput, TokenOutput
    from pipeline.engine.sampling_params import SamplingParams


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
