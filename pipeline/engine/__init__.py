"""The native inference engine: paged KV, continuous batching, step-wise control.

Nothing here knows about Kafka, Redis or Celery.
"""

from pipeline.config import EngineConfig
from pipeline.engine.engine import Engine, EngineStats
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.outputs import KVBlocks, KVExport, Request, RequestOutput, TokenOutput
from pipeline.engine.sampling_params import SamplingParams

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
